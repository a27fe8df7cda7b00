package ebpf

import (
	"net/netip"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nakcast/nakcast/engine/transport"
)

// ReadBatch implements transport.Transport: group datagrams from the RX
// rings, unicast ones (and the few group datagrams the program leaves to
// the stack) from the UDP transport's sockets, blocking on the epoll set
// of all until one arrives, the deadline passes or Close.
func (t *XDP) ReadBatch(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (int, error) {
	if !t.enter() {
		return 0, transport.ErrClosed
	}
	defer t.exit()
	if !t.startRead(bufs, sizes, srcs) {
		return 0, nil
	}
	if t.pollRead(0) {
		return t.endRead(nil)
	}
	for _, x := range t.socks {
		if x.busyPoll {
			x.wakeRx() // busy-poll the queue once before sleeping
			t.readRing(x)
		}
	}
	if t.rd.n > 0 {
		return t.endRead(nil)
	}
	err := t.epraw.Read(t.rd.boundPoll)
	return t.endRead(err)
}

// TryReadBatch implements transport.Transport without blocking. The rings
// are read every call, in shared memory, without a system call; the UDP
// transport's sockets (unicast, which carries only membership and repair
// requests, and the group socket, which gets what the program leaves to
// the stack) every socketsEvery calls, and while the rings keep the
// caller busy at least every socketsInterval: a poll loop pays a recvmmsg
// or two per 32 empty polls (a few microseconds of spinning), and a
// datagram that took the stack's way is not held back long enough to
// look lost.
// With busy polling
// (Options.BusyPoll), a poll that finds the rings empty asks the kernel
// to poll the queues (recvfrom, which runs the device's receive work in
// this thread if it is pending) and reads the rings again.
func (t *XDP) TryReadBatch(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (int, error) {
	if !t.enter() {
		return 0, transport.ErrClosed
	}
	defer t.exit()
	if !t.startRead(bufs, sizes, srcs) {
		return 0, nil
	}
	r := &t.rd
	r.calls++
	t.readRings()
	if r.n == 0 && t.socks[0].busyPoll {
		for _, x := range t.socks {
			x.wakeRx()
		}
		t.readRings()
	}
	if r.calls%socketsEvery == 0 || t.socketsDue() {
		t.readSockets()
	}
	return t.endRead(nil)
}

// socketsDue reports whether a read that found datagrams on the rings
// reads the UDP transport's sockets too: once socketsInterval has passed
// since it last did (a busy caller reads them that often at least).
func (t *XDP) socketsDue() bool {
	r := &t.rd
	return r.n > 0 && r.n < r.max && time.Since(r.socketsAt) > socketsInterval
}

// socketsEvery is how often (in calls) TryReadBatch reads the UDP
// transport's sockets, socketsInterval how long at most while the rings
// keep it busy.
const (
	socketsEvery    = 32
	socketsInterval = 100 * time.Microsecond
)

func (t *XDP) startRead(bufs [][]byte, sizes []int, srcs []netip.AddrPort) bool {
	r := &t.rd
	r.max = min(len(bufs), len(sizes), t.cfg.BatchSize)
	if r.max == 0 {
		return false
	}
	r.bufs, r.sizes, r.srcs, r.n, r.err = bufs, sizes, srcs, 0, nil
	return true
}

func (t *XDP) endRead(err error) (int, error) {
	r := &t.rd
	n := r.n
	if err == nil {
		err = r.err
	}
	r.bufs, r.sizes, r.srcs, r.err = nil, nil, nil, nil
	if n > 0 {
		return n, nil
	}
	if err != nil && t.closed.Load() {
		return 0, transport.ErrClosed
	}
	return 0, err
}

// pollRead is ReadBatch's read, also run under the epoll set's
// RawConn.Read: the rings, then, when they were empty (or socketsDue),
// the UDP transport's sockets; true ends the wait. The epoll set watches
// the sockets level-triggered, so a socket left unread while the rings
// kept the caller busy is read by the first call that finds them empty.
func (t *XDP) pollRead(uintptr) bool {
	t.readRings()
	if t.rd.n == 0 || t.socketsDue() {
		t.readSockets()
	}
	return t.rd.n > 0 || t.rd.err != nil
}

// readSockets reads the UDP transport's two sockets into the free slots,
// if its epoll set says one of them has something: one epoll_wait that
// does not wait instead of a recvmmsg on each socket.
func (t *XDP) readSockets() {
	r := &t.rd
	if r.n >= r.max {
		return
	}
	r.socketsAt = time.Now()
	if n, err := unix.EpollWait(t.uniEp, r.events[:], 0); err == nil && n == 0 {
		return
	}
	var srcs []netip.AddrPort
	if len(r.srcs) > r.n {
		srcs = r.srcs[r.n:]
	}
	n, err := t.uni.TryReadBoth(r.bufs[r.n:r.max], r.sizes[r.n:r.max], srcs)
	r.n += n
	if err != nil && r.err == nil {
		r.err = err
	}
}

// readRings reads every socket's RX ring into the free slots, starting
// with a different socket each call so that no queue starves.
func (t *XDP) readRings() {
	r := &t.rd
	k := len(t.socks)
	for i := 0; i < k && r.n < r.max; i++ {
		t.readRing(t.socks[(r.next+i)%k])
	}
	r.next = (r.next + 1) % k
}

// readRing takes the frames ready on x's RX ring (up to the free slots),
// copies each valid group datagram into the next slot, and gives every
// frame back to the fill ring. It does not allocate.
func (t *XDP) readRing(x *xsk) {
	r := &t.rd
	idx, got := x.rx.peek(uint32(r.max - r.n))
	if got == 0 {
		if x.fill.needWakeup() {
			x.wakeRx()
		}
		return
	}
	fidx, _ := x.fill.reserve(got) // room: every frame the RX ring held came from it
	fmask := ^uint64(x.frameSize - 1)
	vm := t.filter.Load()
	for i := range got {
		d := *x.rx.at(idx + i)
		*x.fill.at(fidx + i) = d.Addr & fmask
		end := d.Addr + uint64(d.Len)
		if end > uint64(len(x.umem)) || d.Addr&fmask != (end-1)&fmask {
			t.ctr.malformed.Add(1) // the kernel never does this
			continue
		}
		frame := x.umem[d.Addr:end]
		p, ferr := parseFrame(frame, t.group)
		switch ferr {
		case frameMalformed:
			t.ctr.malformed.Add(1)
			continue
		case frameForeign:
			t.ctr.foreign.Add(1)
			continue
		}
		if vm != nil {
			keep, _ := vm.Run(frame[p.off-udpLen : p.off+p.n])
			if keep == 0 {
				t.ctr.filtered.Add(1)
				continue
			}
			p.n = min(p.n, max(keep-udpLen, 0))
		}
		c := copy(r.bufs[r.n], frame[p.off:p.off+p.n])
		if c < p.n {
			t.ctr.truncated.Add(1)
		}
		r.sizes[r.n] = c
		if r.n < len(r.srcs) {
			r.srcs[r.n] = t.source(p.src)
		}
		r.n++
	}
	x.rx.release(got)
	x.fill.submit()
}

// source gives a link-local IPv6 source its zone.
func (t *XDP) source(s netip.AddrPort) netip.AddrPort {
	if t.zone != "" && s.Addr().IsLinkLocalUnicast() {
		return netip.AddrPortFrom(s.Addr().WithZone(t.zone), s.Port())
	}
	return s
}

// WriteBatch implements transport.Transport: datagrams to the group go
// out as frames through the first socket's TX ring, unicast ones through
// the unicast socket, each run in order. Every destination and size is
// checked before anything is sent.
func (t *XDP) WriteBatch(bufs [][]byte, dsts []netip.AddrPort) (int, error) {
	if !t.enter() {
		return 0, transport.ErrClosed
	}
	defer t.exit()
	for i, b := range bufs {
		d := dstAt(dsts, i)
		switch {
		case d.IsValid() && !transport.DestinationAllowed(d, t.group, t.cfg.AllowNonLoopback):
			return 0, transport.ErrDestination
		case t.toGroup(d) && len(b) > t.maxLen:
			return 0, ErrTooLarge
		}
	}
	sent := 0
	for sent < len(bufs) {
		g := t.toGroup(dstAt(dsts, sent))
		end := sent + 1
		for end < len(bufs) && t.toGroup(dstAt(dsts, end)) == g {
			end++
		}
		var n int
		var err error
		if g {
			n, err = t.sendGroup(bufs[sent:end])
		} else {
			n, err = t.uni.WriteBatch(bufs[sent:end], dsts[sent:end])
		}
		sent += n
		if err != nil {
			if t.closed.Load() {
				err = transport.ErrClosed
			}
			return sent, err
		}
	}
	return sent, nil
}

func dstAt(dsts []netip.AddrPort, i int) netip.AddrPort {
	if i < len(dsts) {
		return dsts[i]
	}
	return netip.AddrPort{}
}

// toGroup reports whether a destination means the group.
func (t *XDP) toGroup(d netip.AddrPort) bool {
	return !d.IsValid() || (d.Port() == t.group.Port() && d.Addr().WithZone("") == t.group.Addr())
}

// sendGroup sends bufs to the group as frames: as many as free TX frames
// and ring slots allow at a time, each such batch sent with one kick.
func (t *XDP) sendGroup(bufs [][]byte) (int, error) {
	x := t.socks[0]
	sent := 0
	for sent < len(bufs) {
		x.reclaim()
		room := min(uint32(x.txFree.len()), uint32(len(bufs)-sent))
		idx, n := x.tx.reserve(room)
		if n == 0 {
			if err := t.waitTX(x); err != nil {
				return sent, err
			}
			continue
		}
		for i := range n {
			a, _ := x.txFree.get()
			l := t.tmpl.build(x.umem[a:a+uint64(x.frameSize)], bufs[sent+int(i)], t.wr.id)
			t.wr.id++
			*x.tx.at(idx + i) = desc{Addr: a, Len: uint32(l)}
		}
		x.tx.submit()
		sent += int(n)
		if err := t.flushTX(x); err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// flushTX makes the kernel take what the TX ring holds. In copy mode the
// sendto itself builds and sends the frames, at most its budget a call:
// it is repeated until the ring is empty. In zero-copy mode the driver
// sends on its own once woken, if it asks to be.
func (t *XDP) flushTX(x *xsk) error {
	if x.zeroCopy {
		if x.tx.needWakeup() {
			t.ctr.kicks.Add(1)
			_, err := x.kick()
			return err
		}
		return nil
	}
	for spins := 0; x.tx.pending() > 0; spins++ {
		t.ctr.kicks.Add(1)
		again, err := x.kick()
		if err != nil {
			return err
		}
		if again {
			x.reclaim()
			if spins > 0 {
				runtime.Gosched()
			}
		}
		if t.closed.Load() {
			return transport.ErrClosed
		}
	}
	return nil
}

// waitTX waits for free TX frames: it kicks the kernel, takes back what
// it completed, and yields, sleeping briefly once that has not helped for
// a while, until frames are free or Close.
func (t *XDP) waitTX(x *xsk) error {
	t.ctr.txWaits.Add(1)
	for spins := 0; ; spins++ {
		if t.closed.Load() {
			return transport.ErrClosed
		}
		if x.tx.pending() > 0 || x.tx.needWakeup() {
			if _, err := x.kick(); err != nil {
				return err
			}
		}
		x.reclaim()
		if x.txFree.len() > 0 && x.tx.free(1) > 0 {
			return nil
		}
		if spins < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(txWaitStep)
		}
	}
}

// txWaitStep is waitTX's sleep once yielding has not freed a frame.
const txWaitStep = 50 * time.Microsecond
