package engine

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/nakcast/nakcast/ring"
)

// pubSlot is what a publication ring slot carries: the payload length and,
// for a message larger than the inline size, a pooled out-of-line buffer.
// Small payloads live in the send queue's arena, at an offset fixed by the
// seqno, so the slot itself stays 16 bytes: ring.Publication copies slot
// values on Commit and Poll, and an inline array in the slot would be
// copied twice more per message.
type pubSlot struct {
	n   int32 // payload length; -1 for an aborted claim
	big *[]byte
}

// sendQueue is the hand-off from publishing goroutines to the agent: an MPSC
// ring.Publication of pubSlots plus two byte arenas of 2*capacity fixed-size
// inline slots indexed by seqno: a small one (smallInline bytes a slot) for
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
	pub    *ring.Publication[pubSlot]
	arena  []byte // payloads of ssz < n <= inline
	small  []byte // payloads of n <= ssz
	ssz    int    // min(inline, smallInline)
	inline int
	amask  uint64
	big    []bigClass // class c holds *[]byte of cap 1<<c

	// parked is set by the agent before it blocks in the kernel; a
	// producer that commits while it is set wakes the agent.
	parked atomic.Bool
	wake   func()
}

func newSendQueue(capacity, inline int, wake func()) (*sendQueue, error) {
	pub, err := ring.NewPublication[pubSlot](capacity)
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
	}
	if inline > smallInline {
		q.arena = make([]byte, 2*capacity*inline)
	}
	return q, nil
}

// smallInline is the slot size of the small-payload arena.
const smallInline = 128

// claim reserves one seqno and returns the writable payload area of n bytes
// for it. The caller must then commit(seq, slot) exactly once.
func (q *sendQueue) claim(n int) (seq uint64, buf []byte, s pubSlot, ok bool) {
	seq, ok = q.pub.TryClaim(1)
	if !ok {
		return 0, nil, pubSlot{}, false
	}
	s.n = int32(n)
	if n <= q.ssz {
		off := int(seq&q.amask) * q.ssz
		return seq, q.small[off : off+n : off+n], s, true
	}
	if n <= q.inline {
		off := int(seq&q.amask) * q.inline
		return seq, q.arena[off : off+n : off+n], s, true
	}
	s.big = q.getBig(n)
	return seq, (*s.big)[:n], s, true
}

// commit publishes a claimed slot and wakes the agent if it is parked.
func (q *sendQueue) commit(seq uint64, s pubSlot) {
	q.pub.Commit(seq, s)
	if q.parked.Load() && q.parked.CompareAndSwap(true, false) {
		q.wake()
	}
}

// put copies p into the ring: the whole TrySend path.
func (q *sendQueue) put(p []byte) bool {
	seq, buf, s, ok := q.claim(len(p))
	if !ok {
		return false
	}
	copy(buf, p)
	q.commit(seq, s)
	return true
}

// payload returns the bytes of a polled slot (agent side). Valid until the
// agent polls again (inline) or releases the slot (out of line).
func (q *sendQueue) payload(seq uint64, s pubSlot) []byte {
	if s.big != nil {
		return (*s.big)[:s.n]
	}
	if int(s.n) <= q.ssz {
		off := int(seq&q.amask) * q.ssz
		return q.small[off : off+int(s.n)]
	}
	off := int(seq&q.amask) * q.inline
	return q.arena[off : off+int(s.n)]
}

// release returns an out-of-line buffer to its free list (agent side).
func (q *sendQueue) release(s pubSlot) {
	if s.big != nil {
		q.big[bits.Len(uint(cap(*s.big)))-1].put(s.big)
	}
}

func (q *sendQueue) getBig(n int) *[]byte {
	c := bits.Len(uint(n - 1)) // 1<<c >= n
	if b := q.big[c].get(); b != nil {
		return b
	}
	b := make([]byte, 1<<c)
	return &b
}

// bigKeepBytes bounds the idle bytes one size class keeps.
const bigKeepBytes = 32 << 20

// bigClass is a mutex-guarded free list of equal-size buffers. The lock is
// taken once per large message, whose copy costs far more.
type bigClass struct {
	mu   sync.Mutex
	free []*[]byte
	_    [40]byte // keep classes' locks apart
}

func (c *bigClass) get() *[]byte {
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

func (c *bigClass) put(b *[]byte) {
	c.mu.Lock()
	if len(c.free) == 0 || (len(c.free)+1)*cap(*b) <= bigKeepBytes {
		c.free = append(c.free, b)
	}
	c.mu.Unlock()
}
