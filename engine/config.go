package engine

import (
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/bits"
	"net"
	"net/netip"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/ebpf"
	"github.com/nakcast/nakcast/engine/transport"
)

// IdleStrategy is what the agent does when it has no work: block in the
// kernel (lowest CPU, a wake-up costs a few microseconds; it yields for
// 50us after its last work first, so a steady stream does not pay a
// wake-up per datagram), yield the processor between non-blocking polls,
// or spin (lowest latency, one core busy).
type IdleStrategy uint8

// Idle strategies.
const (
	IdleBlock IdleStrategy = iota
	IdleYield
	IdleSpin
)

// String returns "block", "yield" or "spin".
func (s IdleStrategy) String() string {
	switch s {
	case IdleBlock:
		return "block"
	case IdleYield:
		return "yield"
	case IdleSpin:
		return "spin"
	}
	return fmt.Sprintf("IdleStrategy(%d)", uint8(s))
}

// ParseIdleStrategy returns the strategy named by String ("block", "yield"
// or "spin"), for flags and configuration files.
func ParseIdleStrategy(s string) (IdleStrategy, error) {
	for _, v := range []IdleStrategy{IdleBlock, IdleYield, IdleSpin} {
		if s == v.String() {
			return v, nil
		}
	}
	return 0, fmt.Errorf("idle strategy %q: want block, yield or spin", s)
}

// ParseThreading returns the mode named by String ("shared",
// "dedicated" or "invoked").
func ParseThreading(s string) (Threading, error) {
	for _, v := range []Threading{ThreadingShared, ThreadingDedicated, ThreadingInvoked} {
		if s == v.String() {
			return v, nil
		}
	}
	return 0, fmt.Errorf("threading %q: want shared, dedicated or invoked", s)
}

// Threading is how the agent's duties are spread over goroutines.
type Threading uint8

// Threading modes.
const (
	// ThreadingShared runs sending and receiving on one goroutine (Aeron's
	// shared mode): no lock hand-over between them, and on a machine with
	// few cores (2 here) usually the faster choice. The default.
	ThreadingShared Threading = iota
	// ThreadingDedicated runs a sender goroutine (drains the publication
	// ring, bundles, fragments, flushes, writes) beside the receiver
	// goroutine (reads, decodes, inserts, detects gaps, fires timers,
	// delivers in push mode, writes what that produces: repairs,
	// STABLE, membership). They share the protocol under a lock, each
	// holding it for one iteration, and each writes its own datagrams
	// outside it: on a machine with cores to spare, a sender is no
	// longer slowed by deliveries to its own handler, nor the receiver by
	// bundling.
	ThreadingDedicated
	// ThreadingInvoked runs the agent on the application's goroutine
	// (Aeron's agent invoker): between Open and Close no goroutine of the
	// member runs, and the application runs the agent's duty cycle, the
	// shared mode's iteration, by calling Member.DoWork in its own loop,
	// usually beside TrySend and Poll. A latency-sensitive application
	// so spins on one goroutine per member instead of two, which on a
	// machine with few cores is the difference between a ping-pong's
	// goroutines each having a core and taking turns on one. Timers,
	// failure detection and repairs run only inside DoWork: call it at
	// least every millisecond or so, and while the application waits.
	// The blocking calls (Send and SendBatch under back-pressure,
	// Receive, NextEvent) run DoWork themselves while they wait,
	// spinning with runtime.Gosched in between. Open and Close run the
	// agent on a goroutine of their own while they join and drain.
	ThreadingInvoked
)

// String returns "shared", "dedicated" or "invoked".
func (t Threading) String() string {
	switch t {
	case ThreadingShared:
		return "shared"
	case ThreadingDedicated:
		return "dedicated"
	case ThreadingInvoked:
		return "invoked"
	}
	return fmt.Sprintf("Threading(%d)", uint8(t))
}

// Transport names accepted by Config.Transport.
const (
	TransportUDP = "udp"
	// TransportXDP is the AF_XDP backend (ebpf/). TransportAuto picks it
	// where it opens, else UDP.
	TransportXDP  = "xdp"
	TransportAuto = "auto"
)

// Defaults applied by Config for zero fields.
const (
	DefaultInterface      = "lo"
	DefaultRingCapacity   = 4096
	DefaultInlineSize     = 1024
	DefaultMaxMessage     = 16 << 20
	DefaultWindow         = 1 << 16
	DefaultBatchSize      = 64
	DefaultSocketBuffer   = 4 << 20
	DefaultNakDelay       = 2 * time.Millisecond
	DefaultNakInterval    = 10 * time.Millisecond
	DefaultNakMaxInterval = 500 * time.Millisecond
	DefaultStableInterval = 10 * time.Millisecond
	DefaultStableBytes    = 1 << 20
	DefaultHeartbeat      = 500 * time.Millisecond
	DefaultSuspectTimeout = 5 * time.Second
	// DefaultProbeTimeout, DefaultProbeAttempts, DefaultLeaveTimeout, DefaultDiscoveryTimeout
	// and DefaultDiscoveryRounds are dynamic membership's.
	DefaultProbeTimeout     = 150 * time.Millisecond
	DefaultProbeAttempts    = 3
	DefaultLeaveTimeout     = 2 * time.Second
	DefaultDiscoveryTimeout = 100 * time.Millisecond
	DefaultDiscoveryRounds  = 3
	DefaultDeliverBatch     = 1024
	DefaultPoolBytes        = 256 << 20
	DefaultInFlightBytes    = 6 << 20
	// DefaultInFlightBytesSmall is InFlightBytes' default with datagrams
	// of 16 KB or less and the segmentation offloads on (see
	// InFlightBytes).
	DefaultInFlightBytesSmall = 2 << 20
)

// DefaultGroup is the group used when Config.Group is unset.
var DefaultGroup = netip.MustParseAddrPort("239.255.0.1:45588")

// Bounds checked by Validate.
const (
	MaxRingCapacity = 1 << 24
	MaxInlineSize   = 64 << 10
	MaxMessageLimit = 1 << 30
	MaxWindow       = 1 << 26
	MaxBatchSize    = 1024
	MaxSocketBuffer = 1 << 30
	MinDatagram     = 512
	MaxDatagramIPv4 = 65507
	MaxDatagramIPv6 = 65527
	MaxDeliverBatch = 1 << 20
)

// Config describes one member. The zero value of every field selects its
// default; Open validates and reports every bad value as an error wrapping
// ErrInvalidConfig that names the field and the allowed range.
//
// Membership is dynamic by default: with Members nil, Open joins the group
// through gms/ (multicast discovery, or InitialHosts), founding a new group
// as its coordinator when nobody answers; failure detection, graceful leave
// and state transfer come with it. A non-nil Members selects static
// membership instead (benchmarks, fixed deployments): Members lists the view
// (the same list, in the same order, on every member; the first is the
// coordinator that computes stability), Self must be in it, and nothing
// joins, leaves or is excluded. Static members started at different times
// still converge: every member keeps every message until all of them
// delivered it, so a late starter repairs what it missed by NAK.
type Config struct {
	// Group is the multicast group and port (default 239.255.0.1:45588).
	// IPv4 groups must be in 239.0.0.0/8; IPv6 groups ff01::/16, ff02::/16,
	// ff11::/16 or ff12::/16 (checked by the transport). Port 0 is refused:
	// the members of a group must agree on the port.
	Group netip.AddrPort
	// GroupID is the wire group id that keeps unrelated traffic out; 0
	// derives it from Group.
	GroupID uint32
	// Interface is the interface the group is joined on (default "lo").
	Interface string
	// TTL is the multicast TTL or hop limit (default 0; 0..1 on loopback).
	TTL int
	// Unicast is the unicast bind address (default 127.0.0.1:0, or [::1]:0
	// for an IPv6 group).
	Unicast netip.AddrPort
	// AllowNonLoopback allows non-loopback interfaces and unicast addresses
	// and TTLs up to 255: for network namespaces and hosts you control.
	AllowNonLoopback bool
	// NoLoopback turns multicast loopback off (IP_MULTICAST_LOOP): the
	// group's datagrams this member sends are not delivered to sockets on
	// its host (network namespace). Set it when every other member runs on
	// another host or namespace: with loopback on, the kernel runs a whole
	// local receive of every datagram sent only for the member's own
	// filter to drop it (measured on a veth bridge, MTU 1500: see the
	// docs/performance.md). Members on the same host would not
	// hear this one. The member's own messages are delivered to it either
	// way (in process). No effect on a loopback interface, where what is
	// sent comes back through the interface itself. Default false:
	// loopback on.
	NoLoopback bool
	// NoGSO turns UDP generic segmentation offload off, and with it the
	// receive side's (UDP_GRO, used with MaxDatagram up to 16 KB: a run
	// of another member's datagrams is read at once). By default (where
	// the kernel has UDP_SEGMENT, Linux 4.18+) each write hands a run of
	// consecutive bundles of one size, for one destination, to the kernel
	// as one message: it goes through the send path (routing, netfilter, a
	// bridge, veth) once and is cut back into the same datagrams where it
	// is delivered. Below the loopback's 64 KB datagrams that is most of
	// a sender's system time (veth bridge, MTU 1500, 64 B messages: about
	// 3x the messages a second; docs/performance.md). Off: every datagram makes
	// the trip on its own. The transport falls back by itself, for good,
	// if the kernel refuses a segmented send (transport.Stats.GSORefused).
	NoGSO bool
	// Transport selects the backend: "udp" (default); "xdp", the AF_XDP
	// kernel-bypass backend (ebpf/: Linux, root, an Ethernet interface,
	// TTL 1 or more, Unicast an address of the interface, one AF_XDP
	// member per interface; its group datagrams are not looped back to
	// this host), which Open refuses with the reason when it cannot run;
	// or "auto", AF_XDP where it opens and UDP otherwise, with one log
	// line saying why. Member.Config reports the backend opened.
	Transport string
	// XDP tunes the AF_XDP backend (attach mode, ring sizes, busy poll);
	// zero values select its defaults.
	XDP ebpf.Options

	// Self identifies this member; the zero Member picks a random ID with
	// incarnation 1. With dynamic membership only Self.ID is used: gms
	// picks a new incarnation on every join attempt (Member.Self returns
	// the current one).
	Self digest.Member
	// Members is the static view, coordinator first; nil (the default)
	// joins the group dynamically through gms.
	Members []digest.Member
	// MemberAddrs, with static membership, gives every member's unicast
	// address (its Unicast), in the order of Members: a datagram that
	// claims a member is taken only from that address, and unicasts go
	// there, from the start. Without it a static member's address is bound
	// on first contact, by an ADDRESS challenge that an off-path spoofer
	// cannot answer; a stranger that can receive at its own address and
	// claims a member before that member is first heard can
	// (docs/security.md). This member's own entry is its Unicast address (Unicast
	// may be left unset: it is taken from here).
	MemberAddrs []netip.AddrPort

	// InitialHosts, with dynamic membership, replaces multicast discovery:
	// discovery requests are unicast to these members' unicast addresses
	// (Member.LocalAddr of running members).
	InitialHosts []netip.AddrPort
	// DiscoveryTimeout is how long a joiner collects discovery answers
	// before joining the coordinator they name, or asking again when
	// nobody answered (default 100ms; 1ms..10s). Too short for the
	// host's load (answers later than DiscoveryRounds of it) and a joiner
	// founds a group of its own beside the existing one (gms merges them
	// once their coordinators hear each other's heartbeats).
	DiscoveryTimeout time.Duration
	// DiscoveryRounds is how many discovery rounds in a row must go
	// unanswered before a joiner founds a new group (default 3; 1..100):
	// an answer later than one DiscoveryTimeout still arrives in a later
	// round. Members started together found one group: the smallest
	// Self.ID founds, the others join it.
	DiscoveryRounds int
	// JoinAttempts bounds the JOIN_REQs that get no valid JoinRsp before
	// Open gives up with ErrJoinFailed (default 0: keep trying until
	// Open's context ends). Discovery rounds nobody answers are not
	// attempts: after DiscoveryRounds of them the member founds a group.
	JoinAttempts int
	// GetState writes the application state (state transfer provider): it
	// is called on the agent goroutine with the protocol lock held, at a
	// point where nothing is delivered until it returns, so the state and
	// the digest captured with it describe the same point. It must not
	// call this member's methods. Optional: without it this member refuses
	// state requests and the requester tries another member.
	GetState func(w io.Writer) error
	// SetState replaces the application state with the one read from r
	// (state transfer requester), on the agent goroutine with the lock
	// held, before any message that follows the state is delivered;
	// messages delivered earlier are superseded by the state.
	SetState func(r io.Reader) error
	// FetchState makes Open, after joining, fetch the application state
	// from another member (SetState required) and return only once it is
	// installed. The founder of a group has nobody to ask and skips it.
	FetchState bool

	// RingCapacity is the number of slots of the publication ring between
	// senders and the agent (power of two, default 4096).
	RingCapacity int
	// InlineSize is how many payload bytes a publication slot holds inline
	// (default 1024); larger messages use a pooled buffer. The ring's
	// arenas are 2 * RingCapacity * (InlineSize + 128) bytes: payloads up to
	// 128 bytes live in a compact arena of their own.
	InlineSize int
	// ExclusiveSender promises that one goroutine at a time calls this
	// member's send methods (Send, TrySend, SendBatch, TrySendBatch,
	// TryClaim), handlers that send included: a single sending goroutine,
	// or several ordered by a lock or a channel. The publication ring then
	// claims slots with a plain load and store instead of an atomic
	// compare-and-swap (Aeron's ExclusivePublication): TrySend of a small
	// message costs less on the sending goroutine (ring benchmark,
	// ring.BenchmarkPublication: about 6 instead of 15 ns a message) and
	// the agent gets more of the CPU. Breaking the promise loses messages (two concurrent
	// sends can take the same slot); the race detector reports it as a
	// data race on the ring. Default false: any number of goroutines may
	// send concurrently.
	ExclusiveSender bool
	// MaxMessage is the largest message Send accepts (default 16 MiB, or
	// less when a smaller Window cannot hold that many fragments: a whole
	// message must fit in half the window).
	MaxMessage int
	// MaxDatagram is the largest datagram sent (default: the interface MTU
	// less the IP and UDP headers, at most 65507 for IPv4: 64 KB on
	// loopback).
	MaxDatagram int
	// BundleBytes limits a bundle of small messages (default MaxDatagram,
	// at most MaxDatagram).
	BundleBytes int
	// BundleDelay is the longest a message may wait in an open bundle while
	// more messages keep coming (default 0: the bundle is flushed only when
	// it is full or when the publication ring goes idle, so a lone message
	// never waits).
	BundleDelay time.Duration
	// Window is the capacity of the retransmission store, in messages
	// (power of two, default 65536): a sender back-pressures when this many
	// of its messages are not yet stable. Receive windows get twice as
	// much, so a receiver that missed one STABILITY (and so purged late)
	// can still hold everything a sender may have in flight.
	Window int

	// NakDelay is the wait before the first retransmission request for a
	// gap (default 2ms; reordering settles).
	NakDelay time.Duration
	// NakInterval is the first retransmission backoff (default 10ms).
	NakInterval time.Duration
	// NakMaxInterval caps the backoff (default 500ms).
	NakMaxInterval time.Duration
	// UnicastNaks sends retransmission requests to the original sender
	// by unicast instead of multicasting them (no suppression: for small
	// groups). Repairs are multicast either way.
	UnicastNaks bool
	// StableInterval is how often members send their delivered digest to
	// the coordinator (default 10ms: stability is the senders' flow-control
	// credit, so a long interval stalls a sender whose Window is full).
	StableInterval time.Duration
	// StableBytes also triggers a STABLE after this many bytes received
	// (default 1 MiB).
	StableBytes int
	// HeartbeatInterval and SuspectTimeout are membership's failure
	// detection (dynamic membership only): every member multicasts a
	// heartbeat each HeartbeatInterval; a member silent for SuspectTimeout
	// is probed directly, ProbeAttempts times ProbeTimeout apart, and if
	// none is answered (and nothing else heard from it) suspected
	// (EventSuspect) and excluded by the coordinator: about SuspectTimeout
	// + ProbeAttempts×ProbeTimeout after it fell silent. Defaults 500ms,
	// 5s, 150ms and 3 (several probes, so that a lost probe or answer does
	// not exclude a live member under loss); SuspectTimeout must exceed
	// HeartbeatInterval.
	HeartbeatInterval time.Duration
	SuspectTimeout    time.Duration
	ProbeTimeout      time.Duration
	ProbeAttempts     int
	// LeaveTimeout bounds the graceful leave of Close (default 2s).
	LeaveTimeout time.Duration

	// RecvBuffer and SendBuffer are SO_RCVBUF and SO_SNDBUF (default
	// 4 MiB each).
	RecvBuffer int
	SendBuffer int
	// BatchSize is the number of datagrams per recvmmsg/sendmmsg (default
	// 64).
	BatchSize int
	// PoolBytes bounds the bytes of outstanding datagram buffers (default
	// 256 MiB); a receive when the pool is exhausted is a counted drop.
	PoolBytes int64
	// Idle is the agent's idle strategy (default IdleBlock). With
	// ThreadingDedicated it is the receiver goroutine's; the sender
	// goroutine waits for producers (or room) on a channel.
	Idle IdleStrategy
	// Threading runs the agent on one goroutine (ThreadingShared, the
	// default), on a sender and a receiver goroutine
	// (ThreadingDedicated), or on the application's goroutine through
	// Member.DoWork (ThreadingInvoked).
	Threading Threading

	// RateLimit caps the bytes per second of payload this member sends
	// (0: unlimited).
	RateLimit int64
	// InFlightBytes is sender flow control: the most payload bytes of this
	// member's messages that may be in flight (sent but not yet read by
	// every member, as their STABLE reports tell; measured from stability
	// before e2ad353) before the agent holds further messages back
	// (default 6 MiB, so that what is in flight fits the receivers'
	// socket buffers with room to spare: the default SO_RCVBUF of 4 MiB
	// holds 127 datagrams of 64 KB, about 8 MiB of payload, on Linux, and
	// the STABLE reports that tell what was read are up to a round old.
	// More than a receiver's buffer overflows it whenever it is
	// descheduled for a moment, and the drops come back as NAKs and
	// repairs: measured from what was read, 8 MiB cost 0.2-1.3% of 1 KiB
	// messages in repairs on lossless loopback, 6 MiB 0-0.002% at the
	// same rate (EngineLoopback/1024B/block, 3 alternating runs); 4 MiB
	// none either, but a lossy group ran slower). With datagrams of 16 KB
	// or less (a veth or NIC MTU) and the offloads on (NoGSO false) the
	// default is 2 MiB: there they let a sender outrun a receiver's
	// socket, whose buffer the kernel charges more overhead per byte, and
	// a burst it drops comes back as a burst of repairs that overflows it
	// again (5% loss, 1 KiB messages, veth MTU 1500: 1.0M repairs of 1.1M
	// messages sent at 6 MiB, 0.1M at 2 MiB, and 1.5x the rate; lossless
	// about the same either way; without the offloads a sender is too slow
	// to overflow it, and 2 MiB cost 64 B messages some 10%). -1: no limit
	// but Window.
	InFlightBytes int

	// LossRate drops this fraction of received datagrams before the
	// protocol sees them, like JGroups' DISCARD (tests only; default 0,
	// 0 <= LossRate < 1). LossSeed seeds it.
	LossRate float64
	LossSeed uint64

	// Logger receives the engine's and the protocol's logs (default
	// slog.Default()).
	Logger *slog.Logger
	// Handler, if not nil, receives every message on the agent goroutine
	// (push mode). With a nil Handler the application calls Member.Poll
	// (pull mode).
	Handler Handler
	// DeliverBatch is the most messages delivered per agent iteration in
	// push mode (default 1024).
	DeliverBatch int
	// Keys, if set, authenticate every datagram this member sends and
	// receives (engine/auth): Keys[0] seals, every key verifies (at most
	// 4, distinct ids; Member.SetKeys rotates them on a running member).
	// A datagram without a valid tag under one of them, or replayed, is
	// dropped before anything reads it and counted in Stats.Drops.Auth.
	// Every member of the group needs the same keys. Nil (the default) is
	// open mode: nothing is authenticated, which off loopback must be
	// chosen with Insecure.
	Keys []Key
	// Encrypt, with Keys, also encrypts the body of every datagram sent
	// (everything after the 24-byte common header). Members decrypt
	// whatever arrives encrypted either way.
	Encrypt bool
	// Insecure chooses open mode (no Keys) off loopback, where it is
	// otherwise refused: datagrams are not authenticated, and the member
	// says so once in the log. Not needed on loopback, where open mode is
	// the default.
	Insecure bool

	// DiscardOwn: this member's own messages are not delivered to it (not
	// to the Handler, not by Poll), as with JGroups' discard_own_messages;
	// the other members deliver them as usual. They still count as
	// delivered here for stability (at once), are retained for repairs
	// until stable, and appear in Stats.Protocol.OwnDiscarded instead of
	// Stats.Delivered. It saves the sender the delivery of every message
	// it sends (about a tenth of a 64 B stream's CPU). An application that
	// builds state from the messages must apply its own as it sends them:
	// the digest a state transfer hands out counts them as delivered.
	// Default false: every member delivers every message, its own
	// included.
	DiscardOwn bool
}

// withDefaults returns c with every zero field filled in, or the first
// validation error.
func (c Config) withDefaults() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return c, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if !c.Group.IsValid() {
		c.Group = DefaultGroup
	}
	g := c.Group.Addr()
	if g.Is4In6() {
		g = g.Unmap()
		c.Group = netip.AddrPortFrom(g, c.Group.Port())
	}
	switch {
	case !g.IsMulticast():
		return bad("Group %v: want a multicast group in 239.0.0.0/8 (IPv4) or ff01::/16, ff02::/16, ff11::/16, ff12::/16 (IPv6)", c.Group)
	case g.Is4() && !adminScoped.Contains(g):
		return bad("Group %v: IPv4 groups must be in 239.0.0.0/8", c.Group)
	case g.Is6() && !linkScoped(g):
		return bad("Group %v: IPv6 groups must be in ff01::/16, ff02::/16, ff11::/16 or ff12::/16", c.Group)
	case c.Group.Port() == 0:
		return bad("Group %v: port 0: want 1..65535 (all members must use the same port)", c.Group)
	}
	if c.GroupID == 0 {
		h := fnv.New32a()
		b, _ := c.Group.MarshalBinary()
		h.Write(b)
		c.GroupID = h.Sum32() | 1
	}
	if c.Interface == "" {
		c.Interface = DefaultInterface
	}
	ifi, err := net.InterfaceByName(c.Interface)
	if err != nil {
		return bad("Interface %q: %v", c.Interface, err)
	}
	if ifi.Flags&net.FlagLoopback == 0 && !c.AllowNonLoopback {
		return bad("Interface %q: not a loopback interface (set AllowNonLoopback for namespace tests)", c.Interface)
	}
	maxTTL := 1
	if c.AllowNonLoopback {
		maxTTL = 255
	}
	if c.TTL < 0 || c.TTL > maxTTL {
		return bad("TTL %d: want 0..%d", c.TTL, maxTTL)
	}
	if err := c.staticAddrs(g); err != nil {
		return c, err
	}
	if !c.Unicast.IsValid() {
		if g.Is4() {
			c.Unicast = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 0)
		} else {
			c.Unicast = netip.AddrPortFrom(netip.IPv6Loopback(), 0)
		}
	}
	if u := c.Unicast.Addr(); u.Is4() != g.Is4() || u.IsMulticast() || (!u.IsLoopback() && !c.AllowNonLoopback) {
		return bad("Unicast %v: want a loopback unicast address of the group's family (any unicast address with AllowNonLoopback)", c.Unicast)
	}
	if err := c.checkKeys(ifi.Flags&net.FlagLoopback == 0 || !c.Unicast.Addr().IsLoopback()); err != nil {
		return c, err
	}
	switch c.Transport {
	case "":
		c.Transport = TransportUDP
	case TransportUDP, TransportXDP, TransportAuto:
	default:
		return bad("Transport %q: want %q, %q or %q", c.Transport, TransportUDP, TransportXDP, TransportAuto)
	}
	if err := c.XDP.Validate(); err != nil && c.Transport != TransportUDP {
		return bad("XDP: %v", err)
	}

	if c.Self.IsZero() {
		c.Self = randomMember()
	}
	if c.Self.ID == 0 {
		return bad("Self %v: ID must not be 0", c.Self)
	}
	if c.Members == nil {
		for i, h := range c.InitialHosts {
			if !h.IsValid() || h.Port() == 0 || h.Addr().IsMulticast() || h.Addr().Is4() != g.Is4() ||
				(!h.Addr().IsLoopback() && !c.AllowNonLoopback) {
				return bad("InitialHosts[%d] %v: want a unicast address and port of the group's family (loopback unless AllowNonLoopback)", i, h)
			}
		}
		if c.JoinAttempts < 0 {
			return bad("JoinAttempts %d: want 0 (until Open's context ends) or more", c.JoinAttempts)
		}
		if err := rng(&c.DiscoveryRounds, "DiscoveryRounds", DefaultDiscoveryRounds, 1, 100); err != nil {
			return c, err
		}
		if c.FetchState && c.SetState == nil {
			return bad("FetchState true: needs SetState")
		}
	} else {
		if len(c.Members) == 0 {
			return bad("Members []: want nil (dynamic membership) or the static view")
		}
		if c.FetchState {
			return bad("FetchState true: needs dynamic membership (Members nil)")
		}
		if len(c.InitialHosts) > 0 {
			return bad("InitialHosts %v: need dynamic membership (Members nil)", c.InitialHosts)
		}
		c.MemberAddrs = append([]netip.AddrPort(nil), c.MemberAddrs...)
		c.Members = append([]digest.Member(nil), c.Members...)
		seen := make(map[digest.Member]bool, len(c.Members))
		self := false
		for i, m := range c.Members {
			if m.IsZero() || m.ID == 0 {
				return bad("Members[%d] %v: want a member with a non-zero ID", i, m)
			}
			if seen[m] {
				return bad("Members[%d] %v: listed twice", i, m)
			}
			seen[m] = true
			self = self || m == c.Self
		}
		if !self {
			return bad("Members %v: does not contain Self %v", c.Members, c.Self)
		}
	}

	if err := pow2(&c.RingCapacity, "RingCapacity", DefaultRingCapacity, 2, MaxRingCapacity); err != nil {
		return c, err
	}
	if err := rng(&c.InlineSize, "InlineSize", DefaultInlineSize, 1, MaxInlineSize); err != nil {
		return c, err
	}
	maxDG := MaxDatagramIPv4
	hdr := 28
	if g.Is6() {
		maxDG, hdr = MaxDatagramIPv6, 48
	}
	if ifi.MTU-hdr < maxDG && ifi.MTU > 0 {
		maxDG = ifi.MTU - hdr
	}
	if maxDG < MinDatagram {
		return bad("Interface %q: MTU %d leaves %d bytes per datagram, want at least %d", c.Interface, ifi.MTU, maxDG, MinDatagram)
	}
	if err := rng(&c.MaxDatagram, "MaxDatagram", maxDG, MinDatagram, maxDG); err != nil {
		return c, err
	}
	if err := rng(&c.BundleBytes, "BundleBytes", c.MaxDatagram, MinDatagram, c.MaxDatagram); err != nil {
		return c, err
	}
	if c.BundleDelay < 0 || c.BundleDelay > time.Second {
		return bad("BundleDelay %v: want 0..1s", c.BundleDelay)
	}
	if err := pow2(&c.Window, "Window", DefaultWindow, 64, MaxWindow); err != nil {
		return c, err
	}
	if c.MaxMessage == 0 {
		// The default is whatever fits, fragmented, in half the window.
		c.MaxMessage = min(DefaultMaxMessage, c.Window/2*(c.BundleBytes-128))
	}
	if err := rng(&c.MaxMessage, "MaxMessage", c.MaxMessage, 1, MaxMessageLimit); err != nil {
		return c, err
	}
	// A whole maximum-size message, fragmented, must fit in the window.
	if frags := (c.MaxMessage + c.BundleBytes - 129) / (c.BundleBytes - 128); frags > c.Window/2 {
		return bad("MaxMessage %d: needs about %d fragments of BundleBytes %d, want at most Window/2 = %d (raise Window or BundleBytes, or lower MaxMessage)",
			c.MaxMessage, frags, c.BundleBytes, c.Window/2)
	}

	durs := []struct {
		p        *time.Duration
		name     string
		def, min time.Duration
		max      time.Duration
	}{
		{&c.NakDelay, "NakDelay", DefaultNakDelay, time.Microsecond, 10 * time.Second},
		{&c.NakInterval, "NakInterval", DefaultNakInterval, time.Microsecond, 10 * time.Second},
		{&c.NakMaxInterval, "NakMaxInterval", DefaultNakMaxInterval, time.Microsecond, time.Minute},
		{&c.StableInterval, "StableInterval", DefaultStableInterval, time.Millisecond, time.Minute},
		{&c.HeartbeatInterval, "HeartbeatInterval", DefaultHeartbeat, time.Millisecond, time.Minute},
		{&c.SuspectTimeout, "SuspectTimeout", DefaultSuspectTimeout, time.Millisecond, 10 * time.Minute},
		{&c.ProbeTimeout, "ProbeTimeout", DefaultProbeTimeout, time.Millisecond, time.Minute},
		{&c.LeaveTimeout, "LeaveTimeout", DefaultLeaveTimeout, time.Millisecond, 10 * time.Minute},
		{&c.DiscoveryTimeout, "DiscoveryTimeout", DefaultDiscoveryTimeout, time.Millisecond, 10 * time.Second},
	}
	for _, d := range durs {
		if *d.p == 0 {
			*d.p = d.def
		}
		if *d.p < d.min || *d.p > d.max {
			return bad("%s %v: want %v..%v (0 for the default %v)", d.name, *d.p, d.min, d.max, d.def)
		}
	}
	if c.NakMaxInterval < c.NakInterval {
		return bad("NakMaxInterval %v: want at least NakInterval %v", c.NakMaxInterval, c.NakInterval)
	}
	if c.SuspectTimeout <= c.HeartbeatInterval {
		return bad("SuspectTimeout %v: want more than HeartbeatInterval %v", c.SuspectTimeout, c.HeartbeatInterval)
	}
	if err := rng(&c.ProbeAttempts, "ProbeAttempts", DefaultProbeAttempts, 1, 100); err != nil {
		return c, err
	}
	if err := rng(&c.StableBytes, "StableBytes", DefaultStableBytes, 1, 1<<30); err != nil {
		return c, err
	}
	if err := rng(&c.RecvBuffer, "RecvBuffer", DefaultSocketBuffer, 4096, MaxSocketBuffer); err != nil {
		return c, err
	}
	if err := rng(&c.SendBuffer, "SendBuffer", DefaultSocketBuffer, 4096, MaxSocketBuffer); err != nil {
		return c, err
	}
	if err := rng(&c.BatchSize, "BatchSize", DefaultBatchSize, 1, MaxBatchSize); err != nil {
		return c, err
	}
	if err := rng(&c.DeliverBatch, "DeliverBatch", DefaultDeliverBatch, 1, MaxDeliverBatch); err != nil {
		return c, err
	}
	if c.PoolBytes == 0 {
		c.PoolBytes = DefaultPoolBytes
	}
	if min := int64(4 * c.BatchSize * c.MaxDatagram); c.PoolBytes < min || c.PoolBytes > 1<<40 {
		return bad("PoolBytes %d: want %d..%d (4 batches of MaxDatagram at least; 0 for the default %d)", c.PoolBytes, min, int64(1)<<40, DefaultPoolBytes)
	}
	if c.Threading > ThreadingInvoked {
		return bad("Threading %v: want ThreadingShared, ThreadingDedicated or ThreadingInvoked", c.Threading)
	}
	if c.Idle > IdleSpin {
		return bad("Idle %v: want IdleBlock, IdleYield or IdleSpin", c.Idle)
	}
	switch {
	case c.InFlightBytes == 0 && c.MaxDatagram <= transport.GROMaxDatagram && !c.NoGSO:
		c.InFlightBytes = DefaultInFlightBytesSmall
	case c.InFlightBytes == 0:
		c.InFlightBytes = DefaultInFlightBytes
	case c.InFlightBytes == -1:
	case c.InFlightBytes < MinDatagram:
		return bad("InFlightBytes %d: want -1 (no limit), 0 (default %d) or at least %d", c.InFlightBytes, DefaultInFlightBytes, MinDatagram)
	}
	if c.RateLimit < 0 {
		return bad("RateLimit %d: want 0 (unlimited) or a positive bytes/s", c.RateLimit)
	}
	if c.RateLimit > 0 && c.RateLimit < int64(c.BundleBytes) {
		return bad("RateLimit %d: want 0 or at least BundleBytes %d bytes/s", c.RateLimit, c.BundleBytes)
	}
	if !(c.LossRate >= 0 && c.LossRate < 1) { // also refuses NaN
		return bad("LossRate %v: want 0 <= LossRate < 1", c.LossRate)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// staticAddrs checks MemberAddrs against Members and the group g's
// family, and takes Unicast from this member's entry when it is unset.
func (c *Config) staticAddrs(g netip.Addr) error {
	if c.MemberAddrs == nil {
		return nil
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if len(c.MemberAddrs) != len(c.Members) {
		return bad("MemberAddrs: %d addresses for %d Members (want one per member, in the same order)", len(c.MemberAddrs), len(c.Members))
	}
	for i, a := range c.MemberAddrs {
		ad := a.Addr()
		if !a.IsValid() || a.Port() == 0 || ad.IsMulticast() || ad.IsUnspecified() || ad.Is4() != g.Is4() ||
			(!ad.IsLoopback() && !c.AllowNonLoopback) {
			return bad("MemberAddrs[%d] %v: want a unicast address and port of the group's family (loopback unless AllowNonLoopback)", i, a)
		}
		if c.Members[i] != c.Self {
			continue
		}
		if !c.Unicast.IsValid() {
			c.Unicast = a
		} else if c.Unicast != a {
			return bad("MemberAddrs[%d] %v: this member's entry must be its Unicast %v", i, a, c.Unicast)
		}
	}
	return nil
}

// Validate reports whether Open would accept c, without opening anything.
// The error wraps ErrInvalidConfig and names the field.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

func rng(p *int, name string, def, lo, hi int) error {
	if *p == 0 {
		*p = def
	}
	if *p < lo || *p > hi {
		return fmt.Errorf("%w: %s %d: want %d..%d (0 for the default %d)", ErrInvalidConfig, name, *p, lo, hi, def)
	}
	return nil
}

func pow2(p *int, name string, def, lo, hi int) error {
	if *p == 0 {
		*p = def
	}
	if *p < lo || *p > hi || bits.OnesCount(uint(*p)) != 1 {
		return fmt.Errorf("%w: %s %d: want a power of two in %d..%d (0 for the default %d)", ErrInvalidConfig, name, *p, lo, hi, def)
	}
	return nil
}

var adminScoped = netip.MustParsePrefix("239.0.0.0/8")

func linkScoped(g netip.Addr) bool {
	b := g.As16()
	flags, scope := b[1]>>4, b[1]&0x0f
	return flags <= 1 && (scope == 1 || scope == 2)
}
