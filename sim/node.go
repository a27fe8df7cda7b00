package sim

import (
	"math"
	"time"

	"github.com/nakcast/nakcast/digest"
)

// Never is the deadline of a node that has no timer pending. Any negative
// deadline is treated the same way.
const Never time.Duration = math.MaxInt64

// Node is a group member as the simulator sees it: a state machine that is
// handed datagrams and timer expiries and produces datagrams. The simulator
// calls a node only from its own goroutine, one call at a time, and after
// every call (Receive, Tick, or an action scheduled with Sim.Do) it drains
// the node's outgoing datagrams and asks for its next deadline.
//
// A gms layer sits on top by implementing Node itself: it receives every
// datagram, hands protocol traffic to its nakack.Protocol and keeps the
// membership messages, and merges both outboxes in Drain.
type Node interface {
	// Member identifies the node on the virtual network; unicast datagrams
	// are addressed to it. It must not change while the node is in a Sim.
	Member() digest.Member
	// Receive hands the node one datagram sent by from. datagram is only
	// valid during the call: a node that keeps it must copy it.
	Receive(from digest.Member, datagram []byte, now time.Duration)
	// Tick fires every timer due at or before now.
	Tick(now time.Duration)
	// NextDeadline returns the virtual time of the node's earliest pending
	// timer, or Never (or any negative value) when there is none.
	NextDeadline() time.Duration
	// Drain calls send once for every datagram the node has produced since
	// the last Drain, in order, and then forgets them. to is the destination
	// member, or the zero Member for a multicast to the group. The simulator
	// copies datagram during send, so the node may reuse or release its
	// buffer as soon as send returns.
	Drain(send func(to digest.Member, datagram []byte))
}

// nodeState is the simulator's bookkeeping for one node.
type nodeState struct {
	node   Node
	member digest.Member
	up     bool
	// timerAt is the time of the pending timer event whose generation is
	// gen, or Never when no timer event is pending.
	timerAt time.Duration
	gen     uint64
	// lastTick and sameTicks detect a node whose deadline never advances
	// past the current time (it would spin the simulator forever).
	lastTick  time.Duration
	sameTicks int
	// burstBad and sendBad are the node's Gilbert-Elliott chains: as a
	// receiver (NetConfig.Burst) and as a sender (NetConfig.SharedBurst).
	burstBad, sendBad bool
}

func normDeadline(d time.Duration) time.Duration {
	if d < 0 {
		return Never
	}
	return d
}
