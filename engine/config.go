package engine

import (
	"fmt"
	"io"
	"log/slog"
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

// MarshalText implements encoding.TextMarshaler (String).
func (s IdleStrategy) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler (ParseIdleStrategy),
// for flag.TextVar and configuration files.
func (s *IdleStrategy) UnmarshalText(b []byte) error {
	v, err := ParseIdleStrategy(string(b))
	if err == nil {
		*s = v
	}
	return err
}

// MarshalText implements encoding.TextMarshaler (String).
func (t Threading) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler (ParseThreading).
func (t *Threading) UnmarshalText(b []byte) error {
	v, err := ParseThreading(string(b))
	if err == nil {
		*t = v
	}
	return err
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
	// spinning with runtime.Gosched in between, unless the
	// application's DoWork loop runs on another goroutine: once its
	// DoWork ran since their last look, they wait for that loop's work
	// instead of taking turns with it (Stats.AgentBusy counts the DoWork
	// calls that found the agent taken). Open and Close run the
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

// Transport backends accepted by TransportConfig.Backend.
const (
	TransportUDP = "udp"
	// TransportXDP is the AF_XDP backend (ebpf/). TransportAuto picks it
	// where it opens, else UDP.
	TransportXDP  = "xdp"
	TransportAuto = "auto"
)

// DefaultGroup is the group used when Config.Group is unset.
var DefaultGroup = netip.MustParseAddrPort("239.255.0.1:45588")

// DefaultInterface is the interface used when Config.Interface is unset.
const DefaultInterface = "lo"

// Config describes one member: the fields a member usually sets, and five
// groups of optional settings (Membership, Network, Transport, Tuning,
// Agent). The zero value of every field selects its default (the table in
// defaults.go, listed in docs/config.md); Open validates and reports every bad
// value as an error wrapping ErrInvalidConfig that names the field as
// written here ("Tuning.Window").
//
// Membership is dynamic by default: with Membership.Members nil, Open
// joins the group through gms/ (multicast discovery, or
// Membership.InitialHosts), founding a new group as its coordinator when
// nobody answers; failure detection, graceful leave and state transfer
// come with it. A non-nil Membership.Members selects static membership
// instead (benchmarks, fixed deployments): it lists the view (the same
// list, in the same order, on every member; the first is the coordinator
// that computes stability), Self must be in it, and nothing joins, leaves
// or is excluded. Static members started at different times still
// converge: every member keeps every message until all of them delivered
// it, so a late starter repairs what it missed by NAK.
type Config struct {
	// Group is the multicast group and port (default 239.255.0.1:45588).
	// IPv4 groups must be in 239.0.0.0/8; IPv6 groups ff01::/16, ff02::/16,
	// ff11::/16 or ff12::/16 (checked by the transport). Port 0 is refused:
	// the members of a group must agree on the port.
	Group netip.AddrPort
	// Interface is the interface the group is joined on (default "lo").
	// Another than a loopback interface needs Network.AllowNonLoopback.
	Interface string
	// Self identifies this member; the zero Member picks a random ID with
	// incarnation 1. With dynamic membership only Self.ID is used: gms
	// picks a new incarnation on every join attempt (Member.Self returns
	// the current one).
	Self digest.Member
	// Handler, if not nil, receives every message on the agent goroutine
	// (push mode); one that is also a BatchHandler receives runs of whole
	// messages in one call. With a nil Handler the application calls
	// Member.Poll (pull mode).
	Handler Handler
	// DiscardOwn: this member's own messages are not delivered to it (not
	// to the Handler, not by Poll), as with JGroups' discard_own_messages;
	// the other members deliver them as usual. They still count as
	// delivered here for stability (at once), are retained for repairs
	// until stable, and appear in Stats.Protocol.OwnDiscarded instead of
	// Stats.Delivered. It saves the sender the delivery of every message
	// it sends. An application that builds state from the messages must
	// apply its own as it sends them: the digest a state transfer hands
	// out counts them as delivered. Default false: every member delivers
	// every message, its own included.
	DiscardOwn bool
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
	// Logger receives the engine's and the protocol's logs (default
	// slog.Default()).
	Logger *slog.Logger

	// Membership is static or dynamic membership, failure detection,
	// leave and state transfer.
	Membership MembershipConfig
	// Network is the addresses and the network-safety opt-in.
	Network NetworkConfig
	// Transport is the datagram backend, its sockets and offloads, and the
	// hooks that replace or wrap it.
	Transport TransportConfig
	// Tuning is the window, datagram and bundle sizes, retransmission and
	// stability timers, flow control and buffer bounds.
	Tuning TuningConfig
	// Agent is who runs the protocol's duty cycle and who sends.
	Agent AgentConfig
}

// MembershipConfig is the membership part of Config.
type MembershipConfig struct {
	// Members is the static view, coordinator first; nil (the default)
	// joins the group dynamically through gms.
	Members []digest.Member
	// MemberAddrs, with static membership, gives every member's unicast
	// address (its Network.Unicast), in the order of Members: a datagram
	// that claims a member is taken only from that address, and unicasts
	// go there, from the start. Without it a static member's address is
	// bound on first contact, by an ADDRESS challenge that an off-path
	// spoofer cannot answer; a stranger that can receive at its own
	// address and claims a member before that member is first heard can
	// (docs/security.md). This member's own entry is its unicast address
	// (Network.Unicast may be left unset: it is taken from here).
	MemberAddrs []netip.AddrPort
	// InitialHosts, with dynamic membership, replaces multicast discovery:
	// discovery requests are unicast to these members' unicast addresses
	// (Member.LocalAddr of running members).
	InitialHosts []netip.AddrPort
	// DiscoveryTimeout is how long a joiner collects discovery answers
	// before joining the coordinator they name, or asking again when
	// nobody answered. Too short for the host's load (answers later than
	// DiscoveryRounds of it) and a joiner founds a group of its own beside
	// the existing one (gms merges them once their coordinators hear each
	// other's heartbeats).
	DiscoveryTimeout time.Duration
	// DiscoveryRounds is how many discovery rounds in a row must go
	// unanswered before a joiner founds a new group: an answer later than
	// one DiscoveryTimeout still arrives in a later round. Members started
	// together found one group: the smallest Self.ID founds, the others
	// join it.
	DiscoveryRounds int
	// JoinAttempts bounds the JOIN_REQs that get no valid JoinRsp before
	// Open gives up with ErrJoinFailed (0: keep trying until Open's
	// context ends). Discovery rounds nobody answers are not attempts:
	// after DiscoveryRounds of them the member founds a group.
	JoinAttempts int
	// HeartbeatInterval, SuspectTimeout, ProbeTimeout and ProbeAttempts
	// are failure detection (dynamic membership only): every member
	// multicasts a heartbeat each HeartbeatInterval; a member silent for
	// SuspectTimeout is probed directly, ProbeAttempts times ProbeTimeout
	// apart, and if none is answered (and nothing else heard from it)
	// suspected (EventSuspect) and excluded by the coordinator: about
	// SuspectTimeout + ProbeAttempts×ProbeTimeout after it fell silent.
	// Several probes, so that a lost probe or answer does not exclude a
	// live member under loss; SuspectTimeout must exceed
	// HeartbeatInterval.
	HeartbeatInterval time.Duration
	SuspectTimeout    time.Duration
	ProbeTimeout      time.Duration
	ProbeAttempts     int
	// LeaveTimeout bounds the graceful leave of Close.
	LeaveTimeout time.Duration
	// LagLimit and LagTimeout find slow members (dynamic membership): a
	// member whose lag behind the group (messages of the other senders
	// that it has not delivered while another member has, from the
	// STABLE reports every member sends the coordinator) stays above
	// LagLimit (default Tuning.Window/2) for LagTimeout (default 5s) is
	// reported on every member, itself included, as EventPeerLagging
	// naming it and its lag. Then, by default, the group keeps waiting
	// for it: stability, and so every sender, waits for what it has not
	// delivered, and flow control (Tuning.Window) bounds what the senders
	// hold meanwhile. With ExcludeLaggards the coordinator also suspects
	// it and excludes it, as it would a failed member: the others go on,
	// what they held for it is freed, and it rejoins as a new incarnation
	// (EventLeft, then EventView), dropping what it had received and not
	// delivered; with FetchState it fetches the application state again.
	// A coordinator is reported, never excluded, for lagging.
	LagLimit        int
	LagTimeout      time.Duration
	ExcludeLaggards bool
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
}

// NetworkConfig is the addressing and network-safety part of Config.
type NetworkConfig struct {
	// Unicast is the unicast bind address (default 127.0.0.1:0, or [::1]:0
	// for an IPv6 group).
	Unicast netip.AddrPort
	// TTL is the multicast TTL or hop limit (default 0; at most 1 unless
	// AllowNonLoopback).
	TTL int
	// AllowNonLoopback allows non-loopback interfaces and unicast
	// addresses and TTLs up to 255: for network namespaces and hosts you
	// control.
	AllowNonLoopback bool
	// GroupID is the wire group id that keeps unrelated traffic out; 0
	// derives it from Group.
	GroupID uint32
}

// TransportConfig is the datagram I/O part of Config: which backend, its
// sockets and offloads.
type TransportConfig struct {
	// Backend selects the transport: "udp" (default); "xdp", the AF_XDP
	// kernel-bypass backend (ebpf/: Linux, root, an Ethernet interface,
	// TTL 1 or more, Unicast an address of the interface, one AF_XDP
	// member per interface; its group datagrams are not looped back to
	// this host), which Open refuses with the reason when it cannot run;
	// or "auto", AF_XDP where it opens and UDP otherwise, with one log
	// line saying why. Member.Config reports the backend opened.
	Backend string
	// XDP tunes the AF_XDP backend (attach mode, ring sizes, busy poll);
	// zero values select its defaults.
	XDP ebpf.Options
	// Open, if set, opens the transport in place of Backend, from the
	// settings the engine derived (group, interface, addresses, buffers,
	// batch size, the member's group filter): an in-memory network
	// (engine/transport/memtransport) or another backend. Member.Config
	// then reports Backend as given.
	Open func(transport.Config) (transport.Transport, error)
	// Wrap, if set, wraps the transport opened (by Backend or Open)
	// before the member uses it: fault injection (memtransport.Faults),
	// capture. The result must keep the transport contract; optional
	// methods (Info, Stats, SetGroupFilter) are used when it has them.
	Wrap func(transport.Transport) transport.Transport
	// NoLoopback turns multicast loopback off (IP_MULTICAST_LOOP): the
	// group's datagrams this member sends are not delivered to sockets on
	// its host (network namespace). Set it when every other member runs on
	// another host or namespace: with loopback on, the kernel runs a whole
	// local receive of every datagram sent only for the member's own
	// filter to drop it (docs/performance.md). Members on the same host
	// would not hear this one. The member's own messages are delivered to
	// it either way (in process). No effect on a loopback interface, where
	// what is sent comes back through the interface itself. Default false:
	// loopback on.
	NoLoopback bool
	// NoGSO turns UDP generic segmentation offload off, and with it the
	// receive side's (UDP_GRO, used with Tuning.MaxDatagram up to 16 KB: a
	// run of another member's datagrams is read at once). By default
	// (where the kernel has UDP_SEGMENT, Linux 4.18+) each write hands a
	// run of consecutive bundles of one size, for one destination, to the
	// kernel as one message: it goes through the send path (routing,
	// netfilter, a bridge, veth) once and is cut back into the same
	// datagrams where it is delivered. Below the loopback's 64 KB
	// datagrams that is most of a sender's system time
	// (docs/performance.md). Off: every datagram makes the trip on its own. The
	// transport falls back by itself, for good, if the kernel refuses a
	// segmented send (transport.Stats.GSORefused).
	NoGSO bool
	// RecvBuffer and SendBuffer are SO_RCVBUF and SO_SNDBUF.
	RecvBuffer int
	SendBuffer int
	// BatchSize is the number of datagrams per recvmmsg/sendmmsg.
	BatchSize int
}

// TuningConfig is the protocol and buffer sizing part of Config; the
// defaults suit most groups.
type TuningConfig struct {
	// Window is the capacity of the retransmission store, in messages (a
	// power of two): a sender back-pressures when this many of its
	// messages are not yet stable. Receive windows get twice as much, so
	// a receiver that missed one STABILITY (and so purged late) can still
	// hold everything a sender may have in flight.
	Window int
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
	// it is full or when the log buffer goes idle, so a lone message
	// never waits).
	BundleDelay time.Duration
	// NakDelay is the wait before the first retransmission request for a
	// gap (reordering settles).
	NakDelay time.Duration
	// NakInterval is the first retransmission backoff.
	NakInterval time.Duration
	// NakMaxInterval caps the backoff.
	NakMaxInterval time.Duration
	// UnicastNaks sends retransmission requests to the original sender
	// by unicast instead of multicasting them (no suppression: for small
	// groups). Repairs are multicast either way.
	UnicastNaks bool
	// StableInterval is how often members send their delivered digest to
	// the coordinator (stability is the senders' flow-control credit, so
	// a long interval stalls a sender whose Window is full).
	StableInterval time.Duration
	// StableBytes also triggers a STABLE after this many bytes received.
	StableBytes int
	// DrainTimeout bounds how long Close waits for what this member sent
	// and received to become stable (delivered by every member of the
	// view) before it leaves (default 5 s). Past it Close ends with an
	// error wrapping ErrDrainTimeout that names each sender whose messages
	// were not stable. With dynamic membership the leave that follows a
	// drain has Membership.LeaveTimeout of its own.
	DrainTimeout time.Duration
	// RateLimit caps the bytes per second of payload this member sends
	// (0: unlimited).
	RateLimit int64
	// InFlightBytes is sender flow control: the most payload bytes of this
	// member's messages that may be in flight (sent but not yet read by
	// every member, as their STABLE reports tell) before the agent holds
	// further messages back. The default (6 MiB) fits what is in flight
	// in the receivers' socket buffers with room to spare: the default
	// SO_RCVBUF of 4 MiB holds 127 datagrams of 64 KB, about 8 MiB of
	// payload, on Linux, and the STABLE reports that tell what was read
	// are up to a round old; more than a receiver's buffer overflows it
	// whenever it is descheduled for a moment, and the drops come back as
	// NAKs and repairs. With datagrams of 16 KB or less and the offloads
	// on (Transport.NoGSO false) the default is 2 MiB: there a sender can
	// outrun a receiver's socket, whose buffer the kernel charges more
	// overhead per byte, and a burst it drops comes back as a burst of
	// repairs that overflows it again. The measurements behind both are
	// in bench/RESULTS.md. -1: no limit but Window.
	InFlightBytes int
	// PoolBytes bounds the bytes of outstanding datagram buffers; a
	// receive when the pool is exhausted is a counted drop.
	PoolBytes int64
	// RingCapacity sizes the log buffer between senders and the agent (a
	// power of two): it holds at least RingCapacity messages of up to 64
	// bytes, in terms of one datagram each (at most min(1024,
	// RingCapacity/2) messages a term; a power of two of terms, at least
	// 2). Larger messages fill its terms sooner.
	RingCapacity int
	// InlineSize is the largest payload written in place in the log
	// buffer (and sent without a copy); larger ones (and those a datagram
	// cannot carry) go out of line, in a pooled buffer the agent copies
	// into the bundle or fragments.
	InlineSize int
}

// AgentConfig is the threading part of Config: who runs the agent's duty
// cycle, how it idles, and who sends.
type AgentConfig struct {
	// Threading runs the agent on one goroutine (ThreadingShared, the
	// default), on a sender and a receiver goroutine
	// (ThreadingDedicated), or on the application's goroutine through
	// Member.DoWork (ThreadingInvoked).
	Threading Threading
	// Idle is the agent's idle strategy (default IdleBlock). With
	// ThreadingDedicated it is the receiver goroutine's; the sender
	// goroutine waits for producers (or room) on a channel.
	Idle IdleStrategy
	// DeliverBatch is the most messages delivered per agent iteration in
	// push mode.
	DeliverBatch int
	// ExclusiveSender promises that one goroutine at a time calls this
	// member's send methods (Send, TrySend, SendBatch, TrySendBatch,
	// TryClaim), handlers that send included: a single sending goroutine,
	// or several ordered by a lock or a channel. The log buffer then
	// claims room and commits with plain loads and release stores instead
	// of an atomic compare-and-swap and add (Aeron's ExclusivePublication):
	// a send costs less on the sending goroutine and the agent gets more of
	// the CPU. Breaking the promise loses messages (two concurrent sends
	// can take the same room); the race detector reports it as a data race
	// on the log buffer. Default false: any number of
	// goroutines may send concurrently.
	ExclusiveSender bool
}
