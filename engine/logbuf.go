package engine

import (
	"encoding/binary"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/nakcast/nakcast/ring"
	"github.com/nakcast/nakcast/wire"
)

// logBuffer is the publication: the hand-off from publishing goroutines
// to the agent, Aeron's log buffer kept in datagrams. It is a ring of
// terms, each one datagram's buffer (a wire.Buffer of Tuning.MaxDatagram)
// into which producers write their messages directly in the wire's
// per-message layout (a little-endian uint16 length, then the payload)
// after the DATA header's room, where nakack SendDatagram expects them.
//
// A producer claims space in the open term with one compare-and-swap on
// the term's packed state word (offset, message count, sealed, term id;
// a load and a plain release store with ExclusiveSender), writes its
// message in place and commits it with a release store (a plain MOV on
// amd64) of its flag in the term's done array; with ExclusiveSender, a
// release store of the term's committed byte count. Aeron's producers
// commit the same way, by the frame length they write last: a locked add
// to a shared counter would be a second locked instruction a message,
// after the claim's compare-and-swap. A message
// that does not fit (bytes, or the term's message limit) seals the term
// and moves the producer to the next one: the open term's number advances
// while fewer than len(terms) terms are in flight; beyond, the claim fails
// (back-pressure).
//
// The agent takes the oldest term once it is sealed and every claim in it
// committed: each message's done flag set (doneIdx is how far it has
// checked; recycle clears the flags), with ExclusiveSender committed
// equal to the sealed offset. When it has caught up
// (the oldest term is the open one) it seals the open term itself, so a
// lone message goes out at its next iteration. With ExclusiveSender it
// does not seal (the producer's plain store would race with it): it takes
// the committed prefix of the open term, by copy, when the producer has
// paused, and the rest once the producer seals the term.
//
// A term that is at least a quarter full, with no out-of-line or aborted
// message and taken whole, goes to nakack SendDatagram as it is: the
// protocol adopts the buffer (it is the datagram and, until stable, the
// retention of its messages) and the term gets a new one from the pool,
// which the agent clears first so that producers write into cached lines
// (agent.sendTerm says why).
// Any other term goes through SendBatch (one copy into the bundle), which
// also handles fragments, flow control's partial takes and the rate limit.
//
// Payloads above inline (Tuning.InlineSize, at most what a datagram
// carries) go out of line: the term holds a zero-length entry, the
// message's kind says out-of-line and the payload is a buffer from
// per-size-class free lists (powers of two), returned by the agent once
// the protocol has copied it. Not sync.Pool: it empties at every GC, which
// would make a steady stream of large messages allocate again after each
// collection. A class keeps at most bigKeepBytes (and at least one buffer)
// idle.
type logBuffer struct {
	terms     []logTerm
	tmask     uint64
	nterms    uint64
	termBytes int // message bytes a term holds (the datagram less the DATA header)
	perTerm   int // messages a term holds at most
	inline    int // the largest payload written in place
	exclusive bool
	pool      *wire.Pool
	bufSize   int

	_ [64]byte
	// open is the open term's number (terms are numbered from 0; term n
	// is terms[n&tmask]).
	open atomic.Uint64
	_    [56]byte
	// head is the oldest term the agent has not finished with (written
	// by the agent). Producers open a term n only while n-head <
	// len(terms).
	head atomic.Uint64
	_    [56]byte

	// Agent side: the head term's cursor (bytes and messages taken).
	curOff, curIdx int
	// doneIdx is how many of the head term's messages the agent found
	// committed (their done flags set; shared mode).
	doneIdx int
	// lastEnd is the open term's end at the agent's last look
	// (headTerm: while producers stream, it waits until the term stops
	// growing or fills).
	lastEnd int
	// sealedSelf says the agent sealed the head term; filled that the
	// last term it finished was sealed by a producer (full): producers
	// are streaming.
	sealedSelf, filled bool

	big []bigClass // class c holds *[]byte of cap 1<<c

	// bigOut counts the out-of-line buffers handed out and not yet
	// returned, aborts the aborted claims committed and not yet skipped by
	// the agent.
	bigOut, aborts atomic.Int64

	// parked is set by the agent before it blocks in the kernel; a
	// producer that commits while it is set wakes the agent.
	parked atomic.Bool
	wake   func()
}

// logTerm is one term: one datagram's buffer and its claim state.
type logTerm struct {
	// state packs the claimed offset, the message count, the sealed bit
	// and the term's number (its low bits): a producer that read an old
	// open term number finds another id and looks again.
	state atomic.Uint64
	// committed is the bytes of committed claims (ExclusiveSender).
	committed atomic.Uint64
	// done has a flag a message index, set (1) by the release store that
	// commits the message (shared mode) and cleared by recycle before the
	// term is claimable again.
	done []atomic.Uint64
	// special is set when the term holds an out-of-line or an aborted
	// message (kinds then says which): it goes through SendBatch.
	special atomic.Bool
	// buf is the term's buffer: written by the agent while no producer
	// can claim in the term (before its state is reset).
	buf   *wire.Buffer
	kinds []uint8                  // per message index: kindInline, kindBig, kindAborted
	bigs  atomic.Pointer[[][]byte] // out-of-line payloads by message index (made at first use)
	_     [64]byte
}

const (
	kindInline uint8 = iota
	kindBig
	kindAborted
)

// The packed state word of a term.
const (
	offBits   = 24
	cntBits   = 17
	cntShift  = offBits
	sealShift = offBits + cntBits
	idShift   = sealShift + 1
	offMask   = 1<<offBits - 1
	cntMask   = 1<<cntBits - 1
	sealedBit = uint64(1) << sealShift
	idMask    = uint64(1)<<(64-idShift) - 1
)

func termState(id uint64) uint64 { return (id & idMask) << idShift }
func stateOff(s uint64) int      { return int(s & offMask) }
func stateCount(s uint64) int    { return int(s >> cntShift & cntMask) }
func stateSealed(s uint64) bool  { return s&sealedBit != 0 }
func stateID(s uint64) uint64    { return s >> idShift }

// termSmallMsg is the message size RingCapacity counts in: the log buffer
// holds at least RingCapacity messages of up to this many bytes.
const termSmallMsg = 64

// newLogBuffer sizes the log buffer for capacity messages of up to
// termSmallMsg bytes (more of smaller ones when the message limit does not
// bind first, fewer of larger): terms of datagram bytes (the protocol's
// datagram: DATA header and messages), each holding at most
// min(maxBundle, capacity/2) messages, a power of two of them, at least 2.
// inline is the largest payload written in place.
func newLogBuffer(capacity, inline, datagram, maxBundle int, exclusive bool, pool *wire.Pool, bufSize int, wake func()) *logBuffer {
	termBytes := datagram - wire.DataOverhead
	perTerm := max(1, min(maxBundle, capacity/2))
	eff := max(1, min(perTerm, termBytes/(wire.MsgOverhead+termSmallMsg)))
	n := max(2, 1<<bits.Len(uint((capacity+eff-1)/eff-1)))
	q := &logBuffer{
		terms:     make([]logTerm, n),
		tmask:     uint64(n - 1),
		nterms:    uint64(n),
		termBytes: termBytes,
		perTerm:   perTerm,
		inline:    min(inline, termBytes-wire.MsgOverhead),
		exclusive: exclusive,
		pool:      pool,
		bufSize:   bufSize,
		big:       make([]bigClass, 33),
		wake:      wake,
	}
	for i := range q.terms {
		t := &q.terms[i]
		t.buf = q.newTermBuf()
		t.kinds = make([]uint8, perTerm)
		if !exclusive {
			t.done = make([]atomic.Uint64, perTerm)
		}
		t.state.Store(termState(uint64(i)))
	}
	return q
}

// newTermBuf returns a buffer for a term: from the pool, or (over its
// budget, at Open) one of its own.
func (q *logBuffer) newTermBuf() *wire.Buffer {
	if b := q.pool.Get(q.bufSize); b != nil {
		return b
	}
	return wire.NewBuffer(make([]byte, q.bufSize))
}

// entrySize is the term bytes a payload of n bytes takes: its length and
// the payload, or only the length for an out-of-line one.
func (q *logBuffer) entrySize(n int) int {
	if n <= q.inline {
		return wire.MsgOverhead + n
	}
	return wire.MsgOverhead
}

// claim reserves need bytes for msgs messages in the open term and
// returns the term, the offset and the first message's index in it; ok is
// false when the message does not fit and every term is in flight. The
// caller writes the entries (place) and then commits exactly need bytes.
func (q *logBuffer) claim(need, msgs int) (t *logTerm, off, idx int, ok bool) {
	for {
		n := q.open.Load()
		t = &q.terms[n&q.tmask]
		s := t.state.Load()
		if stateID(s) != n&idMask {
			continue // the open term moved on since we read it
		}
		if !stateSealed(s) {
			off, cnt := stateOff(s), stateCount(s)
			if off+need <= q.termBytes && cnt+msgs <= q.perTerm {
				if q.setState(t, s, s+uint64(need)+uint64(msgs)<<cntShift) {
					return t, off, cnt, true
				}
				continue
			}
			if !q.setState(t, s, s|sealedBit) {
				continue
			}
		}
		if !q.advance(n) {
			return nil, 0, 0, false
		}
	}
}

// setState moves t's state word from s to next for a producer: a
// compare-and-swap (false: another producer or the agent changed it
// first), or with ExclusiveSender a release store, no locked instruction:
// the one producer is alone in writing the open term's state (the agent
// does not seal in this mode).
func (q *logBuffer) setState(t *logTerm, s, next uint64) bool {
	if q.exclusive {
		ring.StoreRelease(&t.state, next)
		return true
	}
	return t.state.CompareAndSwap(s, next)
}

// advance opens term n+1 after the sealed term n, unless every term is in
// flight (false). Another producer may have opened it already; with
// ExclusiveSender a release store does (the agent moves open only when the
// open term is sealed and taken, recycle, to the value written here).
func (q *logBuffer) advance(n uint64) bool {
	if int64(n+1-q.head.Load()) >= int64(q.nterms) {
		return false
	}
	if q.exclusive {
		ring.StoreRelease(&q.open, n+1)
	} else {
		q.open.CompareAndSwap(n, n+1)
	}
	return true
}

// claimRun claims the longest prefix of ps that fits in the open term (at
// least one message, moving to the next term when none fits): the term,
// offset, first index, how many and their bytes; ok false when none fits
// and every term is in flight.
func (q *logBuffer) claimRun(ps [][]byte) (t *logTerm, off, idx, k, need int, ok bool) {
	for {
		n := q.open.Load()
		t = &q.terms[n&q.tmask]
		s := t.state.Load()
		if stateID(s) != n&idMask {
			continue
		}
		if !stateSealed(s) {
			off, cnt := stateOff(s), stateCount(s)
			k, need = 0, 0
			for k < len(ps) && cnt+k < q.perTerm {
				sz := q.entrySize(len(ps[k]))
				if off+need+sz > q.termBytes {
					break
				}
				need += sz
				k++
			}
			next := s | sealedBit
			if k > 0 {
				next = s + uint64(need) + uint64(k)<<cntShift
			}
			if !q.setState(t, s, next) {
				continue
			}
			if k > 0 {
				return t, off, cnt, k, need, true
			}
		}
		if !q.advance(n) {
			return nil, 0, 0, 0, 0, false
		}
	}
}

// place writes the entry of a payload of n bytes at off (message idx) of
// claimed term t and returns where the payload goes: in place, or an
// out-of-line buffer.
func (q *logBuffer) place(t *logTerm, off, idx, n int) []byte {
	b := t.buf.B[wire.DataOverhead+off:]
	if n <= q.inline {
		binary.LittleEndian.PutUint16(b, uint16(n))
		return b[wire.MsgOverhead : wire.MsgOverhead+n : wire.MsgOverhead+n]
	}
	binary.LittleEndian.PutUint16(b, 0)
	p := q.getBig(n)
	t.bigTable(q.perTerm)[idx] = p
	t.kinds[idx] = kindBig
	t.special.Store(true)
	return p
}

// bigTable returns the term's out-of-line table, made at its first use.
func (t *logTerm) bigTable(n int) [][]byte {
	if p := t.bigs.Load(); p != nil {
		return *p
	}
	tb := make([][]byte, n)
	if t.bigs.CompareAndSwap(nil, &tb) {
		return tb
	}
	return *t.bigs.Load()
}

// commit publishes the k claimed messages of t from index idx (need
// bytes) and wakes the agent if it is parked.
func (q *logBuffer) commit(t *logTerm, idx, k, need int) {
	if q.exclusive {
		ring.StoreRelease(&t.committed, t.committed.Load()+uint64(need))
	} else {
		for i := idx; i < idx+k; i++ {
			ring.StoreRelease(&t.done[i], 1)
		}
	}
	q.unpark()
}

// unpark wakes the agent if it is parked (blocked in the kernel, or about
// to be), taking the flag so that it is woken once a time it parks, and
// reports whether it did. A load first, inlined into the producers' hot
// path: the flag is mostly clear, and a compare-and-swap on every call
// would take its line from the agent.
func (q *logBuffer) unpark() bool { return q.parked.Load() && q.takeParked() }

// takeParked is unpark's slow path: the flag was seen set.
func (q *logBuffer) takeParked() bool {
	if !q.parked.CompareAndSwap(true, false) {
		return false
	}
	q.wake()
	return true
}

// abort commits the claimed message idx of t (need bytes) as aborted,
// returning an out-of-line buffer.
func (q *logBuffer) abort(t *logTerm, idx, need int, buf []byte) {
	if t.kinds[idx] == kindBig {
		q.release(buf)
		t.bigTable(q.perTerm)[idx] = nil
	}
	t.kinds[idx] = kindAborted
	t.special.Store(true)
	q.aborts.Add(1)
	q.commit(t, idx, 1, need)
}

// put copies p into the log buffer (Send and TrySend call its two paths
// themselves).
func (q *logBuffer) put(p []byte) bool {
	if len(p) <= q.inline && q.putInline(p) {
		return true
	}
	return q.putSlow(p)
}

// putSlow is put's general path.
func (q *logBuffer) putSlow(p []byte) bool {
	need := q.entrySize(len(p))
	t, off, idx, ok := q.claim(need, 1)
	if !ok {
		return false
	}
	copy(q.place(t, off, idx, len(p)), p)
	q.commit(t, idx, 1, need)
	return true
}

// putInline is put's path for a message written in place into the open
// term when it fits there (false: anything else, left to put's general
// path, which seals a full term, opens the next and reports
// back-pressure): claim, copy and commit in one function, without the
// general path's calls (claim's loop, place and commit are not inlined)
// and their several results: the most frequent path of a small-message
// stream.
func (q *logBuffer) putInline(p []byte) bool {
	need := wire.MsgOverhead + len(p)
	n := q.open.Load()
	t := &q.terms[n&q.tmask]
	s := t.state.Load()
	// Not sealed and the open term's id, in one compare.
	if s>>sealShift != (n&idMask)<<1 {
		return false
	}
	off := stateOff(s)
	if off+need > q.termBytes || stateCount(s) >= q.perTerm {
		return false
	}
	next := s + uint64(need) + 1<<cntShift
	if q.exclusive {
		ring.StoreRelease(&t.state, next)
	} else if !t.state.CompareAndSwap(s, next) {
		return false
	}
	b := t.buf.B[wire.DataOverhead+off : wire.DataOverhead+off+need]
	binary.LittleEndian.PutUint16(b, uint16(len(p)))
	copy(b[wire.MsgOverhead:], p)
	// commit, written out: commit is too large to inline (its exclusive
	// store is an assembly call) and this is the producer's hot path.
	if q.exclusive {
		ring.StoreRelease(&t.committed, t.committed.Load()+uint64(need))
	} else {
		ring.StoreRelease(&t.done[stateCount(s)], 1)
	}
	q.unpark()
	return true
}

// putBatch copies the longest prefix of ps that fits into the log buffer,
// one claim and one commit per term it fills, and returns how many it
// took. The caller checked the sizes.
func (q *logBuffer) putBatch(ps [][]byte) int {
	done := 0
	for done < len(ps) {
		t, off, idx, k, need, ok := q.claimRun(ps[done:])
		if !ok {
			break
		}
		for i, p := range ps[done : done+k] {
			copy(q.place(t, off, idx+i, len(p)), p)
			off += q.entrySize(len(p))
		}
		q.commit(t, idx, k, need)
		done += k
	}
	return done
}

// hasRoom reports whether a claim of one small message could succeed now
// (the open term has room, or a term is free).
func (q *logBuffer) hasRoom() bool {
	n := q.open.Load()
	s := q.terms[n&q.tmask].state.Load()
	if !stateSealed(s) && stateOff(s)+wire.MsgOverhead+termSmallMsg <= q.termBytes && stateCount(s) < q.perTerm {
		return true
	}
	return int64(n+1-q.head.Load()) < int64(q.nterms)
}

// freeTerms returns how many terms are not in flight (agent side).
func (q *logBuffer) freeTerms() int {
	return int(q.nterms - (q.open.Load() - q.head.Load()) - 1)
}

// pending reports whether the log buffer holds anything the agent has not
// taken (claimed, committed or not).
func (q *logBuffer) pending() bool {
	h := q.head.Load()
	if q.open.Load() != h {
		return true
	}
	return stateOff(q.terms[h&q.tmask].state.Load()) > q.curOff
}

// isBig reports whether a payload handed to the protocol is an
// out-of-line buffer.
func (q *logBuffer) isBig(p []byte) bool { return len(p) > q.inline }

// release returns an out-of-line buffer to its free list (agent side, or
// the producer of an aborted claim); inline payloads are left.
func (q *logBuffer) release(p []byte) {
	if q.isBig(p) {
		q.bigOut.Add(-1)
		p = p[:cap(p)]
		q.big[bits.Len(uint(cap(p)))-1].put(p)
	}
}

func (q *logBuffer) getBig(n int) []byte {
	c := bits.Len(uint(n - 1)) // 1<<c >= n
	q.bigOut.Add(1)
	if b := q.big[c].get(); b != nil {
		return b[:n]
	}
	return make([]byte, n, 1<<c)
}

// headTerm is the agent's view of the term it takes from: the term, its
// state and whether what it may take now ends at a final (sealed) end.
// ok is false when there is nothing to take yet: the head term is open
// and empty (or, with ExclusiveSender, growing), or sealed with claims
// not yet committed. In shared mode it seals the open term when that is
// the head (the agent has caught up), at once when producers were not
// streaming (the last term it finished was not full: a lone message goes
// out now), else once the term stopped growing between two looks (a
// stream fills its terms; sealing each time the agent catches up would
// cut them short, and many too short to go in place).
func (q *logBuffer) headTerm() (t *logTerm, end, count int, sealed, ok bool) {
	n := q.head.Load()
	t = &q.terms[n&q.tmask]
	for {
		c := t.committed.Load() // before state: c counts only claims below its offset
		s := t.state.Load()
		end, count = stateOff(s), stateCount(s)
		if stateSealed(s) {
			if q.exclusive {
				return t, end, count, true, int(c) == end
			}
			return t, end, count, true, q.allDone(t, count)
		}
		if end == q.curOff {
			q.lastEnd = end
			return t, end, count, false, false // nothing new
		}
		grown := end != q.lastEnd
		q.lastEnd = end
		if q.exclusive {
			// Take the committed prefix once it stopped growing.
			return t, end, count, false, !grown && int(c) == end
		}
		if grown && q.filled {
			return t, end, count, false, false
		}
		if !t.state.CompareAndSwap(s, s|sealedBit) {
			continue
		}
		q.sealedSelf = true
		q.advance(n) // room: n is the head
	}
}

// allDone reports whether the first count messages of t (shared mode)
// are committed, checking each flag once a term.
func (q *logBuffer) allDone(t *logTerm, count int) bool {
	rest := t.done[q.doneIdx:count]
	for i := range rest {
		if rest[i].Load() == 0 {
			q.doneIdx += i
			return false
		}
	}
	q.doneIdx = count
	return true
}

// recycle ends the agent's use of the head term (every message in it
// taken) and makes it claimable again as term head+len(terms).
func (q *logBuffer) recycle(t *logTerm) {
	n := q.head.Load()
	if t.special.Load() {
		clear(t.kinds)
		if p := t.bigs.Load(); p != nil {
			clear(*p)
		}
		t.special.Store(false)
	}
	// A producer that sealed it found every term in flight: open it
	// moves on here, before the state is reset (a producer that read open
	// n before then finds the new id and reads open again).
	q.open.CompareAndSwap(n, n+1)
	t.committed.Store(0)
	clear(t.done[:min(len(t.done), stateCount(t.state.Load()))])
	t.state.Store(termState(n + q.nterms))
	q.curOff, q.curIdx, q.lastEnd, q.doneIdx = 0, 0, 0, 0
	q.filled, q.sealedSelf = !q.sealedSelf, false
	q.head.Store(n + 1)
}

// fill puts into pls the payloads of the head term t from the cursor up
// to end, stopping at an aborted message (skipped when it is the first)
// or when pls is full, and their ends into ends; it returns how many.
func (q *logBuffer) fill(t *logTerm, end int, pls [][]byte, ends []int) int {
	b := t.buf.B[wire.DataOverhead:]
	special := t.special.Load()
	var bigs [][]byte
	if special {
		if p := t.bigs.Load(); p != nil {
			bigs = *p
		}
	}
	k := 0
	off, idx := q.curOff, q.curIdx
	for off < end && k < len(pls) {
		n := int(binary.LittleEndian.Uint16(b[off:]))
		next := off + wire.MsgOverhead + n
		kind := kindInline
		if special {
			kind = t.kinds[idx]
		}
		switch kind {
		case kindAborted:
			if k > 0 {
				return k
			}
			q.aborts.Add(-1)
			q.curOff, q.curIdx = next, idx+1
			off, idx = next, idx+1
			continue
		case kindBig:
			pls[k] = bigs[idx]
		default:
			pls[k] = b[off+wire.MsgOverhead : next : next]
		}
		ends[k] = next
		k++
		off, idx = next, idx+1
	}
	return k
}

// advanceCursor records that the first k payloads of the last fill were
// taken.
func (q *logBuffer) advanceCursor(ends []int, k int) {
	if k > 0 {
		q.curOff = ends[k-1]
		q.curIdx += k
	}
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

// bundleMessages is the most messages a datagram carries (nakack
// MaxBundle), so the most a term holds.
const bundleMessages = 1024
