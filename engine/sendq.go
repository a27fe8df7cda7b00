package engine

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/nakcast/nakcast/ring"
)

// A publication ring slot carries the message's payload itself: a slice of
// the send queue's arena slot for its seqno or, for a message larger than
// the inline size, of a pooled out-of-line buffer. The agent hands a run of
// polled slots to the protocol as they are, with no per-message gathering.
// An aborted claim carries aborted (tell it with isAborted).

// abortMark backs aborted: no payload shares its address.
var abortMark [1]byte

// aborted marks the slot of an aborted claim.
var aborted = abortMark[:0:1]

// isAborted reports whether a polled slot is an aborted claim's.
func isAborted(p []byte) bool {
	return cap(p) == 1 && unsafe.SliceData(p) == &abortMark[0]
}

// sendQueue is the hand-off from publishing goroutines to the agent: an MPSC
// ring.Publication of payload slices plus two byte arenas of 2*capacity
// fixed-size inline slots indexed by seqno: a small one (smallInline bytes a slot) for
// small payloads and one of InlineSize bytes a slot for the rest. Small
// messages so occupy a compact region: a stream of 64 B messages touches
// 2*capacity*smallInline bytes (1 MiB by default) instead of
// 2*capacity*InlineSize (8 MiB), so the agent's copy into the bundle reads
// from cache rather than from memory (measured: about 19 ns a message of
// cache misses with 1 KiB slots).
//
// Why 2*capacity: Publication.Poll frees slots as it returns them, but the
// agent still reads their arena bytes while it hands them to the protocol
// (possibly over several iterations, under protocol back-pressure). It does
// not poll again before it has consumed the whole batch, and a batch is at
// most capacity slots, so while it holds seqnos (h-k, h] (k <= capacity)
// producers can claim only (h, h+capacity]; two seqnos less than
// 2*capacity apart never share an arena slot. No copy is made per message
// beyond the producer's copy into the arena and the protocol's copy into the
// bundle, and nothing is allocated.
//
// Large messages take a buffer from per-size-class free lists (powers of
// two), returned by the agent once the protocol has copied them. Not
// sync.Pool: it empties at every GC, which would make a steady stream of
// large messages allocate again after each collection. A class keeps at
// most bigKeepBytes (and at least one buffer) idle.
type sendQueue struct {
	pub    *ring.Publication[[]byte]
	arena  []byte // payloads of ssz < n <= inline
	small  []byte // payloads of n <= ssz
	ssz    int    // min(inline, smallInline)
	inline int
	amask  uint64
	big    []bigClass // class c holds *[]byte of cap 1<<c
	// exclusive: one producer at a time (Config.Agent.ExclusiveSender), which
	// claims without an atomic read-modify-write.
	exclusive bool

	// bigOut counts the out-of-line buffers handed out and not yet
	// returned, aborts the aborted claims committed and not yet skipped by
	// the agent: each is raised before the slot's commit (so seen by the
	// agent once it polls that slot), and while one is 0 the agent skips
	// its per-message pass over a polled run (noteSent, drainSend).
	bigOut, aborts atomic.Int64

	// parked is set by the agent before it blocks in the kernel; a
	// producer that commits while it is set wakes the agent.
	parked atomic.Bool
	wake   func()
}

func newSendQueue(capacity, inline int, exclusive bool, wake func()) (*sendQueue, error) {
	pub, err := ring.NewPublication[[]byte](capacity)
	if err != nil {
		return nil, err
	}
	q := &sendQueue{
		pub:    pub,
		small:  make([]byte, 2*capacity*min(inline, smallInline)),
		ssz:    min(inline, smallInline),
		inline: inline,
		amask:  uint64(2*capacity - 1),
		big:    make([]bigClass, 33),
		wake:   wake,

		exclusive: exclusive,
	}
	if inline > smallInline {
		q.arena = make([]byte, 2*capacity*inline)
	}
	return q, nil
}

// smallInline is the slot size of the small-payload arena.
const smallInline = 128

// claim reserves one seqno and returns the writable payload area of n bytes
// for it. The caller must then commit(seq, buf) (or abort(seq, buf))
// exactly once.
func (q *sendQueue) claim(n int) (seq uint64, buf []byte, ok bool) {
	if q.exclusive {
		seq, ok = q.pub.TryClaimExclusive(1)
	} else {
		seq, ok = q.pub.TryClaim(1)
	}
	if !ok {
		return 0, nil, false
	}
	return seq, q.area(seq, n), true
}

// area returns the payload area of n bytes for the claimed seq: its slot in
// the small or the inline arena, or a pooled out-of-line buffer.
func (q *sendQueue) area(seq uint64, n int) []byte {
	if n <= q.ssz {
		off := int(seq&q.amask) * q.ssz
		return q.small[off : off+n : off+n]
	}
	if n <= q.inline {
		off := int(seq&q.amask) * q.inline
		return q.arena[off : off+n : off+n]
	}
	return q.getBig(n)
}

// commit publishes a claimed slot and wakes the agent if it is parked.
func (q *sendQueue) commit(seq uint64, buf []byte) {
	q.pub.Commit(seq, buf)
	if q.parked.Load() && q.parked.CompareAndSwap(true, false) {
		q.wake()
	}
}

// abort publishes a claimed slot as aborted, returning an out-of-line
// buffer.
func (q *sendQueue) abort(seq uint64, buf []byte) {
	q.release(buf)
	q.aborts.Add(1)
	q.commit(seq, aborted)
}

// put copies p into the ring: the whole TrySend path.
func (q *sendQueue) put(p []byte) bool {
	seq, buf, ok := q.claim(len(p))
	if !ok {
		return false
	}
	copy(buf, p)
	q.commit(seq, buf)
	return true
}

// putBatch copies the longest prefix of ps that fits into the ring and
// publishes it at once (one claim, one publication: Publication.PublishRun);
// it returns how many it took. The caller checked the sizes.
func (q *sendQueue) putBatch(ps [][]byte) int {
	var first uint64
	var k int
	var ok bool
	if q.exclusive {
		first, k, ok = q.pub.TryClaimUpToExclusive(len(ps))
	} else {
		first, k, ok = q.pub.TryClaimUpTo(len(ps))
	}
	if !ok {
		return 0
	}
	for i, p := range ps[:k] {
		seq := first + uint64(i)
		buf := q.area(seq, len(p))
		copy(buf, p)
		q.pub.Put(seq, buf)
	}
	q.pub.PublishRun(first, k)
	if q.parked.Load() && q.parked.CompareAndSwap(true, false) {
		q.wake()
	}
	return k
}

// isBig reports whether a polled payload is an out-of-line buffer.
func (q *sendQueue) isBig(p []byte) bool { return len(p) > q.inline }

// release returns an out-of-line buffer to its free list (agent side, or
// the producer of an aborted claim); inline and aborted slots are left.
func (q *sendQueue) release(p []byte) {
	if q.isBig(p) {
		q.bigOut.Add(-1)
		p = p[:cap(p)]
		q.big[bits.Len(uint(cap(p)))-1].put(p)
	}
}

func (q *sendQueue) getBig(n int) []byte {
	c := bits.Len(uint(n - 1)) // 1<<c >= n
	q.bigOut.Add(1)
	if b := q.big[c].get(); b != nil {
		return b[:n]
	}
	return make([]byte, n, 1<<c)
}

// bigKeepBytes bounds the idle bytes one size class keeps.
const bigKeepBytes = 32 << 20

// bigClass is a mutex-guarded free list of equal-size buffers. The lock is
// taken once per large message, whose copy costs far more.
type bigClass struct {
	mu   sync.Mutex
	free [][]byte
	_    [40]byte // keep classes' locks apart
}

func (c *bigClass) get() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.free); n > 0 {
		b := c.free[n-1]
		c.free[n-1] = nil
		c.free = c.free[:n-1]
		return b
	}
	return nil
}

func (c *bigClass) put(b []byte) {
	c.mu.Lock()
	if len(c.free) == 0 || (len(c.free)+1)*cap(b) <= bigKeepBytes {
		c.free = append(c.free, b)
	}
	c.mu.Unlock()
}
