package ebpf

// framePool is a stack of free UMEM frames (their addresses), the TX
// frames not in flight. Only the writing goroutine uses it.
type framePool struct {
	free []uint64
	mask uint64
}

// newFramePool holds frames first..first+n-1 of frameSize bytes (a power
// of two).
func newFramePool(frameSize, first, n int) framePool {
	p := framePool{free: make([]uint64, 0, n), mask: ^uint64(frameSize - 1)}
	for i := range n {
		p.free = append(p.free, uint64((first+i)*frameSize))
	}
	return p
}

// get takes a free frame's address.
func (p *framePool) get() (uint64, bool) {
	n := len(p.free)
	if n == 0 {
		return 0, false
	}
	a := p.free[n-1]
	p.free = p.free[:n-1]
	return a, true
}

// put returns the frame that addr lies in.
func (p *framePool) put(addr uint64) { p.free = append(p.free, addr&p.mask) }

// len is how many frames are free.
func (p *framePool) len() int { return len(p.free) }
