package transport

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

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
