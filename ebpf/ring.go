package ebpf

import "sync/atomic"

// desc is an RX or TX ring entry (struct xdp_desc): a frame's address in
// the UMEM, its length and options.
type desc struct {
	Addr    uint64
	Len     uint32
	Options uint32
}

// ring is one of an AF_XDP socket's four single-producer single-consumer
// rings, shared with the kernel: fill and TX are produced here and
// consumed by the kernel, RX and completion the other way round. prod and
// cons are free-running 32-bit indexes (they wrap; entries = prod - cons
// modulo 2^32), the slot of index i is entries[i & mask], and each side
// reads the other's index with an acquire load and publishes its own with
// a release store (sync/atomic's loads and stores are at least that).
// Each side keeps a cached copy of the other's index and refreshes it only
// when the cache says the ring is full (producer) or empty (consumer), as
// libxdp does, so a busy ring costs one shared-cache-line read per batch.
//
// A ring is used by one goroutine at a time (the transport's reader owns
// RX and fill, its writer TX and completion).
type ring[T any] struct {
	prod, cons *uint32
	flags      *uint32
	entries    []T
	mask, size uint32
	// For a producer ring: cached is the consumer index plus size (the
	// first index that is not free); local is the producer index up to
	// which entries are reserved, published by submit. For a consumer
	// ring: cached is the producer index, local the consumer index up to
	// which entries are taken, published by release.
	cached, local uint32
}

// newRing returns a ring over the given shared indexes and entries (a
// power-of-two count). For a producer ring the local index starts at the
// shared producer's, for a consumer ring at the consumer's.
func newRing[T any](prod, cons, flags *uint32, entries []T, producer bool) ring[T] {
	r := ring[T]{prod: prod, cons: cons, flags: flags, entries: entries,
		size: uint32(len(entries)), mask: uint32(len(entries) - 1)}
	if producer {
		r.local = atomic.LoadUint32(prod)
		r.cached = atomic.LoadUint32(cons) + r.size
	} else {
		r.local = atomic.LoadUint32(cons)
		r.cached = atomic.LoadUint32(prod)
	}
	return r
}

// free returns how many entries can be reserved now, at most want:
// refreshing the cached consumer index only when the cache shows fewer.
func (r *ring[T]) free(want uint32) uint32 {
	n := r.cached - r.local
	if n >= want {
		return want
	}
	r.cached = atomic.LoadUint32(r.cons) + r.size
	return min(r.cached-r.local, want)
}

// reserve takes up to want free entries and returns the index of the
// first and how many; fill them (at(idx+i)) and submit.
func (r *ring[T]) reserve(want uint32) (idx, n uint32) {
	n = r.free(want)
	idx = r.local
	r.local += n
	return idx, n
}

// submit publishes every reserved entry to the consumer.
func (r *ring[T]) submit() { atomic.StoreUint32(r.prod, r.local) }

// pending is how many submitted entries the consumer has not taken yet
// (producer side).
func (r *ring[T]) pending() uint32 { return r.local - atomic.LoadUint32(r.cons) }

// peek returns the index of the first entry ready to consume and how many
// are ready, at most want: refreshing the cached producer index only when
// the cache shows none.
func (r *ring[T]) peek(want uint32) (idx, n uint32) {
	n = r.cached - r.local
	if n == 0 {
		r.cached = atomic.LoadUint32(r.prod)
		n = r.cached - r.local
	}
	return r.local, min(n, want)
}

// release gives n consumed entries back to the producer.
func (r *ring[T]) release(n uint32) {
	r.local += n
	atomic.StoreUint32(r.cons, r.local)
}

// at returns the entry of index i.
func (r *ring[T]) at(i uint32) *T { return &r.entries[i&r.mask] }

// needWakeup reports the kernel's XDP_RING_NEED_WAKEUP flag: it waits
// for a system call before it looks at this ring again.
func (r *ring[T]) needWakeup() bool {
	return r.flags != nil && atomic.LoadUint32(r.flags)&ringNeedWakeup != 0
}

// ringNeedWakeup is XDP_RING_NEED_WAKEUP.
const ringNeedWakeup = 1
