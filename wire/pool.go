package wire

import (
	"sync"
	"sync/atomic"
)

// Buffer holds one datagram. B is the whole storage (its length is the size
// class), N the datagram's length; Bytes returns B[:N].
//
// A Buffer is reference counted: Get returns it with one reference, every
// holder that keeps it beyond the call that gave it (a receive window holding
// a bundle's messages, an outbox entry) takes one with Retain and gives it
// back with Release; the last Release returns it to its pool. Retain and
// Release are safe for concurrent use.
//
// Releasing more often than retained is a programming error that may corrupt
// another holder's data; the package panics when it sees it (the count going
// below zero, or Retain on a buffer whose count is zero), which catches a
// second Release before the pool hands the buffer out again. It cannot catch
// a stale Release that happens after the buffer was reused. This is the only
// panic in the package.
type Buffer struct {
	B []byte
	N int

	refs  atomic.Int32
	pool  *Pool
	class int32
}

// NewBuffer returns an unpooled buffer over b (B is b up to its capacity, N
// is len(b)) with one reference; its last Release just drops it.
func NewBuffer(b []byte) *Buffer {
	buf := &Buffer{B: b[:cap(b)], N: len(b), class: -1}
	buf.refs.Store(1)
	return buf
}

// Bytes returns the datagram, B[:N].
func (b *Buffer) Bytes() []byte { return b.B[:b.N] }

// Refs returns the current reference count (for tests and diagnostics).
func (b *Buffer) Refs() int32 { return b.refs.Load() }

// Retain adds n references (n <= 0 does nothing). It panics if the buffer has
// no reference left: it was already released to its pool.
func (b *Buffer) Retain(n int32) {
	if n <= 0 {
		return
	}
	if b.refs.Add(n) <= n {
		panic("wire: Retain of a released Buffer")
	}
}

// Release drops one reference; the last one returns the buffer to its pool.
// It panics when called more often than the buffer was retained (see Buffer).
func (b *Buffer) Release() {
	switch r := b.refs.Add(-1); {
	case r > 0:
	case r == 0:
		if b.pool != nil {
			b.pool.put(b)
		}
	default:
		panic("wire: Buffer released more often than retained")
	}
}

// MinBufferSize is the smallest size class of a Pool.
const MinBufferSize = 512

// PoolStats are a Pool's counters.
type PoolStats struct {
	Gets       uint64 // buffers handed out
	Allocs     uint64 // of which newly allocated (the free list was empty)
	OverBudget uint64 // Gets refused because the budget was exhausted
	Oversize   uint64 // Gets refused because size exceeded the largest class
	Releases   uint64 // buffers returned by their last Release
	Discards   uint64 // returned buffers dropped because idle memory reached the budget

	Outstanding        int64 // bytes (size classes) held by callers
	OutstandingBuffers int64 // buffers held by callers
	Idle               int64 // bytes waiting in the free lists
	Budget             int64 // the bound on Outstanding; 0 = unbounded
}

// Pool hands out Buffers in size classes (powers of two from MinBufferSize,
// the last class being the largest datagram) and takes them back on their
// last Release. A byte budget bounds the memory held by callers: Get returns
// nil rather than exceed it, so a flood of incoming datagrams is dropped
// (and counted by the caller) instead of growing memory. Idle buffers kept
// for reuse are bounded by the same budget, so a pool holds at most twice its
// budget. Safe for concurrent use; Get and Release do not allocate once the
// free lists have warmed up.
type Pool struct {
	classes     []sizeClass
	maxDatagram int
	budget      int64

	outstanding atomic.Int64
	idle        atomic.Int64

	gets, allocs, overBudget, oversize, releases, discards atomic.Uint64
}

type sizeClass struct {
	size int
	mu   sync.Mutex
	free []*Buffer
	_    [64]byte // keep classes' locks on separate cache lines
}

// NewPool returns a pool for datagrams of up to maxDatagram bytes (<= 0
// means MaxUDPPayload) whose callers hold at most budget bytes at once
// (counted in size-class bytes; budget <= 0 means unbounded).
func NewPool(maxDatagram int, budget int64) *Pool {
	if maxDatagram <= 0 {
		maxDatagram = MaxUDPPayload
	}
	p := &Pool{maxDatagram: maxDatagram, budget: max(budget, 0)}
	n := 1
	for s := MinBufferSize; s < maxDatagram; s <<= 1 {
		n++
	}
	p.classes = make([]sizeClass, n)
	s := MinBufferSize
	for i := range p.classes {
		p.classes[i].size = min(s, maxDatagram)
		s <<= 1
	}
	return p
}

// MaxDatagram returns the largest size Get accepts.
func (p *Pool) MaxDatagram() int { return p.maxDatagram }

// Get returns a buffer whose B holds at least size bytes, with one reference
// and N = 0; its contents are unspecified. It returns nil if size exceeds
// MaxDatagram or if handing it out would exceed the budget.
func (p *Pool) Get(size int) *Buffer {
	if size > p.maxDatagram {
		p.oversize.Add(1)
		return nil
	}
	ci := 0
	for size > p.classes[ci].size {
		ci++
	}
	c := &p.classes[ci]
	sz := int64(c.size)
	if out := p.outstanding.Add(sz); p.budget > 0 && out > p.budget {
		p.outstanding.Add(-sz)
		p.overBudget.Add(1)
		return nil
	}
	c.mu.Lock()
	var b *Buffer
	if n := len(c.free); n > 0 {
		b = c.free[n-1]
		c.free[n-1] = nil
		c.free = c.free[:n-1]
	}
	c.mu.Unlock()
	if b != nil {
		p.idle.Add(-sz)
	} else {
		b = &Buffer{B: make([]byte, c.size), pool: p, class: int32(ci)}
		p.allocs.Add(1) // after the allocation: a reader that sees it counted sees it made
	}
	b.N = 0
	b.refs.Store(1)
	p.gets.Add(1)
	return b
}

// put takes back a buffer whose count reached zero.
func (p *Pool) put(b *Buffer) {
	c := &p.classes[b.class]
	sz := int64(c.size)
	p.outstanding.Add(-sz)
	p.releases.Add(1)
	if p.budget > 0 && p.idle.Add(sz) > p.budget {
		p.idle.Add(-sz)
		p.discards.Add(1)
		return
	} else if p.budget == 0 {
		p.idle.Add(sz)
	}
	c.mu.Lock()
	c.free = append(c.free, b)
	c.mu.Unlock()
}

// Stats returns a snapshot of the counters (each read atomically, not all
// at one instant).
func (p *Pool) Stats() PoolStats {
	releases := p.releases.Load() // before gets: never more releases than gets
	gets := p.gets.Load()
	return PoolStats{
		Gets:               gets,
		Allocs:             p.allocs.Load(),
		OverBudget:         p.overBudget.Load(),
		Oversize:           p.oversize.Load(),
		Releases:           releases,
		Discards:           p.discards.Load(),
		Outstanding:        p.outstanding.Load(),
		OutstandingBuffers: int64(gets - releases),
		Idle:               p.idle.Load(),
		Budget:             p.budget,
	}
}
