package transport

import (
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

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
