package transport

import (
	"net/netip"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

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
		cnt := u.fill(bufs, dsts, sent)
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

// fill points the headers at bufs from index sent on, as many messages
// as there are headers and iovecs, each a GSO run (gsoRun) or one
// datagram, and returns how many headers it filled.
func (u *UDP) fill(bufs [][]byte, dsts []netip.AddrPort, sent int) int {
	w := &u.wr
	gso := u.gso.Load()
	cnt, iov, j := 0, 0, sent
	for j < len(bufs) && cnt < len(w.hdrs) && iov < len(w.iovs) {
		k := gsoRun(bufs, dsts, u.group, j, len(w.iovs)-iov, gso)
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
		w.setSegment(cnt, k, len(bufs[j]))
		cnt++
		iov += k
		j += k
	}
	return cnt
}

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
