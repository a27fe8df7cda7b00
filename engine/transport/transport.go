// Package transport owns the batched datagram I/O that the engine's sender and
// receiver agents sit on: the Transport interface (batch-shaped, like
// wireguard-go's conn.Bind) and its UDP multicast backend, which uses
// recvmmsg/sendmmsg on Linux with preallocated headers so that steady-state
// calls allocate nothing. The AF_XDP backend (ebpf/) implements the same
// interface.
//
// The package moves datagrams and enforces network safety (which groups,
// interfaces, destinations and TTLs are allowed). It must not parse or build
// protocol messages, keep per-member state, retry, or hold any protocol rule:
// those belong to wire/, nakack/, gms/ and engine/.
package transport

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/bpf"
)

// Transport is a batched datagram endpoint joined to one multicast group,
// with a unicast address of its own.
//
// Concurrency: one goroutine may read (ReadBatch/TryReadBatch) while another
// writes (WriteBatch); two concurrent readers or two concurrent writers are
// not allowed (the preallocated batch headers are per direction). Close,
// SetReadDeadline and the accessors are safe from any goroutine.
type Transport interface {
	// ReadBatch fills bufs[i][:sizes[i]] with up to min(len(bufs),
	// len(sizes), BatchSize()) datagrams from the group or the unicast
	// address, blocking until at least one arrives, the read deadline passes
	// (os.ErrDeadlineExceeded) or the transport is closed (ErrClosed).
	// srcs[i] gets the source address when srcs is long enough (srcs may be
	// nil). A datagram longer than its buffer is truncated to the buffer and
	// counted in Stats; pass buffers of the largest datagram size.
	ReadBatch(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (n int, err error)
	// TryReadBatch is ReadBatch without blocking: it returns 0, nil at once
	// when nothing is queued (for busy-poll and yield idle strategies). It
	// may look at the unicast address only every few calls (the UDP
	// transport: every fourth), so a poll loop pays for one socket per
	// empty poll: a unicast datagram can take a few calls to show.
	TryReadBatch(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (n int, err error)
	// WriteBatch sends bufs[i] to dsts[i]: the group when dsts[i] is the
	// zero AddrPort (or dsts is nil or shorter than bufs), else that unicast
	// address. It returns once every datagram was handed to the kernel, or
	// with the number sent and the error that stopped it. A destination that
	// the transport's safety rules refuse makes it send nothing and return
	// ErrDestination.
	WriteBatch(bufs [][]byte, dsts []netip.AddrPort) (n int, err error)
	// SetReadDeadline makes a blocked or future ReadBatch return
	// os.ErrDeadlineExceeded after t; the zero time removes the deadline.
	SetReadDeadline(t time.Time) error
	// LocalAddr is the unicast address: the source of every datagram this
	// transport sends, so a receiver can answer a multicast datagram by
	// unicast to its source.
	LocalAddr() netip.AddrPort
	// Group is the multicast group and port (the port actually bound when
	// Config.Group asked for port 0).
	Group() netip.AddrPort
	// BatchSize is the largest number of datagrams one call moves.
	BatchSize() int
	// Close releases the sockets and unblocks a blocked ReadBatch, which
	// returns ErrClosed. Calls after Close return ErrClosed.
	Close() error
}

// GroupFilterSetter is implemented by a transport whose group socket's
// kernel filter (Config.GroupFilter) can be replaced while it is open: the
// engine installs a new self filter when the member gets a new incarnation.
type GroupFilterSetter interface {
	// SetGroupFilter replaces the group socket's filter by prog (an empty
	// prog removes it). Datagrams queued before the call stay queued.
	SetGroupFilter(prog []bpf.RawInstruction) error
}

// Defaults applied by Config for zero fields.
const (
	DefaultInterface  = "lo"
	DefaultBatchSize  = 64
	DefaultBufferSize = 4 << 20
	// MaxBatchSize is the kernel's limit on messages per recvmmsg/sendmmsg
	// (UIO_MAXIOV).
	MaxBatchSize = 1024
	// MaxBufferSize bounds RecvBuffer and SendBuffer.
	MaxBufferSize = 1 << 30
	// MaxUDPPayloadIPv4 is the largest UDP payload in one IPv4 datagram.
	MaxUDPPayloadIPv4 = 65507
	// MaxUDPPayloadIPv6 is the largest UDP payload in one IPv6 datagram
	// without jumbograms.
	MaxUDPPayloadIPv6 = 65527
)

var (
	// ErrInvalidConfig is wrapped by every Config validation error; the
	// message names the field and the allowed values.
	ErrInvalidConfig = errors.New("transport: invalid config")
	// ErrDestination is returned by WriteBatch for a destination outside the
	// safety rules: a multicast address other than the group, an address of
	// the other family, or a non-loopback unicast address without
	// Config.AllowNonLoopback.
	ErrDestination = errors.New("transport: destination not allowed")
	// ErrClosed is returned by calls on a closed transport. It is
	// net.ErrClosed, so either sentinel matches with errors.Is.
	ErrClosed = net.ErrClosed
	// ErrUnsupported is returned by Open on platforms without a backend.
	ErrUnsupported = errors.New("transport: UDP backend not supported on this platform")
)

// Config describes a UDP multicast transport. The zero value of every field
// but Group selects the default.
//
// Network safety: by default a transport only ever touches loopback: the
// interface must be a loopback interface, the unicast address a loopback
// address, unicast destinations loopback addresses, and the TTL 0 or 1.
// AllowNonLoopback lifts the interface, unicast and destination rules (for
// network-namespace tests over veth) and allows TTLs up to 255. Groups are
// always restricted to administratively scoped IPv4 groups (239.0.0.0/8) and
// IPv6 groups of interface-local or link-local scope (ff01::/16, ff02::/16,
// ff11::/16, ff12::/16), so no datagram can be routed off the link.
type Config struct {
	// Group is the multicast group and port. Port 0 binds an ephemeral port
	// (read it back with Transport.Group) for tests that open the first
	// member and give its port to the others.
	Group netip.AddrPort
	// Interface is the name of the interface to join the group on and send
	// multicast from; default "lo".
	Interface string
	// Unicast is the address the unicast socket binds to; default
	// 127.0.0.1:0 for an IPv4 group, [::1]:0 for IPv6.
	Unicast netip.AddrPort
	// TTL is the multicast TTL (IPv4) or hop limit (IPv6); default 0, which
	// on loopback still delivers to every member on the host. 0..1, or
	// 0..255 with AllowNonLoopback.
	TTL int
	// RecvBuffer is SO_RCVBUF asked for both sockets (default 4 MiB). When
	// net.core.rmem_max caps it, SO_RCVBUFFORCE is tried (works as root).
	RecvBuffer int
	// SendBuffer is SO_SNDBUF asked for the sending socket (default 4 MiB),
	// with SO_SNDBUFFORCE as for RecvBuffer.
	SendBuffer int
	// BatchSize is the number of datagrams one call moves at most
	// (default 64, at most MaxBatchSize).
	BatchSize int
	// GroupFilter, when not empty, is a classic BPF program attached to the
	// group socket (SO_ATTACH_FILTER): a datagram for which it returns 0
	// is dropped by the kernel before it is queued, costing no socket
	// buffer space, copy or system call. Offsets are from the UDP header:
	// the payload starts at offset 8. The engine uses it to keep a
	// member's own data datagrams, which multicast loopback delivers back
	// to it, out of its socket. GroupFilterSetter replaces it at run time.
	GroupFilter []bpf.RawInstruction
	// NoLoopback turns IP_MULTICAST_LOOP (IPV6_MULTICAST_LOOP) off: the
	// datagrams this transport sends to the group are not delivered to
	// sockets of this host (network namespace) that joined it, its own
	// included. With loopback on and the group joined, the kernel runs a
	// whole local receive of every datagram sent, only for the filter to
	// drop it; off, that work is saved. Only when no other member shares
	// this host or namespace: they would not hear this one. On a loopback
	// interface it changes nothing: what is sent there comes back through
	// the interface itself.
	NoLoopback bool
	// NoGSO turns UDP generic segmentation offload off. With it on (when
	// the kernel has UDP_SEGMENT, Linux 4.18+), WriteBatch hands each run
	// of consecutive equal-sized datagrams to one destination to the
	// kernel as one message, which goes through the send path once and is
	// cut into the same datagrams where it is delivered. Off, every
	// datagram makes the whole trip (as the raw baseline's do).
	NoGSO bool
	// GRO turns UDP generic receive offload on for the group socket
	// (UDP_GRO, Linux 5.0+; ignored where the kernel refuses it): a run of
	// datagrams sent as one segmented message (another member's GSO)
	// reaches the socket as one and is read at once, then handed out
	// datagram by datagram, copied from a staging buffer of the largest
	// UDP payload (4 of them, 256 KiB). For small datagrams (the engine
	// turns it on below 16 KB): the copy costs less than the kernel's
	// per-datagram work it saves; for 64 KB datagrams it would only add it.
	GRO bool
	// SendOnly skips the group socket: the transport sends to the group but
	// does not join it, and ReadBatch reads the unicast socket only.
	SendOnly bool
	// AllowNonLoopback allows a non-loopback interface, unicast address and
	// unicast destinations, and TTLs above 1. Only for network namespaces
	// and hosts the caller controls.
	AllowNonLoopback bool
}

// GROMaxDatagram is the largest datagram size with which Config.GRO pays:
// below it a run read at once and copied out costs less than the kernel's
// work per datagram; with 64 KB datagrams (loopback) there are no runs to
// gain and the copy would only cost. The engine and the raw bundler turn
// GRO on at or below it.
const GROMaxDatagram = 16 << 10

// Info describes an open transport, with the socket buffer sizes the kernel
// reports back. Linux keeps and reports twice the size set (the extra is its
// allowance for per-datagram bookkeeping), so asking 4 MiB reads back 8 MiB.
type Info struct {
	Interface string
	IfIndex   int
	Group     netip.AddrPort
	Local     netip.AddrPort
	BatchSize int
	// GroupRecvBuffer is SO_RCVBUF of the group socket (0 when SendOnly).
	GroupRecvBuffer int
	// UnicastRecvBuffer is SO_RCVBUF of the unicast socket.
	UnicastRecvBuffer int
	// SendBuffer is SO_SNDBUF of the unicast socket, which sends everything.
	SendBuffer int
	// BufferForced reports that SO_RCVBUFFORCE or SO_SNDBUFFORCE was needed
	// to get past net.core.rmem_max / wmem_max.
	BufferForced bool
	// BufferCapped reports that some buffer is still below what Config
	// asked (not root, or the FORCE option refused).
	BufferCapped bool
	// MulticastLoop is IP_MULTICAST_LOOP (IPV6_MULTICAST_LOOP) of the
	// sending socket as read back: false with Config.NoLoopback.
	MulticastLoop bool
}

// Stats are counters of an open transport.
type Stats struct {
	// Truncated counts datagrams longer than the buffer they were read into.
	Truncated uint64
	// SendWaits counts the times a write found the socket's send buffer
	// full and waited for room.
	SendWaits uint64
	// GSO reports that writes use UDP generic segmentation offload
	// (Config.NoGSO), GSOSends counts the messages that carried several
	// datagrams that way, and GSORefused the times the kernel refused one
	// (the transport then stops using it).
	GSO        bool
	GSOSends   uint64
	GSORefused uint64
	// GRO reports that the group socket reads with UDP_GRO (Config.GRO),
	// and GRORuns counts the runs of several datagrams it read at once.
	GRO     bool
	GRORuns uint64
	// XDP is the AF_XDP backend's (ebpf/); zero for the UDP backend.
	XDP XDPStats
}

// XDPStats are the AF_XDP backend's counters: the kernel's
// XDP_STATISTICS summed over its sockets, and its own.
type XDPStats struct {
	// Mode is where its XDP program runs ("native": the driver's hook,
	// "generic": the stack's); ZeroCopy says the sockets bound in
	// zero-copy mode (else copy mode), BusyPoll that the kernel took the
	// busy-poll options; Sockets is the number of AF_XDP sockets (one per
	// receive queue).
	Mode     string
	ZeroCopy bool
	BusyPoll bool
	Sockets  int
	// The kernel's counters: frames dropped for want of room
	// (RxDropped), invalid descriptors handed to it (RxInvalidDescs,
	// TxInvalidDescs), frames that found the RX ring full (RxRingFull) or
	// the fill ring empty (FillRingEmpty), and sends that found the TX
	// ring empty (TxRingEmpty).
	RxDropped      uint64
	RxInvalidDescs uint64
	TxInvalidDescs uint64
	RxRingFull     uint64
	FillRingEmpty  uint64
	TxRingEmpty    uint64
	// Malformed counts frames refused as not a well-formed UDP datagram
	// (or a fragment), Foreign well-formed frames for another group or
	// port, Filtered the group datagrams the group filter dropped (own
	// datagrams); TxKicks the sendto calls that woke the kernel to send,
	// TxWaits the waits for free send frames.
	Malformed uint64
	Foreign   uint64
	Filtered  uint64
	TxKicks   uint64
	TxWaits   uint64
}

// withDefaults validates c and returns it with defaults filled in and the
// interface resolved.
func (c Config) withDefaults() (Config, *net.Interface, error) {
	if !c.Group.IsValid() {
		return c, nil, fmt.Errorf("%w: Group is unset: want a group in 239.0.0.0/8 or ff01::/16, ff02::/16, ff11::/16, ff12::/16 with a port", ErrInvalidConfig)
	}
	g := c.Group.Addr()
	if g.Is4In6() {
		return c, nil, fmt.Errorf("%w: Group %v: IPv4-mapped IPv6 address; give the IPv4 group itself", ErrInvalidConfig, c.Group)
	}
	if err := checkGroup(g); err != nil {
		return c, nil, fmt.Errorf("%w: Group %v: %v", ErrInvalidConfig, c.Group, err)
	}
	if g.Zone() != "" {
		return c, nil, fmt.Errorf("%w: Group %v: no zone allowed, the zone is Interface", ErrInvalidConfig, c.Group)
	}
	if c.Interface == "" {
		c.Interface = DefaultInterface
	}
	ifi, err := net.InterfaceByName(c.Interface)
	if err != nil {
		return c, nil, fmt.Errorf("%w: Interface %q: %v", ErrInvalidConfig, c.Interface, err)
	}
	if ifi.Flags&net.FlagLoopback == 0 && !c.AllowNonLoopback {
		return c, nil, fmt.Errorf("%w: Interface %q is not a loopback interface (set AllowNonLoopback for namespace tests)", ErrInvalidConfig, c.Interface)
	}
	if ifi.Flags&net.FlagUp == 0 {
		return c, nil, fmt.Errorf("%w: Interface %q is down", ErrInvalidConfig, c.Interface)
	}
	if !c.Unicast.IsValid() {
		if g.Is4() {
			c.Unicast = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 0)
		} else {
			c.Unicast = netip.AddrPortFrom(netip.IPv6Loopback(), 0)
		}
	}
	u := c.Unicast.Addr()
	switch {
	case u.Is4() != g.Is4():
		return c, nil, fmt.Errorf("%w: Unicast %v: must be of the group's address family", ErrInvalidConfig, c.Unicast)
	case u.IsMulticast():
		return c, nil, fmt.Errorf("%w: Unicast %v: must be a unicast address", ErrInvalidConfig, c.Unicast)
	case !u.IsLoopback() && !c.AllowNonLoopback:
		return c, nil, fmt.Errorf("%w: Unicast %v: must be a loopback address (set AllowNonLoopback for namespace tests)", ErrInvalidConfig, c.Unicast)
	}
	maxTTL := 1
	if c.AllowNonLoopback {
		maxTTL = 255
	}
	if c.TTL < 0 || c.TTL > maxTTL {
		return c, nil, fmt.Errorf("%w: TTL %d: want 0..%d", ErrInvalidConfig, c.TTL, maxTTL)
	}
	if c.RecvBuffer == 0 {
		c.RecvBuffer = DefaultBufferSize
	}
	if c.RecvBuffer < 0 || c.RecvBuffer > MaxBufferSize {
		return c, nil, fmt.Errorf("%w: RecvBuffer %d: want 1..%d bytes (0 for the default %d)", ErrInvalidConfig, c.RecvBuffer, MaxBufferSize, DefaultBufferSize)
	}
	if c.SendBuffer == 0 {
		c.SendBuffer = DefaultBufferSize
	}
	if c.SendBuffer < 0 || c.SendBuffer > MaxBufferSize {
		return c, nil, fmt.Errorf("%w: SendBuffer %d: want 1..%d bytes (0 for the default %d)", ErrInvalidConfig, c.SendBuffer, MaxBufferSize, DefaultBufferSize)
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.BatchSize < 0 || c.BatchSize > MaxBatchSize {
		return c, nil, fmt.Errorf("%w: BatchSize %d: want 1..%d (0 for the default %d)", ErrInvalidConfig, c.BatchSize, MaxBatchSize, DefaultBatchSize)
	}
	return c, ifi, nil
}

// Validate reports whether c would be accepted by Open, without opening
// anything. The error wraps ErrInvalidConfig and names the field.
func (c Config) Validate() error {
	_, _, err := c.withDefaults()
	return err
}

var v4Admin = netip.MustParsePrefix("239.0.0.0/8")

// checkGroup enforces the group scopes that cannot leave the link.
func checkGroup(g netip.Addr) error {
	if !g.IsMulticast() {
		return errors.New("not a multicast address")
	}
	if g.Is4() {
		if !v4Admin.Contains(g) {
			return errors.New("IPv4 groups must be in 239.0.0.0/8 (administratively scoped)")
		}
		return nil
	}
	b := g.As16()
	flags, scope := b[1]>>4, b[1]&0x0f
	if flags > 1 || (scope != 1 && scope != 2) {
		return errors.New("IPv6 groups must be interface-local or link-local scope: ff01::/16, ff02::/16, ff11::/16 or ff12::/16")
	}
	return nil
}

// DestinationAllowed reports whether WriteBatch of a transport of group
// may send to dst under the safety rules (Config.AllowNonLoopback): the
// check another backend (ebpf/) makes before it sends anything.
func DestinationAllowed(dst, group netip.AddrPort, allowNonLoopback bool) bool {
	return allowedDst(dst, group, allowNonLoopback)
}

// allowedDst reports whether a unicast or group destination passes the
// safety rules for a transport whose group is group. It does not allocate.
func allowedDst(dst, group netip.AddrPort, allowNonLoopback bool) bool {
	a := dst.Addr()
	if a.Is4() != group.Addr().Is4() || dst.Port() == 0 {
		return false
	}
	if a.IsMulticast() {
		return a.WithZone("") == group.Addr() && dst.Port() == group.Port()
	}
	return allowNonLoopback || a.IsLoopback()
}
