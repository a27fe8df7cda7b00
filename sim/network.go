package sim

import (
	"time"

	"github.com/nakcast/nakcast/digest"
)

// DefaultLatency is the base one-way latency used when NetConfig.Latency is
// zero: a LAN-like 50µs.
const DefaultLatency = 50 * time.Microsecond

// NetConfig describes the virtual network. Probabilities are in [0, 1]. The
// zero value is a loss-free network with DefaultLatency and no jitter. See
// the package comment for the delay model.
type NetConfig struct {
	// Latency is the base one-way delay of every link (DefaultLatency if 0).
	Latency time.Duration
	// Jitter is the width of the uniform delay added to every copy.
	Jitter time.Duration
	// SharedLoss is the probability that a datagram is dropped near its
	// sender, so that no receiver gets it.
	SharedLoss float64
	// Loss is the probability that one receiver's copy is dropped,
	// independently of the other receivers.
	Loss float64
	// Duplicate is the probability that a delivered copy is delivered a
	// second time, with its own delay.
	Duplicate float64
	// Reorder is the probability that a copy gets an extra delay drawn
	// uniformly from [0, ReorderDelay).
	Reorder float64
	// ReorderDelay bounds the extra reordering delay (10 × Latency if 0).
	ReorderDelay time.Duration
	// Burst is bursty loss per receiver copy: one Gilbert-Elliott chain per
	// receiver, stepped once per copy sent to it, applied after Loss.
	Burst GilbertElliott
	// SharedBurst is bursty loss near the sender: one Gilbert-Elliott
	// chain per sending node, stepped once per datagram it sends; a
	// datagram it drops reaches no receiver.
	SharedBurst GilbertElliott
	// Loopback delivers a multicast to its own sender too, as IP multicast
	// with IP_MULTICAST_LOOP does. Off by default: nakack delivers its own
	// messages without the network.
	Loopback bool
}

// GilbertElliott is a two-state bursty loss model: a chain in a good or a
// bad state, stepped once per datagram (first the transition, then the
// drop, each its own random draw), dropping with LossGood in the good state
// and LossBad in the bad one. Bursts of the bad state last 1/BadToGood
// datagrams on average. The zero value (GoodToBad 0) is off: the chain never
// leaves the good state and nothing is drawn for it.
type GilbertElliott struct {
	GoodToBad, BadToGood float64
	LossGood, LossBad    float64
}

// On reports whether the model is enabled.
func (g GilbertElliott) On() bool { return g.GoodToBad > 0 }

// MeanLoss returns the stationary loss rate of the chain.
func (g GilbertElliott) MeanLoss() float64 {
	if !g.On() {
		return 0
	}
	pb := g.GoodToBad / (g.GoodToBad + g.BadToGood)
	return (1-pb)*g.LossGood + pb*g.LossBad
}

// step advances a chain in state *bad by one datagram and reports whether
// that datagram is dropped.
func (g GilbertElliott) step(bad *bool, draw func() float64) bool {
	if *bad {
		*bad = draw() >= g.BadToGood
	} else {
		*bad = draw() < g.GoodToBad
	}
	loss := g.LossGood
	if *bad {
		loss = g.LossBad
	}
	return draw() < loss
}

// Blocked says which datagrams a directed link drops (Sim.Block): a
// one-way outage of multicast, of unicast, or of both.
type Blocked uint8

// What Sim.Block drops.
const (
	BlockMulticast Blocked = 1 << iota
	BlockUnicast
)

// Link overrides the latency and jitter of one directed link.
type Link struct {
	Latency time.Duration
	Jitter  time.Duration
}

// NetStats counts what the virtual network did.
type NetStats struct {
	// Sent counts datagrams handed to the network (a multicast counts once).
	Sent uint64
	// SharedDrops counts datagrams dropped near their sender.
	SharedDrops uint64
	// Drops counts receiver copies dropped by independent loss, partitions
	// or a crashed receiver.
	Drops uint64
	// Duplicates counts extra copies scheduled.
	Duplicates uint64
	// Delivered counts copies handed to a node's Receive.
	Delivered uint64
	// Bytes counts the bytes of the datagrams handed to the network.
	Bytes uint64
}

// TapKind says at which point of its journey a TapEvent saw a datagram.
type TapKind uint8

const (
	// TapSend: a node handed the datagram to the network. To is the
	// destination, zero for a multicast.
	TapSend TapKind = iota + 1
	// TapDrop: a copy was dropped. To is zero when the datagram was dropped
	// near the sender (shared loss) for every receiver.
	TapDrop
	// TapDeliver: a copy is about to be handed to To's Receive.
	TapDeliver
)

// TapEvent is what a tap sees. Data is the datagram, read-only, and only
// valid during the tap call.
type TapEvent struct {
	Kind     TapKind
	At       time.Duration
	From, To digest.Member
	Data     []byte
}

// partition is an active partition: group[i] is node i's group id; members
// not named in any group share group 0.
type partition struct {
	id    uint64
	group map[digest.Member]int
}

func (p *partition) reach(a, b digest.Member) bool {
	return p.group[a] == p.group[b]
}

type linkKey struct{ from, to int32 }
