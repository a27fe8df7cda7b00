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
	ListGrowth uint64 // free-list appends that allocated (a new high-water mark of idle buffers)

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
//
// One mutex guards the free lists and the counters: a Get is a lock, an
// unlock and the new buffer's count, a last Release the count, a lock and
// an unlock. Atomic counters beside per-class locks took twice as many
// locked instructions: BenchmarkPoolGetRelease (Get, Retain, two Releases)
// went from 84 to 53 ns on these 2-core VMs, where an uncontended atomic
// add costs about 6 ns; a small-message exchange pays it per datagram on
// both sides. The pool's users are one member's agent goroutines, so the
// single lock is seldom contended.
type Pool struct {
	classes     []sizeClass
	maxDatagram int
	budget      int64

	mu          sync.Mutex
	outstanding int64 // size-class bytes held by callers
	idle        int64 // size-class bytes in the free lists

	gets, overBudget, oversize, releases, discards, listGrowth uint64

	// allocs is counted outside the lock, after the allocation: a reader
	// that sees it counted sees the allocation made.
	allocs atomic.Uint64
}

type sizeClass struct {
	size int
	free []*Buffer
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
		p.mu.Lock()
		p.oversize++
		p.mu.Unlock()
		return nil
	}
	ci := 0
	for size > p.classes[ci].size {
		ci++
	}
	c := &p.classes[ci]
	sz := int64(c.size)
	p.mu.Lock()
	if p.budget > 0 && p.outstanding+sz > p.budget {
		p.overBudget++
		p.mu.Unlock()
		return nil
	}
	p.outstanding += sz
	p.gets++
	var b *Buffer
	if n := len(c.free); n > 0 {
		b = c.free[n-1]
		c.free[n-1] = nil
		c.free = c.free[:n-1]
		p.idle -= sz
	}
	p.mu.Unlock()
	if b == nil {
		b = &Buffer{B: make([]byte, c.size), pool: p, class: int32(ci)}
		p.allocs.Add(1)
	}
	b.N = 0
	b.refs.Store(1)
	return b
}

// put takes back a buffer whose count reached zero.
func (p *Pool) put(b *Buffer) {
	c := &p.classes[b.class]
	sz := int64(c.size)
	p.mu.Lock()
	p.outstanding -= sz
	p.releases++
	if p.budget > 0 && p.idle+sz > p.budget {
		p.discards++
	} else {
		p.idle += sz
		if len(c.free) == cap(c.free) {
			p.listGrowth++ // append allocates: a new high-water mark
		}
		c.free = append(c.free, b)
	}
	p.mu.Unlock()
}

// Stats returns a snapshot of the counters.
func (p *Pool) Stats() PoolStats {
	allocs := p.allocs.Load() // before gets: never more allocations than gets
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolStats{
		Gets:               p.gets,
		Allocs:             allocs,
		OverBudget:         p.overBudget,
		Oversize:           p.oversize,
		Releases:           p.releases,
		Discards:           p.discards,
		ListGrowth:         p.listGrowth,
		Outstanding:        p.outstanding,
		OutstandingBuffers: int64(p.gets - p.releases),
		Idle:               p.idle,
		Budget:             p.budget,
	}
}
