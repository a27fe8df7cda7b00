package ebpf

import (
	"errors"
	"fmt"
	"time"

	"github.com/nakcast/nakcast/engine/transport"
)

// Options tune the AF_XDP backend. The zero value selects every default.
type Options struct {
	// Mode is how the XDP program attaches: "" (native, the driver's
	// hook, where the driver has one, else generic; native only on
	// veth), "native" (fail without driver support) or "generic" (the
	// stack's hook: any driver, slower on a NIC). Generic on veth only
	// where no peer sends with UDP segmentation offload (the UDP backend
	// does by default, NoGSO turns it off): the generic hook gets such a
	// run as one buffer, which the program takes for one datagram when
	// the run fits the MTU, so all of it but the first datagram is lost
	// and must be repaired (a run longer than the MTU goes to the stack,
	// which cuts it); native XDP on veth turns the peer's offload off.
	Mode string
	// Frames is the number of receive frames of each socket's UMEM, and
	// the fill and RX rings' size (a power of two, default 8192, at most
	// 65536). A smaller fill ring drops bursts: 2048 frames lost about
	// 0.5% of a veth stream where 8192 lost none.
	Frames int
	// TxFrames is the number of send frames (and the TX and completion
	// rings' size; a power of two, default 2048, at most 65536).
	TxFrames int
	// BusyPoll, above 0, turns busy polling on: the sockets get
	// SO_BUSY_POLL of this time, SO_PREFER_BUSY_POLL and
	// SO_BUSY_POLL_BUDGET where the kernel takes them, and a read that
	// finds the rings empty asks the kernel to poll the device's queue in
	// the reading thread (recvfrom), as does ReadBatch before it sleeps.
	// For a NIC whose interrupts are deferred (napi_defer_hard_irqs,
	// gro_flush_timeout) this is what moves frames; on veth, whose queue
	// the sender's transmit already drives, it only costs a system call
	// an empty poll. Default 0: off.
	BusyPoll time.Duration
}

// Attach modes for Options.Mode.
const (
	ModeNative  = "native"
	ModeGeneric = "generic"
)

// Defaults and bounds of Options.
const (
	DefaultFrames   = 8192
	DefaultTxFrames = 2048
	MaxFrames       = 1 << 16
)

// Config describes an AF_XDP transport: the UDP transport's Config (the
// group, interface, unicast address, TTL, batch size, group filter and
// network safety rules mean the same; the socket buffers size the unicast
// socket only) and the AF_XDP Options.
type Config struct {
	transport.Config
	Options
}

var (
	// ErrUnavailable is wrapped by every error that says AF_XDP cannot
	// run here: the message names what is missing (kernel support, driver
	// support, privileges, an interface that does not fit).
	ErrUnavailable = errors.New("ebpf: AF_XDP unavailable")
	// ErrTooLarge is returned by WriteBatch for a datagram that does not
	// fit the interface's MTU (the backend does not fragment).
	ErrTooLarge = errors.New("ebpf: datagram larger than the interface MTU allows")
)

// Validate reports whether Open would accept o, naming the field.
func (o Options) Validate() error {
	_, err := o.withDefaults()
	return err
}

// withDefaults checks and fills in the Options.
func (o Options) withDefaults() (Options, error) {
	switch o.Mode {
	case "", ModeNative, ModeGeneric:
	default:
		return o, fmt.Errorf("%w: XDP Mode %q: want \"\", %q or %q", transport.ErrInvalidConfig, o.Mode, ModeNative, ModeGeneric)
	}
	if o.Frames == 0 {
		o.Frames = DefaultFrames
	}
	if o.TxFrames == 0 {
		o.TxFrames = DefaultTxFrames
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"Frames", o.Frames}, {"TxFrames", o.TxFrames}} {
		if f.v < 64 || f.v > MaxFrames || f.v&(f.v-1) != 0 {
			return o, fmt.Errorf("%w: XDP %s %d: want a power of two in 64..%d (0 for the default)", transport.ErrInvalidConfig, f.name, f.v, MaxFrames)
		}
	}
	if o.BusyPoll < 0 || o.BusyPoll > time.Second {
		return o, fmt.Errorf("%w: XDP BusyPoll %v: want 0 (off) up to 1s", transport.ErrInvalidConfig, o.BusyPoll)
	}
	return o, nil
}

// unavailable returns an error wrapping ErrUnavailable and cause.
func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnavailable}, args...)...)
}
