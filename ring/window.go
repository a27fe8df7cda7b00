package ring

import (
	"fmt"
	"math/bits"
	"sync/atomic"
)

// Window is a receive window and retransmission store indexed by seqno.
//
// # Numbers
//
// A window keeps three seqnos, low <= delivered <= received, all equal to
// start when it is created; seqnos start above start.
//   - low (Low): the highest purged seqno. Nothing at or below it is held.
//   - delivered (Delivered, hd): the highest delivered seqno. Delivered
//     entries stay retained (Get, Has, Rewind) until Purge frees them.
//   - received (Received, hr): the highest seqno held, marked lost or
//     skipped to (Skip).
//
// Every held seqno lies in (low, low+Capacity()]: an Add beyond that reports
// Full instead of growing, and delivered never runs more than Capacity()
// ahead of low. Between delivered and received each seqno is held, lost
// (MarkLost: it will never come, delivery reports it with SkipLost) or
// missing (a gap: NextGap, AppendGaps).
//
// Every seqno has its own slot and its own bit in a presence bitmap, so a
// run (AddRun) is inserted in one call yet each seqno stays individually
// addressable: repairs overlapping held entries are trimmed, duplicates are
// dropped one by one, and delivery and purge may end inside a run. Gap and
// delivery scans work on whole 64-bit bitmap words.
//
// # Concurrency
//
// A window is not safe for arbitrary concurrent use. Exactly one producer
// goroutine and one consumer goroutine may use it at once, without locks:
//   - producer: Add, AddRun, MarkLost, Purge, Get, Has, NextGap, AppendGaps,
//     MissingCount, Received.
//   - consumer: Remove, RemoveBatch, Peek, Advance, Consume, SkipLost.
//   - either side, any goroutine: Capacity, Low, Delivered (atomic
//     snapshots; Delivered may be stale by the time the producer acts on it,
//     which is always safe because the consumer only advances over held or
//     lost seqnos).
//
// Purge and lookups (Get, Has) belong to the same goroutine, the producer:
// Purge zeroes slots, so a lookup must not run concurrently with it. Purge
// frees only seqnos at or below min(upto, Delivered()) read atomically, so
// it never frees what the consumer is reading. The consumer reads a slot only
// after observing its presence bit (acquire), and publishes delivered
// (release) after it has read the slots.
//
// Rewind and Skip move delivered (and Skip also low and received) under both
// sides: the caller quiesces the other side first, or one goroutine drives
// the whole window (as nakack and the simulator do).
type Window[T any] struct {
	capacity uint64
	mask     uint64
	slots    []T
	// present has one bit per slot: the slot holds an entry. Written by the
	// producer only (set by Add/AddRun, cleared by Purge/Skip), read by both.
	present []atomic.Uint64
	// lost has one bit per slot: the seqno was marked lost. Written by the
	// producer only, read by both. A seqno is never both present and lost.
	lost []atomic.Uint64
	// keepFreed: Purge and Skip without a release function leave freed
	// entries in their slots (KeepFreed).
	keepFreed bool

	_ [cacheLine]byte
	// received and floor are producer-owned (plain): the consumer bounds
	// its scans with low+capacity instead, see consumerLimit. Every seqno at
	// or below floor that is not held is settled (Skip discarded it), so Add
	// classifies a seqno that is neither held nor lost without loading
	// delivered, a cache line the consumer keeps writing.
	received uint64
	floor    uint64

	_ [cacheLine]byte
	// low is written by the producer (Purge, rarely) and read by both.
	low atomic.Uint64

	_ [cacheLine]byte
	// delivered is written by the consumer and read by the producer.
	delivered atomic.Uint64
	_         [cacheLine]byte
}

// bitmap selectors for scans.
const (
	selPresent = 1 << iota
	selLost
	selSettled = selPresent | selLost // held or lost: not a gap
)

// NewWindow returns an empty window for seqnos above start (low = delivered =
// received = start) holding at most capacity entries, a power of two.
// Seqnos must stay below 2^64-capacity.
func NewWindow[T any](capacity int, start uint64) (*Window[T], error) {
	if err := checkCapacity(capacity); err != nil {
		return nil, fmt.Errorf("new window: %w", err)
	}
	words := (capacity + 63) / 64
	w := &Window[T]{
		capacity: uint64(capacity),
		mask:     uint64(capacity) - 1,
		slots:    make([]T, capacity),
		present:  make([]atomic.Uint64, words),
		lost:     make([]atomic.Uint64, words),
		received: start,
		floor:    start,
	}
	w.low.Store(start)
	w.delivered.Store(start)
	return w, nil
}

// KeepFreed makes Purge and Skip, when they have no release function,
// leave the entries they free in their slots instead of zeroing them. A
// slot is read only while its presence bit is set and written whole
// before the bit is set again, so a stale entry is never seen; what it
// costs is that its pointers keep their targets reachable until the slot
// is reused. For entries whose pointers go to objects their owner pools
// anyway that costs nothing, and it saves a store pass over every freed
// slot: slots freed a stability round after they were written, no longer
// in any cache. Call it before the window is used.
func (w *Window[T]) KeepFreed() { w.keepFreed = true }

// Capacity returns the number of slots, fixed at creation.
func (w *Window[T]) Capacity() int { return int(w.capacity) }

// Low returns the highest purged seqno (atomic).
func (w *Window[T]) Low() uint64 { return w.low.Load() }

// Delivered returns the highest delivered seqno, hd (atomic).
func (w *Window[T]) Delivered() uint64 { return w.delivered.Load() }

// Received returns the highest seqno held, marked lost or skipped to, hr.
// Producer side (a plain field: reading it from the consumer is a race).
func (w *Window[T]) Received() uint64 { return w.received }

// span returns how many slots from idx on lie in idx's bitmap word and
// before the end of the ring, capped at max.
func (w *Window[T]) span(idx, max uint64) uint64 {
	s := 64 - idx&63
	if r := w.capacity - idx; r < s { // only when capacity < 64
		s = r
	}
	if max < s {
		s = max
	}
	return s
}

// word loads the selected bitmaps' word wi.
func (w *Window[T]) word(sel int, wi uint64) uint64 {
	var x uint64
	if sel&selPresent != 0 {
		x = w.present[wi].Load()
	}
	if sel&selLost != 0 {
		x |= w.lost[wi].Load()
	}
	return x
}

// runLen returns how many consecutive seqnos from a on (at most max) have
// their selected bit equal to set. max must not exceed the capacity.
func (w *Window[T]) runLen(a, max uint64, sel int, set bool) uint64 {
	var n uint64
	for n < max {
		idx := (a + n) & w.mask
		s := w.span(idx, max-n)
		x := w.word(sel, idx>>6) >> (idx & 63)
		if set {
			x = ^x
		}
		if k := uint64(bits.TrailingZeros64(x)); k < s {
			return n + k
		}
		n += s
	}
	return max
}

// Add inserts v at seq, in any order. Duplicate: seq is already held; Old:
// seq is at or below delivered or marked lost; Full: seq > Low()+Capacity().
// In those cases v is not stored. Producer side.
func (w *Window[T]) Add(seq uint64, v T) AddResult {
	low := w.low.Load()
	if seq <= low {
		return Old
	}
	if seq-low > w.capacity {
		return Full
	}
	idx := seq & w.mask
	wi, b := idx>>6, uint64(1)<<(idx&63)
	if w.present[wi].Load()&b != 0 {
		if seq <= w.delivered.Load() {
			return Old
		}
		return Duplicate
	}
	// Neither held nor lost and above low: at or below delivered only if a
	// Skip discarded it (floor), since the consumer passes settled seqnos only.
	if w.lost[wi].Load()&b != 0 || seq <= w.floor {
		return Old
	}
	w.slots[idx] = v
	w.present[wi].Or(b) // release: the consumer reads the slot after this bit
	if seq > w.received {
		w.received = seq
	}
	return Added
}

// bulkSpan is the shortest fresh span AddRun stores with one copy: below
// it, the copy's call costs more than the assignments (a lone message of
// a ping-pong).
const bulkSpan = 8

// AddRun inserts vals[i] at first+i for every seqno of the run that is
// neither held, lost, nor at or below delivered, in one step: the run is
// trimmed against what is held (a repair overlapping a held run stores only
// what is new) and duplicates are dropped one by one. Seqnos beyond
// Low()+Capacity() are not stored and set Full; the prefix that fits is
// inserted, and Processed() tells where the caller resumes after a purge.
// Producer side.
func (w *Window[T]) AddRun(first uint64, vals []T) RunResult {
	var r RunResult
	n := uint64(len(vals))
	if n == 0 {
		return r
	}
	var i uint64
	if d := w.delivered.Load(); first <= d {
		i = min(d-first+1, n)
		r.Old = int(i)
	}
	// fit: how many leading vals lie at or below low+capacity. Old ones
	// always do (delivered <= low+capacity).
	fit := n
	if limit := w.low.Load() + w.capacity; first > limit {
		fit = i
	} else if limit-first+1 < n {
		fit = limit - first + 1
	}
	r.Full = fit < n
	var hi uint64
	for i < fit {
		seq := first + i
		idx := seq & w.mask
		bit := idx & 63
		s := w.span(idx, fit-i)
		wi := idx >> 6
		m := wordMask(bit, s)
		pres := w.present[wi].Load() & m
		lost := w.lost[wi].Load() & m
		fresh := m &^ (pres | lost)
		r.Duplicate += popcount(pres)
		r.Old += popcount(lost)
		if fresh != 0 {
			base := wi << 6
			if fresh == m && s >= bulkSpan {
				// The common case, a run in order: one copy of the span
				// (one write-barrier check, not one a message).
				copy(w.slots[idx:idx+s], vals[i:i+s])
			} else {
				for x := fresh; x != 0; x &= x - 1 {
					b := uint64(bits.TrailingZeros64(x))
					w.slots[base+b] = vals[i+b-bit]
				}
			}
			w.present[wi].Or(fresh) // release, as in Add
			r.Added += popcount(fresh)
			hi = seq + uint64(63-bits.LeadingZeros64(fresh)) - bit
		}
		i += s
	}
	if hi > w.received {
		w.received = hi
	}
	return r
}

// Reserve returns the slots of seqnos first..first+n-1 for the producer
// to fill in place, when the whole run is fresh (above delivered and
// floor, neither held nor lost), fits (at or below Low()+Capacity()) and
// does not wrap past the end of the slots; nil otherwise (n of 0 too),
// for AddRun. It stores nothing: Commit(first, n) makes the filled slots
// held, in one step like AddRun's. A caller that does not commit must
// zero the slots it wrote (slots not held stay zero), unless the window
// keeps freed entries (KeepFreed). Filling the returned slots instead of
// a buffer that AddRun copies saves a copy of every entry of a run
// received in order. Producer side; between Reserve and Commit the
// producer may add entries at other seqnos (Add, AddRun) but must not
// purge, skip or rewind.
func (w *Window[T]) Reserve(first uint64, n int) []T {
	if n <= 0 || first <= max(w.floor, w.delivered.Load()) {
		return nil
	}
	last := first + uint64(n) - 1
	if last < first || last > w.low.Load()+w.capacity {
		return nil
	}
	idx := first & w.mask
	if idx+uint64(n) > w.capacity {
		return nil
	}
	if w.runLen(first, uint64(n), selSettled, false) < uint64(n) {
		return nil // held or lost seqnos in the run
	}
	return w.slots[idx : idx+uint64(n) : idx+uint64(n)]
}

// Commit makes held the run of n seqnos from first that Reserve returned
// and the caller filled: their presence bits are set (release: the
// consumer reads a slot after its bit) and Received raised. Producer side.
func (w *Window[T]) Commit(first uint64, n int) {
	idx := first & w.mask
	for k := uint64(0); k < uint64(n); {
		i := idx + k
		s := w.span(i, uint64(n)-k)
		w.present[i>>6].Or(wordMask(i&63, s))
		k += s
	}
	if last := first + uint64(n) - 1; last > w.received {
		w.received = last
	}
}

// Get returns the entry retained at seq: held (delivered or not), above low
// and not lost. Producer side (the same goroutine as Purge).
func (w *Window[T]) Get(seq uint64) (T, bool) {
	if !w.Has(seq) {
		var zero T
		return zero, false
	}
	return w.slots[seq&w.mask], true
}

// Has reports whether an entry is retained at seq (see Get). Producer side.
func (w *Window[T]) Has(seq uint64) bool {
	if seq <= w.low.Load() || seq > w.received {
		return false
	}
	idx := seq & w.mask
	return w.present[idx>>6].Load()&(uint64(1)<<(idx&63)) != 0
}

// NextGap returns the first missing range (seqnos neither held nor lost)
// between delivered and received whose From is above after; a gap that
// straddles after is returned from after+1. Producer side.
func (w *Window[T]) NextGap(after uint64) (Range, bool) {
	start := max(after, w.delivered.Load()) + 1
	if start > w.received {
		return Range{}, false
	}
	from := start + w.runLen(start, w.received-start+1, selSettled, true)
	if from > w.received {
		return Range{}, false
	}
	k := w.runLen(from, w.received-from+1, selSettled, false)
	return Range{From: from, To: from + k - 1}, true
}

// AppendGaps appends to dst the missing ranges in (delivered, received], in
// order, at most max of them (max <= 0: all), and returns the extended
// slice. It allocates only if dst lacks capacity. Producer side.
func (w *Window[T]) AppendGaps(dst []Range, max int) []Range {
	after := w.delivered.Load()
	for n := 0; max <= 0 || n < max; n++ {
		g, ok := w.NextGap(after)
		if !ok {
			break
		}
		dst = append(dst, g)
		after = g.To
	}
	return dst
}

// FirstHeld returns the first seqno in [from, to] that is held, if any.
// The range must lie in (Low(), Low()+Capacity()]. Producer side.
func (w *Window[T]) FirstHeld(from, to uint64) (uint64, bool) {
	if from > to {
		return 0, false
	}
	n := to - from + 1
	if k := w.runLen(from, n, selPresent, false); k < n {
		return from + k, true
	}
	return 0, false
}

// LostRun returns the run of seqnos marked lost (MarkLost) from q on, if
// q is one: q above Delivered(), the run ending before the first seqno
// that is held or missing. Producer side.
func (w *Window[T]) LostRun(q uint64) (Range, bool) {
	if q <= w.delivered.Load() || q > w.received {
		return Range{}, false
	}
	k := w.runLen(q, w.received-q+1, selLost, true)
	if k == 0 {
		return Range{}, false
	}
	return Range{From: q, To: q + k - 1}, true
}

// AppendUnheld appends to dst the ranges of seqnos in (low, delivered]
// that are not held: delivered as lost (SkipLost) rather than as entries.
// Nothing else leaves a hole there, since delivered entries stay until a
// purge raises low. Producer side; allocates only if dst lacks capacity.
func (w *Window[T]) AppendUnheld(dst []Range) []Range {
	d := w.delivered.Load()
	a := w.low.Load() + 1
	for a <= d {
		a += w.runLen(a, d-a+1, selPresent, true)
		if a > d {
			break
		}
		k := w.runLen(a, d-a+1, selPresent, false)
		dst = append(dst, Range{From: a, To: a + k - 1})
		a += k
	}
	return dst
}

// MissingCount returns how many seqnos in (delivered, received] are missing
// (neither held nor lost). Producer side.
func (w *Window[T]) MissingCount() int {
	d := w.delivered.Load()
	if d >= w.received {
		return 0
	}
	total := w.received - d
	missing := total
	for n := uint64(0); n < total; {
		idx := (d + 1 + n) & w.mask
		s := w.span(idx, total-n)
		missing -= uint64(popcount(w.word(selSettled, idx>>6) & wordMask(idx&63, s)))
		n += s
	}
	return int(missing)
}

// MarkLost marks every seqno in [from, to] that is neither held, lost nor
// at or below delivered as lost: it will never come. Held entries inside the
// range stay and are delivered; delivery reports each contiguous lost run
// once through SkipLost. Received rises to to if below. The range is
// clipped at Low()+Capacity(): if Received() < to afterwards, mark the rest
// once delivery and a purge have made room. Returns how many seqnos were
// newly marked. Producer side.
func (w *Window[T]) MarkLost(from, to uint64) int {
	if d := w.delivered.Load(); from <= d {
		from = d + 1
	}
	if limit := w.low.Load() + w.capacity; to > limit {
		to = limit
	}
	if from > to {
		return 0
	}
	marked := 0
	w.eachWord(from, to, func(wi, m uint64) {
		if fresh := m &^ w.word(selSettled, wi); fresh != 0 {
			w.lost[wi].Or(fresh) // release: SkipLost reads it
			marked += popcount(fresh)
		}
	})
	if to > w.received {
		w.received = to
	}
	return marked
}

// UnmarkLost clears the lost marks of the seqnos in [from, to] above
// delivered (and at most Low()+Capacity()): they are missing again, gaps to
// be filled (a loss declared for a reason that no longer holds). Returns
// how many marks it cleared. Both sides quiesced (or one owner): the
// consumer must not be skipping them meanwhile.
func (w *Window[T]) UnmarkLost(from, to uint64) int {
	from = max(from, w.delivered.Load()+1)
	to = min(to, w.low.Load()+w.capacity)
	if from > to {
		return 0
	}
	cleared := 0
	w.eachWord(from, to, func(wi, m uint64) {
		if m &= w.lost[wi].Load(); m != 0 {
			w.lost[wi].And(^m)
			cleared += popcount(m)
		}
	})
	return cleared
}

// eachWord calls fn for every bitmap word the seqnos from..to (at most
// the capacity apart) fall in, with the word's index and the mask of
// their bits in it.
func (w *Window[T]) eachWord(from, to uint64, fn func(wi, mask uint64)) {
	total := to - from + 1
	for n := uint64(0); n < total; {
		idx := (from + n) & w.mask
		s := w.span(idx, total-n)
		fn(idx>>6, wordMask(idx&63, s))
		n += s
	}
}

// consumerLimit returns how many seqnos after d the consumer may inspect:
// those at or below low+capacity. Loading low (acquire) makes the purge of
// each slot's previous occupant visible, so a presence or lost bit seen for
// d+1.. belongs to that seqno and not to one a lap earlier.
func (w *Window[T]) consumerLimit(d uint64) uint64 {
	return w.low.Load() + w.capacity - d
}

// Remove delivers the next entry (seqno Delivered()+1) if it is held, and
// advances delivered; the entry stays retained until Purge. ok is false at a
// gap or at a lost seqno (see SkipLost). Consumer side.
func (w *Window[T]) Remove() (seq uint64, v T, ok bool) {
	d := w.delivered.Load()
	if w.consumerLimit(d) == 0 {
		return 0, v, false
	}
	next := d + 1
	idx := next & w.mask
	if w.present[idx>>6].Load()&(uint64(1)<<(idx&63)) == 0 {
		return 0, v, false
	}
	v = w.slots[idx]
	w.delivered.Store(next) // release: Purge may free the slot after this
	return next, v, true
}

// Consume advances delivered over up to max consecutive held entries from
// Delivered()+1 on, stopping before a gap or a lost seqno, as RemoveBatch
// does but without copying them: for a consumer that has nothing to do with
// the values (they stay retained until Purge). It returns the first seqno
// and how many it consumed. Consumer side.
func (w *Window[T]) Consume(max int) (first uint64, n int) {
	d := w.delivered.Load()
	first = d + 1
	if max <= 0 {
		return first, 0
	}
	k := w.runLen(first, min(uint64(max), w.consumerLimit(d)), selPresent, true)
	if k > 0 {
		w.delivered.Store(d + k) // release, as in RemoveBatch
	}
	return first, int(k)
}

// Peek returns the consecutive held entries from Delivered()+1 on, up to
// max of them, that lie in one stretch of the slots (a run that wraps past
// the end of the slots comes back in two calls), stopping before a gap or
// a lost seqno, without copying them and without advancing delivered: the
// consumer reads them in place, then calls Advance. They stay as they are
// until then, since Purge and Skip free only seqnos at or below delivered.
// It returns the first seqno (Delivered()+1) and the entries, which the
// caller must not write. Consumer side.
func (w *Window[T]) Peek(max int) (first uint64, run []T) {
	d := w.delivered.Load()
	first = d + 1
	idx0 := first & w.mask
	var k uint64
	if max > 0 {
		k = w.runLen(first, min(uint64(max), w.consumerLimit(d), w.capacity-idx0), selPresent, true)
	}
	return first, w.slots[idx0 : idx0+k : idx0+k]
}

// Advance moves delivered over the first n entries the last Peek
// returned, once the consumer has read them (release: the producer may
// free their slots after it). Consumer side.
func (w *Window[T]) Advance(n int) {
	if n > 0 {
		w.delivered.Store(w.delivered.Load() + uint64(n))
	}
}

// RemoveBatch delivers up to len(dst) consecutive held entries from
// Delivered()+1 on into dst, stopping before a gap or a lost seqno, and
// advances delivered once. It returns the first seqno (Delivered()+1 before
// the call, also when n is 0) and how many entries it copied. Consumer side.
func (w *Window[T]) RemoveBatch(dst []T) (first uint64, n int) {
	d := w.delivered.Load()
	first = d + 1
	limit := min(uint64(len(dst)), w.consumerLimit(d))
	var k uint64
	for k < limit {
		idx := (first + k) & w.mask
		s := w.span(idx, limit-k)
		x := w.present[idx>>6].Load() >> (idx & 63)
		run := min(uint64(bits.TrailingZeros64(^x)), s)
		copy(dst[k:k+run], w.slots[idx:idx+run])
		k += run
		if run < s {
			break
		}
	}
	if k > 0 {
		w.delivered.Store(d + k)
	}
	return first, int(k)
}

// PeekLost returns the contiguous run of lost seqnos starting at
// Delivered()+1, if there is one, without consuming it (SkipLost does).
// Consumer side.
func (w *Window[T]) PeekLost() (Range, bool) {
	d := w.delivered.Load()
	k := w.runLen(d+1, w.consumerLimit(d), selLost, true)
	if k == 0 {
		return Range{}, false
	}
	return Range{From: d + 1, To: d + k}, true
}

// SkipLost consumes the contiguous run of lost seqnos starting at
// Delivered()+1, if there is one, advancing delivered over it, and returns
// it as one range. ok is false if the next seqno is held or missing.
// Consumer side.
func (w *Window[T]) SkipLost() (Range, bool) {
	d := w.delivered.Load()
	k := w.runLen(d+1, w.consumerLimit(d), selLost, true)
	if k == 0 {
		return Range{}, false
	}
	w.delivered.Store(d + k)
	return Range{From: d + 1, To: d + k}, true
}

// Purge frees the entries at or below min(upto, Delivered()): calls
// release(v) for each held one (release may be nil), zeroes its slot (see
// KeepFreed), clears lost marks, and advances low. Returns how many
// entries it released. Producer side; never concurrent with Get or Has.
func (w *Window[T]) Purge(upto uint64, release func(T)) int {
	limit := min(upto, w.delivered.Load()) // acquire: the consumer is done with these slots
	low := w.low.Load()
	if limit <= low {
		return 0
	}
	n := w.free(low+1, limit, release)
	w.low.Store(limit) // release: the consumer sees the cleared bits
	return n
}

// free empties the slots of [a, b] (b-a < capacity): releases and zeroes
// held entries (without a release function, zeroes them unless
// KeepFreed) and clears their presence and lost bits.
func (w *Window[T]) free(a, b uint64, release func(T)) int {
	var zero T
	n := 0
	total := b - a + 1
	for k := uint64(0); k < total; {
		idx := (a + k) & w.mask
		s := w.span(idx, total-k)
		wi := idx >> 6
		m := wordMask(idx&63, s)
		if p := w.present[wi].Load() & m; p != 0 {
			if release != nil {
				base := wi << 6
				for x := p; x != 0; x &= x - 1 {
					j := base + uint64(bits.TrailingZeros64(x))
					release(w.slots[j])
					w.slots[j] = zero
				}
			} else if !w.keepFreed {
				// The whole span at once (a slot not present is
				// already zero): a memclr instead of a store a slot.
				clear(w.slots[idx : idx+s])
			}
			w.present[wi].And(^p)
			n += popcount(p)
		}
		if w.lost[wi].Load()&m != 0 {
			w.lost[wi].And(^m)
		}
		k += s
	}
	return n
}

// Rewind moves delivered back to to, so the retained entries (and lost
// marks) in (to, Delivered()] are delivered again: re-delivery after a
// digest overwrite. to must be at or above Low() (ErrNotRetained otherwise)
// and at or below Delivered() (ErrRange), and every seqno in between must
// still be held or lost (ErrNotRetained: for instance a Skip discarded it).
// Nothing changes on error. Both sides quiesced (or one owner).
func (w *Window[T]) Rewind(to uint64) error {
	d, low := w.delivered.Load(), w.low.Load()
	switch {
	case to > d:
		return fmt.Errorf("rewind to %d: %w: above delivered %d", to, ErrRange, d)
	case to < low:
		return fmt.Errorf("rewind to %d: %w: purged up to %d", to, ErrNotRetained, low)
	}
	if k := w.runLen(to+1, d-to, selSettled, true); k != d-to {
		return fmt.Errorf("rewind to %d: %w: %d not held", to, ErrNotRetained, to+1+k)
	}
	w.delivered.Store(to)
	return nil
}

// Skip moves delivered forward to to, discarding every entry and lost mark
// in (Delivered(), to] (release is called for each held entry, and may be
// nil): for a digest overwrite or set where this member is behind, those
// messages being part of the installed state. Received rises to to if
// below. If to lies beyond Low()+Capacity(), low moves to to-Capacity()
// and the retained entries at or below it are released as by Purge.
// Entries retained at or below the old delivered otherwise stay. Returns
// how many entries were released; 0 if to <= Delivered(). Both sides
// quiesced (or one owner).
func (w *Window[T]) Skip(to uint64, release func(T)) int {
	d, low := w.delivered.Load(), w.low.Load()
	if to <= d {
		return 0
	}
	n := 0
	if hi := min(to, low+w.capacity); hi > d {
		n += w.free(d+1, hi, release)
	}
	if to-low > w.capacity {
		newLow := to - w.capacity
		if top := min(newLow, d); top > low {
			n += w.free(low+1, top, release)
		}
		w.low.Store(newLow)
	}
	w.delivered.Store(to)
	w.floor = to
	if to > w.received {
		w.received = to
	}
	return n
}
