package ebpf

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// xsk is one AF_XDP socket bound to one receive queue, with a UMEM of its
// own: frames [0, rxFrames) circulate between the fill ring, the kernel
// and the RX ring; frames [rxFrames, rxFrames+txFrames) between the TX
// free list, the TX ring and the completion ring. The reading goroutine
// owns rx and fill, the writing goroutine tx, comp and txFree.
type xsk struct {
	fd        int
	queue     int
	umem      []byte
	frameSize int
	rxFrames  int

	fill, comp ring[uint64]
	rx, tx     ring[desc]
	maps       [][]byte

	txFree   framePool
	zeroCopy bool
	busyPoll bool
}

// xskConfig is what newXSK needs beyond Options.
type xskConfig struct {
	ifindex, queue int
	frameSize      int
	// copyOnly skips the zero-copy attempt (generic XDP has none).
	copyOnly bool
	o        Options
}

// newXSK opens, sizes, maps and binds an AF_XDP socket. Its errors name
// what is missing (ErrUnavailable) where the kernel says so.
func newXSK(c xskConfig) (*xsk, error) {
	fd, err := xdpSocket()
	if err != nil {
		return nil, err
	}
	x := &xsk{fd: fd, queue: c.queue, frameSize: c.frameSize, rxFrames: c.o.Frames}
	if err := x.setup(c); err != nil {
		x.close()
		return nil, err
	}
	return x, nil
}

// xdpSocket opens an AF_XDP socket, naming what is missing when it
// cannot.
func xdpSocket() (int, error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.EAFNOSUPPORT):
		return -1, unavailable("the kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS)")
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return -1, unavailable("an AF_XDP socket needs CAP_NET_RAW (run as root)")
	case err != nil:
		return -1, os.NewSyscallError("socket AF_XDP", err)
	}
	return fd, nil
}

// setup registers the UMEM, sizes and maps the rings, fills the fill
// ring, sets the busy-poll options and binds.
func (x *xsk) setup(c xskConfig) error {
	n := c.o.Frames + c.o.TxFrames
	var err error
	x.umem, err = unix.Mmap(-1, 0, n*c.frameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("ebpf: UMEM of %d bytes: %w", n*c.frameSize, os.NewSyscallError("mmap", err))
	}
	// Write every UMEM byte once before the kernel sees it. MAP_POPULATE
	// maps the pages, yet a fresh member's receive frames are slower on
	// first use, until the fill ring has gone round once, with no page
	// faults counted; writing the whole UMEM here shortens that start-up
	// transient more than touching one byte a page (docs/xdp.md).
	for i := range x.umem {
		x.umem[i] = 0xff
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&x.umem[0]))), Len: uint64(len(x.umem)), Size: uint32(c.frameSize)}
	if err := setsockoptPtr(x.fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EPERM) {
			return unavailable("registering a %d byte UMEM: %v (pinned memory: raise RLIMIT_MEMLOCK or run with CAP_IPC_LOCK)", len(x.umem), err)
		}
		return fmt.Errorf("ebpf: XDP_UMEM_REG: %w", err)
	}
	for _, r := range []struct {
		opt, n int
		name   string
	}{
		{unix.XDP_UMEM_FILL_RING, c.o.Frames, "XDP_UMEM_FILL_RING"},
		{unix.XDP_UMEM_COMPLETION_RING, c.o.TxFrames, "XDP_UMEM_COMPLETION_RING"},
		{unix.XDP_RX_RING, c.o.Frames, "XDP_RX_RING"},
		{unix.XDP_TX_RING, c.o.TxFrames, "XDP_TX_RING"},
	} {
		if err := unix.SetsockoptInt(x.fd, unix.SOL_XDP, r.opt, r.n); err != nil {
			return fmt.Errorf("ebpf: %s %d: %w", r.name, r.n, os.NewSyscallError("setsockopt", err))
		}
	}
	if err := x.mapRings(c.o); err != nil {
		return err
	}
	idx, got := x.fill.reserve(uint32(c.o.Frames))
	for i := range got {
		*x.fill.at(idx + i) = uint64(int(i) * c.frameSize)
	}
	x.fill.submit()
	x.txFree = newFramePool(c.frameSize, c.o.Frames, c.o.TxFrames)
	// Copy mode sends at most 32 frames a sendto unless told otherwise
	// (Linux 6.17+); a batch then goes out in one call.
	_ = unix.SetsockoptInt(x.fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, c.o.TxFrames)
	if c.o.BusyPoll > 0 {
		us := max(int(c.o.BusyPoll.Microseconds()), 1)
		x.busyPoll = unix.SetsockoptInt(x.fd, unix.SOL_SOCKET, unix.SO_BUSY_POLL, us) == nil
		if x.busyPoll {
			_ = unix.SetsockoptInt(x.fd, unix.SOL_SOCKET, unix.SO_PREFER_BUSY_POLL, 1)
			_ = unix.SetsockoptInt(x.fd, unix.SOL_SOCKET, unix.SO_BUSY_POLL_BUDGET, 64)
		}
	}
	return x.bind(c)
}

// bind binds to the queue with need-wakeup, zero-copy first unless
// copyOnly, else copy mode.
func (x *xsk) bind(c xskConfig) error {
	sa := unix.SockaddrXDP{Ifindex: uint32(c.ifindex), QueueID: uint32(c.queue)}
	var err error
	if !c.copyOnly {
		sa.Flags = unix.XDP_USE_NEED_WAKEUP | unix.XDP_ZEROCOPY
		if err = unix.Bind(x.fd, &sa); err == nil {
			x.zeroCopy = true
			return nil
		}
	}
	sa.Flags = unix.XDP_USE_NEED_WAKEUP | unix.XDP_COPY
	if err = unix.Bind(x.fd, &sa); err == nil {
		return nil
	}
	if errors.Is(err, unix.EBUSY) {
		return unavailable("queue %d of interface %d is taken by another AF_XDP socket (one AF_XDP member per interface)", c.queue, c.ifindex)
	}
	return fmt.Errorf("ebpf: bind AF_XDP socket to queue %d of interface %d: %w", c.queue, c.ifindex, os.NewSyscallError("bind", err))
}

// mapRings maps the four rings at the offsets the kernel gives.
func (x *xsk) mapRings(o Options) error {
	var off unix.XDPMmapOffsets
	l := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(x.fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&l)), 0); e != 0 {
		return fmt.Errorf("ebpf: XDP_MMAP_OFFSETS: %w", os.NewSyscallError("getsockopt", e))
	}
	if l != uint32(unsafe.Sizeof(off)) {
		return unavailable("the kernel's AF_XDP ring layout has no flags field (Linux 5.4 or later needed)")
	}
	m, err := x.mmap(off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, o.Frames, 8)
	if err != nil {
		return err
	}
	x.fill = newRing(u32At(m, off.Fr.Producer), u32At(m, off.Fr.Consumer), u32At(m, off.Fr.Flags), entriesAt[uint64](m, off.Fr.Desc, o.Frames), true)
	if m, err = x.mmap(off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, o.TxFrames, 8); err != nil {
		return err
	}
	x.comp = newRing(u32At(m, off.Cr.Producer), u32At(m, off.Cr.Consumer), u32At(m, off.Cr.Flags), entriesAt[uint64](m, off.Cr.Desc, o.TxFrames), false)
	if m, err = x.mmap(off.Rx, unix.XDP_PGOFF_RX_RING, o.Frames, int(unsafe.Sizeof(desc{}))); err != nil {
		return err
	}
	x.rx = newRing(u32At(m, off.Rx.Producer), u32At(m, off.Rx.Consumer), u32At(m, off.Rx.Flags), entriesAt[desc](m, off.Rx.Desc, o.Frames), false)
	if m, err = x.mmap(off.Tx, unix.XDP_PGOFF_TX_RING, o.TxFrames, int(unsafe.Sizeof(desc{}))); err != nil {
		return err
	}
	x.tx = newRing(u32At(m, off.Tx.Producer), u32At(m, off.Tx.Consumer), u32At(m, off.Tx.Flags), entriesAt[desc](m, off.Tx.Desc, o.TxFrames), true)
	return nil
}

func (x *xsk) mmap(off unix.XDPRingOffset, pgoff int64, n, entry int) ([]byte, error) {
	m, err := unix.Mmap(x.fd, pgoff, int(off.Desc)+n*entry, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("ebpf: mapping an AF_XDP ring: %w", os.NewSyscallError("mmap", err))
	}
	x.maps = append(x.maps, m)
	return m, nil
}

func u32At(m []byte, off uint64) *uint32 { return (*uint32)(unsafe.Pointer(&m[off])) }

func entriesAt[T any](m []byte, off uint64, n int) []T {
	return unsafe.Slice((*T)(unsafe.Pointer(&m[off])), n)
}

// setsockoptPtr is setsockopt(SOL_XDP) with a struct argument.
func setsockoptPtr(fd, opt int, p unsafe.Pointer, n uintptr) error {
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), n, 0); e != 0 {
		return os.NewSyscallError("setsockopt", e)
	}
	return nil
}

// kick wakes the kernel to send what the TX ring holds (sendto with no
// data). In copy mode the call itself sends, up to its budget a call.
// It reports whether to call again soon: the kernel stopped short (a full
// completion ring, a busy device queue, its budget) or was interrupted.
func (x *xsk) kick() (again bool, err error) {
	_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	switch e {
	case 0:
		return false, nil
	case unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.EINTR:
		return true, nil
	}
	return false, os.NewSyscallError("sendto AF_XDP", e)
}

// wakeRx wakes the kernel to refill from the fill ring (recvfrom with no
// data): needed when the fill ring says so, and what drives busy polling.
func (x *xsk) wakeRx() {
	_, _, _ = unix.Syscall6(unix.SYS_RECVFROM, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
}

// reclaim moves completed TX frames back to the free list.
func (x *xsk) reclaim() {
	idx, n := x.comp.peek(x.comp.size)
	for i := range n {
		x.txFree.put(*x.comp.at(idx + i))
	}
	if n > 0 {
		x.comp.release(n)
	}
}

// statistics reads XDP_STATISTICS.
func (x *xsk) statistics() (unix.XDPStatistics, error) {
	var s unix.XDPStatistics
	l := uint32(unsafe.Sizeof(s))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(x.fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&s)), uintptr(unsafe.Pointer(&l)), 0); e != 0 {
		return s, os.NewSyscallError("getsockopt XDP_STATISTICS", e)
	}
	return s, nil
}

// close unmaps the rings and the UMEM and closes the socket.
func (x *xsk) close() {
	for _, m := range x.maps {
		_ = unix.Munmap(m)
	}
	x.maps = nil
	if x.fd >= 0 {
		unix.Close(x.fd)
		x.fd = -1
	}
	if x.umem != nil {
		_ = unix.Munmap(x.umem)
		x.umem = nil
	}
}
