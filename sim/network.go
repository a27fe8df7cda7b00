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
	// Loopback delivers a multicast to its own sender too, as IP multicast
	// with IP_MULTICAST_LOOP does. Off by default: nakack delivers its own
	// messages without the network.
	Loopback bool
}

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
