package transport

import (
	"errors"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// UDP is the UDP multicast backend of Transport on Linux. Its code is
// split by concern: socket setup (socket_linux.go), recvmmsg batches
// (read_linux.go), sendmmsg batches (write_linux.go), the segmentation
// offloads (gso_linux.go, gro_linux.go) and the kernel filter
// (filter_linux.go).
//
// It has two sockets: the group socket, bound to the group address and port
// (SO_REUSEADDR/SO_REUSEPORT, so every member on a host can bind it) and
// joined to the group on the configured interface; and the unicast socket,
// bound to Config.Unicast, which sends everything (group and unicast
// datagrams, with IP_MULTICAST_IF, TTL and IP_MULTICAST_LOOP set) and
// receives unicast. Both sockets sit in an epoll set that Go's poller
// watches, so one ReadBatch blocks on both without a goroutine per socket.
//
// The sockets themselves are not in Go's poller (they are blocking-mode
// files that os.NewFile does not register; every recvmmsg and sendmmsg
// passes MSG_DONTWAIT). Registered, each socket is watched edge-triggered
// for readable and writable: every datagram the kernel frees after sending
// it is an EPOLLOUT edge, and every datagram queued for reading an EPOLLIN
// edge, each waking whichever runtime thread is parked in the poller only
// for it to find nothing to do, a wake-up per datagram charged to the
// kernel's send path. The epoll set watches readable only, and a full send
// buffer is waited out with poll(2).
//
// Batches go through recvmmsg/sendmmsg on preallocated mmsghdr, iovec and
// sockaddr arrays (golang.org/x/sys/unix), not golang.org/x/net's
// ReadBatch, which allocates a *net.UDPAddr and its IP for every datagram
// read: steady-state ReadBatch, TryReadBatch and WriteBatch allocate nothing.
// x/net is used for the group join and the multicast socket options.
type UDP struct {
	cfg     Config
	ifindex int
	group   netip.AddrPort
	local   netip.AddrPort
	info    Info
	groupSA unix.RawSockaddrInet6 // the group as a sockaddr, copied into each group send
	saLen   uint32

	gfile *os.File // nil when SendOnly
	ufile *os.File
	graw  syscall.RawConn // nil when SendOnly
	uraw  syscall.RawConn
	ep    *os.File // epoll set of both sockets, registered with Go's poller
	epraw syscall.RawConn

	closed    atomic.Bool
	truncated atomic.Uint64
	sendWaits atomic.Uint64
	// gso: send runs of equal datagrams as one UDP_SEGMENT message
	// (Config.NoGSO off and the kernel took the option; cleared for good
	// when it refuses a message).
	gso        atomic.Bool
	gsoSends   atomic.Uint64
	gsoRefused atomic.Uint64
	groRuns    atomic.Uint64

	rd  reader
	wr  writer
	gro *groReader // nil unless Config.GRO took
}

// reader is the read side's preallocated state; only the reading goroutine
// touches it.
type reader struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6

	// The current call: arguments, slots, how many are filled, last error.
	bufs  [][]byte
	sizes []int
	srcs  []netip.AddrPort
	max   int
	n     int
	err   error
	calls uint

	// filled is how many headers the kernel wrote in the last call: only
	// those need their name length, flags and length reset.
	filled int

	boundPoll func(uintptr) bool
	boundRecv func(uintptr) bool
	boundGRO  func(uintptr) bool
}

// writer is the write side's preallocated state; only the writing goroutine
// touches it.
type writer struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6

	// ctrl holds one UDP_SEGMENT control message per header; segs is
	// how many datagrams each header of the current call carries.
	ctrl []byte
	segs []int

	off, cnt  int
	err       error
	gsoFailed bool
	pfd       [1]unix.PollFd

	boundSend func(uintptr) bool
}

var (
	_ Transport         = (*UDP)(nil)
	_ GroupFilterSetter = (*UDP)(nil)
)

// Open validates cfg, opens and configures the sockets and joins the group.
// Errors from validation wrap ErrInvalidConfig and name the field.
func Open(cfg Config) (*UDP, error) {
	cfg, ifi, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	u := &UDP{cfg: cfg, ifindex: ifi.Index}
	if err := u.open(ifi); err != nil {
		u.closeAll()
		return nil, err
	}
	u.rd.boundPoll = u.pollRead
	u.rd.boundRecv = u.recv
	u.rd.boundGRO = u.recvGRO
	u.wr.boundSend = u.send
	u.rd.hdrs, u.rd.iovs, u.rd.names = newHeaders(cfg.BatchSize)
	for i := range u.rd.hdrs {
		u.rd.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
	}
	u.wr.init(cfg.BatchSize)
	return u, nil
}

// init allocates the writer's state for batches of n headers, each with
// its UDP_SEGMENT control message ready but for the length.
func (w *writer) init(n int) {
	w.hdrs, w.iovs, w.names = newHeaders(n)
	w.segs = make([]int, n)
	w.ctrl = make([]byte, n*gsoCmsgSpace)
	for i := range n {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&w.ctrl[i*gsoCmsgSpace]))
		h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
	}
}

func newHeaders(n int) ([]unix.Mmsghdr, []unix.Iovec, []unix.RawSockaddrInet6) {
	hdrs := make([]unix.Mmsghdr, n)
	iovs := make([]unix.Iovec, n)
	names := make([]unix.RawSockaddrInet6, n)
	for i := range hdrs {
		hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&names[i]))
		hdrs[i].Hdr.Iov = &iovs[i]
		hdrs[i].Hdr.SetIovlen(1)
	}
	return hdrs, iovs, names
}

// closedErr returns ErrClosed for an error caused by a concurrent Close.
func (u *UDP) closedErr(err error) error {
	if err != nil && u.closed.Load() {
		return ErrClosed
	}
	return err
}

// SetReadDeadline implements Transport.
func (u *UDP) SetReadDeadline(t time.Time) error {
	if u.closed.Load() {
		return ErrClosed
	}
	return u.ep.SetReadDeadline(t)
}

// LocalAddr implements Transport.
func (u *UDP) LocalAddr() netip.AddrPort { return u.local }

// Group implements Transport.
func (u *UDP) Group() netip.AddrPort { return u.group }

// BatchSize implements Transport.
func (u *UDP) BatchSize() int { return u.cfg.BatchSize }

// PollConn is the epoll set of the transport's sockets, readable while
// one of them is: for a backend that waits on them beside sockets of its
// own (ebpf/ nests it in its epoll set).
func (u *UDP) PollConn() syscall.RawConn { return u.epraw }

// Info describes the open sockets, with the buffer sizes read back.
func (u *UDP) Info() Info { return u.info }

// Stats returns the transport's counters; safe from any goroutine.
func (u *UDP) Stats() Stats {
	return Stats{Truncated: u.truncated.Load(), SendWaits: u.sendWaits.Load(),
		GSOSends: u.gsoSends.Load(), GSORefused: u.gsoRefused.Load(), GSO: u.gso.Load(),
		GRO: u.gro != nil, GRORuns: u.groRuns.Load()}
}

// Close implements Transport. The epoll set is closed first, which wakes a
// blocked ReadBatch; the sockets after it.
func (u *UDP) Close() error {
	if !u.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	return u.closeAll()
}

func (u *UDP) closeAll() error {
	var errs []error
	if u.ep != nil {
		errs = append(errs, u.ep.Close())
	}
	if u.gfile != nil {
		errs = append(errs, u.gfile.Close())
	}
	if u.ufile != nil {
		errs = append(errs, u.ufile.Close())
	}
	return errors.Join(errs...)
}
