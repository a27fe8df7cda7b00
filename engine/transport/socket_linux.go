package transport

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// open opens the unicast socket, the group socket (unless SendOnly) and
// the epoll set Go's poller watches, and fills in u.info.
func (u *UDP) open(ifi *net.Interface) error {
	cfg := u.cfg
	family := unix.AF_INET
	if !cfg.Group.Addr().Is4() {
		family = unix.AF_INET6
	}
	u.saLen = putSockaddr(&u.groupSA, cfg.Group, uint32(u.ifindex))
	if err := u.openUnicast(ifi, family); err != nil {
		return err
	}
	u.group = cfg.Group
	if !cfg.SendOnly {
		if err := u.openGroup(ifi, family); err != nil {
			return err
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
	var err error
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

// openUnicast opens the unicast socket, which sends everything and
// receives unicast, with the multicast options, GSO and both buffers.
func (u *UDP) openUnicast(ifi *net.Interface, family int) error {
	cfg := u.cfg
	v6 := family == unix.AF_INET6
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
	return nil
}

// openGroup opens the group socket: bound to the group itself, so it
// receives that group only, shared by every member on the host; the group
// filter is attached before the join, and GRO turned on when asked.
func (u *UDP) openGroup(ifi *net.Interface, family int) error {
	cfg := u.cfg
	var gsa unix.RawSockaddrInet6
	glen := putSockaddr(&gsa, cfg.Group, uint32(u.ifindex))
	var err error
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
	var forced, capped bool
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
