package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// UDP is the UDP multicast backend of Transport on Linux.
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
// for it to find nothing to do. On a veth bridge that was about 20,000
// thread wake-ups a second in a sending process (perf: sched_wakeup and
// epoll_pwait), charged to the kernel's send path. The epoll set watches
// readable only, and a full send buffer is waited out with poll(2).
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

func (u *UDP) open(ifi *net.Interface) error {
	cfg := u.cfg
	v6 := !cfg.Group.Addr().Is4()
	family := unix.AF_INET
	if v6 {
		family = unix.AF_INET6
	}
	u.saLen = putSockaddr(&u.groupSA, cfg.Group, uint32(u.ifindex))

	// Unicast socket: sends everything, receives unicast.
	var usa unix.RawSockaddrInet6
	ulen := putSockaddr(&usa, cfg.Unicast, scopeFor(cfg.Unicast.Addr(), u.ifindex))
	var err error
	u.ufile, err = newUDPSocket(family, &usa, ulen, false)
	if err != nil {
		return fmt.Errorf("transport: unicast socket on %v: %w", cfg.Unicast, err)
	}
	u.uraw, err = u.ufile.SyscallConn()
	if err != nil {
		return err
	}
	u.local, err = boundAddr(u.uraw)
	if err != nil {
		return err
	}
	if err := setMulticastOptions(u.uraw, v6, ifi.Index, cfg.TTL, !cfg.NoLoopback); err != nil {
		return fmt.Errorf("transport: %w (interface %s, TTL %d)", err, ifi.Name, cfg.TTL)
	}
	if !cfg.NoGSO {
		// The kernel knows UDP_SEGMENT (4.18+) if it takes the socket
		// option; 0 leaves every send unsegmented unless its own control
		// message says otherwise.
		u.gso.Store(setsockopt(u.uraw, unix.SOL_UDP, unix.UDP_SEGMENT, 0, "UDP_SEGMENT") == nil)
	}
	var forced, capped bool
	u.info.UnicastRecvBuffer, forced, capped, err = setBuffer(u.uraw, unix.SO_RCVBUF, unix.SO_RCVBUFFORCE, cfg.RecvBuffer)
	if err != nil {
		return fmt.Errorf("transport: SO_RCVBUF %d on the unicast socket: %w", cfg.RecvBuffer, err)
	}
	u.info.BufferForced, u.info.BufferCapped = forced, capped
	u.info.MulticastLoop = multicastLoop(u.uraw, v6)
	u.info.SendBuffer, forced, capped, err = setBuffer(u.uraw, unix.SO_SNDBUF, unix.SO_SNDBUFFORCE, cfg.SendBuffer)
	if err != nil {
		return fmt.Errorf("transport: SO_SNDBUF %d: %w", cfg.SendBuffer, err)
	}
	u.info.BufferForced, u.info.BufferCapped = u.info.BufferForced || forced, u.info.BufferCapped || capped

	// Group socket: bound to the group itself, so it receives that group
	// only, shared by every member on the host.
	u.group = cfg.Group
	if !cfg.SendOnly {
		var gsa unix.RawSockaddrInet6
		glen := putSockaddr(&gsa, cfg.Group, uint32(u.ifindex))
		u.gfile, err = newUDPSocket(family, &gsa, glen, true)
		if err != nil {
			return fmt.Errorf("transport: group socket on %v: %w", cfg.Group, err)
		}
		u.graw, err = u.gfile.SyscallConn()
		if err != nil {
			return err
		}
		bound, err := boundAddr(u.graw)
		if err != nil {
			return err
		}
		u.group = netip.AddrPortFrom(cfg.Group.Addr(), bound.Port())
		if len(cfg.GroupFilter) > 0 {
			// Before the join: nothing the filter refuses is ever queued.
			if err := u.attachFilter(cfg.GroupFilter); err != nil {
				return err
			}
		}
		if err := joinGroup(u.graw, cfg.Group.Addr(), ifi.Index); err != nil {
			return fmt.Errorf("transport: join %v on %s: %w", cfg.Group.Addr(), ifi.Name, err)
		}
		u.info.GroupRecvBuffer, forced, capped, err = setBuffer(u.graw, unix.SO_RCVBUF, unix.SO_RCVBUFFORCE, cfg.RecvBuffer)
		if err != nil {
			return fmt.Errorf("transport: SO_RCVBUF %d on the group socket: %w", cfg.RecvBuffer, err)
		}
		u.info.BufferForced, u.info.BufferCapped = u.info.BufferForced || forced, u.info.BufferCapped || capped
		u.saLen = putSockaddr(&u.groupSA, u.group, uint32(u.ifindex))
		// An older kernel (< 5.0) refuses UDP_GRO: read datagram by datagram.
		if cfg.GRO && setsockopt(u.graw, unix.SOL_UDP, unix.UDP_GRO, 1, "UDP_GRO") == nil {
			u.gro = newGROReader(groStage)
		}
	} else if u.group.Port() == 0 {
		return fmt.Errorf("%w: Group %v: a SendOnly transport needs the group's port", ErrInvalidConfig, cfg.Group)
	}

	// The epoll set both sockets are in; Go's poller watches the set.
	var fds []int
	for _, raw := range []syscall.RawConn{u.uraw, u.graw} {
		if raw == nil {
			continue
		}
		if err := raw.Control(func(fd uintptr) { fds = append(fds, int(fd)) }); err != nil {
			return err
		}
	}
	if u.ep, u.epraw, err = NewPollSet("transport-epoll", fds...); err != nil {
		return err
	}

	u.info.Interface = ifi.Name
	u.info.IfIndex = ifi.Index
	u.info.Group = u.group
	u.info.Local = u.local
	u.info.BatchSize = cfg.BatchSize
	return nil
}

// NewPollSet returns an epoll set watching fds for reading, as a file
// that Go's poller watches: a blocking read waits on it (the RawConn's
// Read) until one of them is readable, and its read deadline ends the
// wait. The UDP backend waits on its two sockets this way; ebpf/ on its
// AF_XDP sockets and the UDP backend's set. Closing the file wakes a
// blocked read.
func NewPollSet(name string, fds ...int) (*os.File, syscall.RawConn, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	ep := os.NewFile(uintptr(epfd), name)
	for _, fd := range fds {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			ep.Close()
			return nil, nil, os.NewSyscallError("epoll_ctl", err)
		}
	}
	if err := ep.SetReadDeadline(time.Time{}); err != nil {
		ep.Close()
		return nil, nil, fmt.Errorf("transport: epoll set is not pollable by the Go runtime: %w", err)
	}
	raw, err := ep.SyscallConn()
	if err != nil {
		ep.Close()
		return nil, nil, err
	}
	return ep, raw, nil
}

// newUDPSocket makes a UDP socket bound to sa as an *os.File that Go's
// poller does not watch: the file is in blocking mode, which os.NewFile
// leaves unregistered (see UDP), and every read and write passes
// MSG_DONTWAIT instead. The File still guards the descriptor: Close waits
// for a read or write in progress rather than freeing its number under it.
func newUDPSocket(family int, sa *unix.RawSockaddrInet6, salen uint32, group bool) (*os.File, error) {
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	fail := func(call string, err error) (*os.File, error) {
		unix.Close(fd)
		return nil, os.NewSyscallError(call, err)
	}
	if family == unix.AF_INET6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			return fail("setsockopt IPV6_V6ONLY", err)
		}
	}
	if group {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			return fail("setsockopt SO_REUSEADDR", err)
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			return fail("setsockopt SO_REUSEPORT", err)
		}
		// Receive only the groups this socket joined (Linux otherwise
		// delivers every group joined by any socket on a matching port).
		if family == unix.AF_INET {
			_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0)
		} else {
			_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_ALL, 0) // Linux 4.20+
		}
	}
	if _, _, e := unix.Syscall(unix.SYS_BIND, uintptr(fd), uintptr(unsafe.Pointer(sa)), uintptr(salen)); e != 0 {
		return fail("bind", e)
	}
	return os.NewFile(uintptr(fd), "udp"), nil
}

// onSocket runs f on raw's descriptor (RawConn.Control) and returns the
// first of Control's error and f's.
func onSocket(raw syscall.RawConn, f func(s int) error) error {
	var ferr error
	if err := raw.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// setsockopt is unix.SetsockoptInt on raw, its error naming the option.
func setsockopt(raw syscall.RawConn, level, opt, v int, name string) error {
	return onSocket(raw, func(s int) error {
		if err := unix.SetsockoptInt(s, level, opt, v); err != nil {
			return os.NewSyscallError("setsockopt "+name, err)
		}
		return nil
	})
}

// setMulticastOptions sets the sending socket's multicast interface, TTL
// (hop limit) and loopback.
func setMulticastOptions(raw syscall.RawConn, v6 bool, ifindex, ttl int, loop bool) error {
	l := 0
	if loop {
		l = 1
	}
	if v6 {
		if err := setsockopt(raw, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, ifindex, "IPV6_MULTICAST_IF"); err != nil {
			return err
		}
		if err := setsockopt(raw, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, ttl, "IPV6_MULTICAST_HOPS"); err != nil {
			return err
		}
		return setsockopt(raw, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_LOOP, l, "IPV6_MULTICAST_LOOP")
	}
	if err := onSocket(raw, func(s int) error {
		if err := unix.SetsockoptIPMreqn(s, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &unix.IPMreqn{Ifindex: int32(ifindex)}); err != nil {
			return os.NewSyscallError("setsockopt IP_MULTICAST_IF", err)
		}
		return nil
	}); err != nil {
		return err
	}
	if err := setsockopt(raw, unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, ttl, "IP_MULTICAST_TTL"); err != nil {
		return err
	}
	return setsockopt(raw, unix.IPPROTO_IP, unix.IP_MULTICAST_LOOP, l, "IP_MULTICAST_LOOP")
}

// joinGroup joins the group socket to group on interface ifindex.
func joinGroup(raw syscall.RawConn, group netip.Addr, ifindex int) error {
	return onSocket(raw, func(s int) error {
		if group.Is4() {
			if err := unix.SetsockoptIPMreqn(s, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, &unix.IPMreqn{Multiaddr: group.As4(), Ifindex: int32(ifindex)}); err != nil {
				return os.NewSyscallError("setsockopt IP_ADD_MEMBERSHIP", err)
			}
			return nil
		}
		if err := unix.SetsockoptIPv6Mreq(s, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, &unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(ifindex)}); err != nil {
			return os.NewSyscallError("setsockopt IPV6_JOIN_GROUP", err)
		}
		return nil
	})
}

// multicastLoop reads IP_MULTICAST_LOOP (IPV6_MULTICAST_LOOP) back.
func multicastLoop(raw syscall.RawConn, v6 bool) bool {
	loop := 0
	_ = raw.Control(func(fd uintptr) {
		if v6 {
			loop, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_LOOP)
		} else {
			loop, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MULTICAST_LOOP)
		}
	})
	return loop != 0
}

func boundAddr(raw syscall.RawConn) (netip.AddrPort, error) {
	var ap netip.AddrPort
	var serr error
	err := raw.Control(func(fd uintptr) {
		var sa unix.RawSockaddrInet6
		l := uint32(unsafe.Sizeof(sa))
		if _, _, e := unix.Syscall(unix.SYS_GETSOCKNAME, fd, uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&l))); e != 0 {
			serr = os.NewSyscallError("getsockname", e)
			return
		}
		ap = sockaddrAddrPort(&sa, "", 0)
	})
	if err != nil {
		return ap, err
	}
	return ap, serr
}

// setBuffer sets a socket buffer to want, retrying with the FORCE option
// (CAP_NET_ADMIN) when the kernel's maximum caps it, and reads the result
// back.
func setBuffer(raw syscall.RawConn, opt, forceOpt, want int) (got int, forced, capped bool, err error) {
	cerr := raw.Control(func(fd uintptr) {
		s := int(fd)
		if err = unix.SetsockoptInt(s, unix.SOL_SOCKET, opt, want); err != nil {
			return
		}
		if got, err = unix.GetsockoptInt(s, unix.SOL_SOCKET, opt); err != nil {
			return
		}
		// Linux keeps (and reports) twice the size set, the extra being its
		// allowance for bookkeeping; less than that means it was capped.
		if got < 2*want {
			if unix.SetsockoptInt(s, unix.SOL_SOCKET, forceOpt, want) == nil {
				forced = true
			}
			if got, err = unix.GetsockoptInt(s, unix.SOL_SOCKET, opt); err != nil {
				return
			}
		}
		capped = got < 2*want
	})
	if cerr != nil {
		err = cerr
	}
	return got, forced, capped, err
}

// scopeFor is the sin6_scope_id to use for a: the interface for addresses
// that need one, 0 otherwise.
func scopeFor(a netip.Addr, ifindex int) uint32 {
	if a.Is6() && (a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast()) {
		return uint32(ifindex)
	}
	return 0
}

// putSockaddr writes ap into sa as a sockaddr_in (IPv4) or sockaddr_in6 and
// returns its length. It does not allocate.
func putSockaddr(sa *unix.RawSockaddrInet6, ap netip.AddrPort, scope uint32) uint32 {
	port := ap.Port()
	if ap.Addr().Is4() {
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		s4.Family = unix.AF_INET
		p := (*[2]byte)(unsafe.Pointer(&s4.Port))
		p[0], p[1] = byte(port>>8), byte(port)
		s4.Addr = ap.Addr().As4()
		s4.Zero = [8]byte{}
		return unix.SizeofSockaddrInet4
	}
	sa.Family = unix.AF_INET6
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = byte(port>>8), byte(port)
	sa.Flowinfo = 0
	sa.Addr = ap.Addr().As16()
	sa.Scope_id = scope
	return unix.SizeofSockaddrInet6
}

// sockaddrAddrPort decodes a sockaddr written by the kernel. A link-local
// IPv6 source on interface ifindex gets zone ifname. It does not allocate.
func sockaddrAddrPort(sa *unix.RawSockaddrInet6, ifname string, ifindex int) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		p := (*[2]byte)(unsafe.Pointer(&s4.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(s4.Addr), uint16(p[0])<<8|uint16(p[1]))
	case unix.AF_INET6:
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		a := netip.AddrFrom16(sa.Addr)
		if sa.Scope_id != 0 && int(sa.Scope_id) == ifindex && ifname != "" {
			a = a.WithZone(ifname)
		}
		return netip.AddrPortFrom(a, uint16(p[0])<<8|uint16(p[1]))
	}
	return netip.AddrPort{}
}

// ReadBatch implements Transport.
func (u *UDP) ReadBatch(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (int, error) {
	if u.closed.Load() {
		return 0, ErrClosed
	}
	if !u.startRead(bufs, sizes, srcs) {
		return 0, nil
	}
	if u.gro.pending() {
		// Datagrams already read: hand them out without waiting.
		u.gro.drain(&u.rd, u)
		return u.endRead(nil)
	}
	err := u.epraw.Read(u.rd.boundPoll)
	return u.endRead(err)
}

// TryReadBatch implements Transport.
func (u *UDP) TryReadBatch(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (int, error) {
	if u.closed.Load() {
		return 0, ErrClosed
	}
	if !u.startRead(bufs, sizes, srcs) {
		return 0, nil
	}
	u.readPolled()
	return u.endRead(nil)
}

// TryReadBoth is TryReadBatch that looks at both sockets every call (the
// group socket first, the unicast socket when the group socket had
// nothing; the other way round every fourth call): for a backend that
// reads them only now and then beside sockets of its own (ebpf/).
func (u *UDP) TryReadBoth(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (int, error) {
	if u.closed.Load() {
		return 0, ErrClosed
	}
	if !u.startRead(bufs, sizes, srcs) {
		return 0, nil
	}
	u.readBoth()
	return u.endRead(nil)
}

// startRead records the call's arguments and points the headers at the
// buffers. It reports false when there is no slot to fill.
func (u *UDP) startRead(bufs [][]byte, sizes []int, srcs []netip.AddrPort) bool {
	r := &u.rd
	r.max = min(len(bufs), len(sizes), len(r.hdrs))
	if r.max == 0 {
		return false
	}
	r.bufs, r.sizes, r.srcs = bufs, sizes, srcs
	r.n, r.err = 0, nil
	// Write only what changed: a receiver that gets one datagram a call
	// (it keeps up) rewrote all BatchSize headers and iovecs each time,
	// 10% of its CPU profile on a veth bridge. The buffers in the slots
	// mostly stay (the engine replaces only those it kept).
	for i := 0; i < r.max; i++ {
		b := bufs[i]
		var want unix.Iovec
		if len(b) > 0 {
			want.Base = &b[0]
		}
		want.SetLen(len(b))
		if iov := &r.iovs[i]; *iov != want {
			*iov = want
		}
	}
	for i := 0; i < r.filled; i++ {
		h := &r.hdrs[i]
		h.Hdr.Namelen = unix.SizeofSockaddrInet6
		h.Hdr.Flags = 0
		h.Len = 0
	}
	r.filled = 0
	return true
}

func (u *UDP) endRead(err error) (int, error) {
	r := &u.rd
	n := r.n
	r.filled = n
	if err == nil {
		err = r.err
	}
	r.bufs, r.sizes, r.srcs, r.err = nil, nil, nil, nil
	if n > 0 {
		return n, nil // an error after some datagrams shows again on the next call
	}
	if err != nil && u.closed.Load() {
		return 0, ErrClosed
	}
	return 0, err
}

// pollRead runs under the epoll set's RawConn.Read: true ends the wait.
func (u *UDP) pollRead(uintptr) bool {
	u.readBoth()
	return u.rd.n > 0 || u.rd.err != nil
}

// readBoth reads, without blocking, from the group socket and, when that
// had nothing, from the unicast socket. Every fourth call reads unicast
// first and then the group with the slots left, so a busy group neither
// starves unicast nor pays a second (usually empty) recvmmsg on every call.
// It only reports nothing when both sockets were empty in this call, which
// is what makes waiting on the epoll set safe.
func (u *UDP) readBoth() {
	if !u.readGroupFirst() && u.rd.n == 0 && u.rd.err == nil {
		u.recvFrom(u.uraw)
	}
}

// readPolled is TryReadBatch's read: the group socket, and the unicast
// socket only on every fourth call (first, as in readBoth). An agent that
// polls while idle so pays one recvmmsg per empty poll instead of two; a
// unicast datagram waits at most three more polls (microseconds).
func (u *UDP) readPolled() {
	u.readGroupFirst()
}

// readGroupFirst is the read both share: every fourth call (or without a
// group socket) unicast first, then the group with the slots left, and it
// reports true; otherwise the group socket alone, and false.
func (u *UDP) readGroupFirst() (unicastRead bool) {
	r := &u.rd
	r.calls++
	if u.graw == nil || r.calls%4 == 0 {
		u.readUnicastFirst()
		return true
	}
	u.recvGroup()
	return false
}

func (u *UDP) readUnicastFirst() {
	r := &u.rd
	u.recvFrom(u.uraw)
	if u.graw != nil && r.err == nil && r.n < r.max {
		u.recvGroup()
	}
}

// recvGroup reads the group socket into the free slots: with GRO through
// the staging buffers (recvGRO), otherwise straight into them.
func (u *UDP) recvGroup() {
	if u.gro != nil {
		if err := u.graw.Read(u.rd.boundGRO); err != nil && u.rd.err == nil {
			u.rd.err = err
		}
		return
	}
	u.recvFrom(u.graw)
}

func (u *UDP) recvFrom(raw syscall.RawConn) {
	if err := raw.Read(u.rd.boundRecv); err != nil && u.rd.err == nil {
		u.rd.err = err
	}
}

// recv is one non-blocking recvmmsg into the free slots; it always ends the
// RawConn.Read (a socket being empty is not a reason to wait on it).
func (u *UDP) recv(fd uintptr) bool {
	r := &u.rd
	off := r.n
	n, err := recvmmsg(fd, r.hdrs[off:r.max])
	if err != nil {
		r.err = err
		return true
	}
	for i := off; i < off+n; i++ {
		h := &r.hdrs[i]
		r.sizes[i] = int(h.Len)
		if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
			u.truncated.Add(1)
		}
		if i < len(r.srcs) {
			r.srcs[i] = sockaddrAddrPort(&r.names[i], u.cfg.Interface, u.ifindex)
		}
	}
	r.n += n
	return true
}

// recvmmsg is one non-blocking recvmmsg into hdrs, retried on EINTR: how
// many it filled (0: the socket was empty), or the error.
func recvmmsg(fd uintptr, hdrs []unix.Mmsghdr) (int, error) {
	if len(hdrs) == 0 {
		return 0, nil
	}
	for {
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			return int(n), nil
		case unix.EINTR:
		case unix.EAGAIN:
			return 0, nil
		default:
			return 0, os.NewSyscallError("recvmmsg", e)
		}
	}
}

// groReader reads the group socket with UDP_GRO on: the kernel hands a
// run of datagrams that travelled as one segmented send (GSO) to the
// socket as one, which recvmmsg returns whole, with a UDP_GRO control
// message giving the datagrams' length. The run is read into a staging
// buffer of the largest UDP payload and copied out datagram by datagram
// into the caller's slots (one copy of a datagram in user space, against a
// socket enqueue, a wake-up and a dequeue per datagram in the kernel). What
// does not fit the caller's slots stays staged for the next call.
type groReader struct {
	stage [][]byte
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	ctrl  []byte // one control buffer of groCmsgSpace a header
	// seg and src are each staged run's datagram length and source,
	// worked out once when it is staged, not per datagram handed out.
	seg []int
	src []netip.AddrPort
	// Staged runs next..count-1 are still to hand out; off is where the
	// next datagram of run next starts.
	count, next, off int
}

// groStage is how many runs one recvmmsg stages (each up to 64 KB).
const groStage = 4

// groCmsgSpace is the room of one UDP_GRO control message (an int).
var groCmsgSpace = unix.CmsgSpace(4)

func newGROReader(n int) *groReader {
	g := &groReader{stage: make([][]byte, n), ctrl: make([]byte, n*groCmsgSpace),
		seg: make([]int, n), src: make([]netip.AddrPort, n)}
	g.hdrs, g.iovs, g.names = newHeaders(n)
	for i := range g.stage {
		g.stage[i] = make([]byte, 1<<16)
		g.iovs[i].Base = &g.stage[i][0]
		g.iovs[i].SetLen(len(g.stage[i]))
		g.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
		g.hdrs[i].Hdr.Control = &g.ctrl[i*groCmsgSpace]
		g.hdrs[i].Hdr.SetControllen(groCmsgSpace)
	}
	return g
}

// pending reports whether staged datagrams wait to be handed out.
func (g *groReader) pending() bool { return g != nil && g.next < g.count }

// segSize is the datagram length of staged run i: the UDP_GRO control
// message's, or the run's whole length when it is a single datagram.
func (g *groReader) segSize(i int) int {
	h := &g.hdrs[i]
	n := int(h.Len)
	if int(h.Hdr.Controllen) >= unix.CmsgLen(4) {
		c := (*unix.Cmsghdr)(unsafe.Pointer(&g.ctrl[i*groCmsgSpace]))
		if c.Level == unix.SOL_UDP && c.Type == unix.UDP_GRO {
			if s := int(*(*int32)(unsafe.Pointer(&g.ctrl[i*groCmsgSpace+unix.CmsgLen(0)]))); s > 0 && s < n {
				return s
			}
		}
	}
	return max(n, 1)
}

// drain copies staged datagrams into the caller's free slots.
func (g *groReader) drain(r *reader, u *UDP) {
	for r.n < r.max && g.next < g.count {
		i := g.next
		total := int(g.hdrs[i].Len)
		seg := min(g.seg[i], total-g.off)
		k := copy(r.bufs[r.n], g.stage[i][g.off:g.off+seg])
		if k < seg {
			u.truncated.Add(1)
		}
		r.sizes[r.n] = k
		if r.n < len(r.srcs) {
			r.srcs[r.n] = g.src[i]
		}
		r.n++
		if g.off += seg; g.off >= total {
			g.next, g.off = g.next+1, 0
		}
	}
}

// recvGRO is recv for the group socket with GRO: hand out what is staged,
// then, while slots are free, stage more with one non-blocking recvmmsg
// and hand that out. It always ends the RawConn.Read.
func (u *UDP) recvGRO(fd uintptr) bool {
	r, g := &u.rd, u.gro
	g.drain(r, u)
	if r.n >= r.max {
		return true
	}
	for i := range g.count {
		h := &g.hdrs[i]
		h.Hdr.Namelen = unix.SizeofSockaddrInet6
		h.Hdr.SetControllen(groCmsgSpace)
		h.Hdr.Flags = 0
	}
	g.count, g.next, g.off = 0, 0, 0
	n, err := recvmmsg(fd, g.hdrs)
	if err != nil {
		r.err = err
		return true
	}
	for i := range n {
		if g.hdrs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
			u.truncated.Add(1)
		}
		g.seg[i] = g.segSize(i)
		if g.seg[i] < int(g.hdrs[i].Len) {
			u.groRuns.Add(1)
		}
		g.src[i] = sockaddrAddrPort(&g.names[i], u.cfg.Interface, u.ifindex)
	}
	g.count = n
	g.drain(r, u)
	return true
}

// WriteBatch implements Transport.
//
// With GSO (UDP_SEGMENT, unless Config.NoGSO or the kernel refused it) a
// run of consecutive datagrams to the same destination, all of the run's
// first one's length but a shorter last one, goes to the kernel as one
// message: its iovecs are the datagrams and a UDP_SEGMENT control message
// gives the length. The kernel then runs its send path (route, netfilter,
// a bridge, the veth pair) once for the run and cuts the datagrams apart
// where it delivers them: the same datagrams on the wire, a fraction of
// the per-datagram cost. The count returned is of datagrams, as without.
func (u *UDP) WriteBatch(bufs [][]byte, dsts []netip.AddrPort) (int, error) {
	if u.closed.Load() {
		return 0, ErrClosed
	}
	for i := range min(len(bufs), len(dsts)) {
		if d := dsts[i]; d.IsValid() && !allowedDst(d, u.group, u.cfg.AllowNonLoopback) {
			return 0, ErrDestination
		}
	}
	w := &u.wr
	sent := 0
	for sent < len(bufs) {
		gso := u.gso.Load()
		cnt, iov, j := 0, 0, sent
		for j < len(bufs) && cnt < len(w.hdrs) && iov < len(w.iovs) {
			k := 1
			if seg := len(bufs[j]); gso && seg > 0 {
				total := seg
				for k < maxGSOSegments && iov+k < len(w.iovs) && j+k < len(bufs) {
					n := len(bufs[j+k])
					if n == 0 || n > seg || total+n > maxGSOBytes || !sameDst(dsts, u.group, j, j+k) {
						break
					}
					total += n
					k++
					if n < seg {
						break // a shorter datagram ends the run
					}
				}
			}
			for i := range k {
				b := bufs[j+i]
				if len(b) > 0 {
					w.iovs[iov+i].Base = &b[0]
				} else {
					w.iovs[iov+i].Base = nil
				}
				w.iovs[iov+i].SetLen(len(b))
			}
			h := &w.hdrs[cnt].Hdr
			h.Iov = &w.iovs[iov]
			h.SetIovlen(k)
			if j < len(dsts) && dsts[j].IsValid() && dsts[j] != u.group {
				h.Namelen = putSockaddr(&w.names[cnt], dsts[j], scopeFor(dsts[j].Addr(), u.ifindex))
			} else {
				w.names[cnt] = u.groupSA
				h.Namelen = u.saLen
			}
			if k > 1 {
				c := w.ctrl[cnt*gsoCmsgSpace : (cnt+1)*gsoCmsgSpace]
				binary.NativeEndian.PutUint16(c[unix.CmsgLen(0):], uint16(len(bufs[j])))
				h.Control = &c[0]
				h.SetControllen(gsoCmsgSpace)
			} else {
				h.Control = nil
				h.SetControllen(0)
			}
			w.segs[cnt] = k
			cnt++
			iov += k
			j += k
		}
		w.off, w.cnt, w.err, w.gsoFailed = 0, cnt, nil, false
		err := u.uraw.Write(w.boundSend)
		gsoSent := 0
		for _, k := range w.segs[:w.off] {
			sent += k
			if k > 1 {
				gsoSent++
			}
		}
		u.gsoSends.Add(uint64(gsoSent))
		if w.gsoFailed && err == nil {
			// The kernel refused a GSO message: send datagram by
			// datagram from now on (the rest of this batch included).
			u.gso.Store(false)
			u.gsoRefused.Add(1)
			continue
		}
		if err == nil {
			err = w.err
		}
		if err != nil {
			if u.closed.Load() {
				err = ErrClosed
			}
			return sent, err
		}
	}
	return sent, nil
}

// sameDst reports whether datagrams a and b of a batch go to the same
// destination (a missing or invalid destination, or the group, is the
// group).
func sameDst(dsts []netip.AddrPort, group netip.AddrPort, a, b int) bool {
	da, db := group, group
	if a < len(dsts) && dsts[a].IsValid() {
		da = dsts[a]
	}
	if b < len(dsts) && dsts[b].IsValid() {
		db = dsts[b]
	}
	return da == db
}

// GSO bounds: segments in one message (the kernel's UDP_MAX_SEGMENTS is 64
// on older kernels, 128 since 5.x) and the UDP payload of the whole run
// (IPv4's limit; IPv6's is larger).
const (
	maxGSOSegments = 64
	maxGSOBytes    = 65507
)

// gsoCmsgSpace is the room of one UDP_SEGMENT control message (a uint16).
var gsoCmsgSpace = unix.CmsgSpace(2)

// send runs sendmmsg until the batch is out, a datagram fails, or the
// transport is closed. A full socket buffer (EAGAIN) is waited out with
// poll(2) in steps of sendWaitStep, checking for Close between them (the
// socket is not in Go's poller, see UDP). A GSO message the kernel refuses
// (EIO: no checksum offload on the route; EINVAL, ENOPROTOOPT, EOPNOTSUPP)
// sets gsoFailed instead of an error: WriteBatch then sends it again
// without. It always ends the RawConn.Write.
func (u *UDP) send(fd uintptr) bool {
	w := &u.wr
	for w.off < w.cnt {
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&w.hdrs[w.off])), uintptr(w.cnt-w.off), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			w.off += int(n)
		case unix.EINTR:
		case unix.EAGAIN:
			if u.closed.Load() {
				w.err = ErrClosed
				return true
			}
			u.sendWaits.Add(1)
			w.pfd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLOUT}
			if _, err := unix.Poll(w.pfd[:], sendWaitStep); err != nil && err != unix.EINTR {
				w.err = os.NewSyscallError("poll", err)
				return true
			}
		case unix.EIO, unix.EINVAL, unix.ENOPROTOOPT, unix.EOPNOTSUPP:
			if w.segs[w.off] > 1 {
				w.gsoFailed = true
				return true
			}
			w.err = os.NewSyscallError("sendmmsg", e)
			return true
		default:
			w.err = os.NewSyscallError("sendmmsg", e)
			return true
		}
	}
	return true
}

// sendWaitStep is how long (ms) one poll(2) waits for a full send buffer
// to drain before send looks at Close again.
const sendWaitStep = 5

// SetGroupFilter implements GroupFilterSetter: it replaces the group
// socket's kernel filter by prog (Config.GroupFilter's rules), or removes it
// when prog is empty. SO_ATTACH_FILTER swaps the program atomically: every
// datagram queued after the call was judged by prog, every one before by
// the old program (datagrams already queued stay). A SendOnly transport has
// no group socket: nothing to filter, it returns nil. Safe from any
// goroutine; it allocates (call it at human rates, e.g. on a new
// incarnation).
func (u *UDP) SetGroupFilter(prog []bpf.RawInstruction) error {
	if u.closed.Load() {
		return ErrClosed
	}
	if u.gfile == nil {
		return nil
	}
	if len(prog) == 0 {
		var serr error
		if err := u.graw.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DETACH_FILTER, 0)
		}); err != nil {
			return u.closedErr(err)
		}
		if serr != nil && !errors.Is(serr, unix.ENOENT) { // ENOENT: no filter attached
			return fmt.Errorf("transport: SO_DETACH_FILTER on the group socket: %w", os.NewSyscallError("setsockopt", serr))
		}
		return nil
	}
	return u.closedErr(u.attachFilter(prog))
}

// attachFilter attaches prog to the group socket (SO_ATTACH_FILTER).
func (u *UDP) attachFilter(prog []bpf.RawInstruction) error {
	filter := make([]unix.SockFilter, len(prog))
	for i, ins := range prog {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := onSocket(u.graw, func(s int) error {
		return os.NewSyscallError("setsockopt", unix.SetsockoptSockFprog(s, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog))
	}); err != nil {
		return fmt.Errorf("transport: SO_ATTACH_FILTER on the group socket: %w", err)
	}
	return nil
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
