package engine

import (
	"encoding/binary"
	"math/bits"
	"runtime"
	"sync/atomic"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/ring"
)

// delivery is pull mode's hand-off from the agent to Member.Poll: a
// ring.Records of delivered messages and lost ranges. The agent delivers
// into it (it is the nakack.Handler of the agent's delivery part) and Poll
// reads it on the application's goroutine: the two share no lock.
//
// A record is a kind byte, the sender, a seqno, then the payload (recMsg),
// the range's end (recLost) or where the payload lies in the spill
// (recRef). What finds no room in the ring waits in the spill, in order;
// the agent moves it on in later cycles and delivers nothing more from the
// protocol meanwhile, so the spill holds at most one Poll of the
// protocol's deliveries. A message above the ring's largest record stays
// in the spill and the ring carries a reference to it: the spill is then
// the consumer's until it has consumed that record (lent).
//
// The ring holds at most maxRecs records (deliveryRecords): a message in
// it counts as delivered for stability and lag, so it must stay a small
// part of the window.
type delivery struct {
	r       *ring.Records
	maxRecs uint64

	// Agent side.
	pushed  uint64 // records written into the ring
	xpopped uint64 // the agent's copy of popped
	spill   []byte // records without room: a uint32 length, then the record
	spillAt int    // the next spilled record to move into the ring
	lent    uint64 // a reference record is in the ring up to this count (0: none)
	stalled bool   // this cycle stopped for want of room
	stallAt uint64 // popped when the part that stopped began

	// full is set by the agent when it stops for want of room; the Poll
	// that makes room clears it and wakes the agent.
	full atomic.Bool

	// staleTo: the records below this count were written by an
	// incarnation that was excluded with Config.Membership.FetchState:
	// Poll drops them and counts them in superseded (Stats.DiscardedOnRejoin).
	staleTo    atomic.Uint64
	superseded *atomic.Uint64

	// Poll side.
	popped atomic.Uint64 // records consumed by Poll
	// busy is set while a Poll reads (one at a time: another returns 0),
	// and for good once Close discarded what was left.
	busy atomic.Bool
}

// Record kinds.
const (
	recMsg  = 1
	recRef  = 2
	recLost = 3
)

// recMeta is the bytes of a record before its payload (or range end, or
// reference): kind, pad, sender's Inc, sender's ID, seqno.
const recMeta = 24

// recSmall is the size of a lost-range and a reference record.
const recSmall = recMeta + 8

// deliveryMaxBytes bounds the delivery ring's buffer: with the default
// window, 8192 records of 64 B messages fit, or about 2000 of 1 KiB.
const deliveryMaxBytes = 2 << 20

// newDelivery returns the delivery ring of a pull-mode member: at most
// deliveryRecords(cfg) records in a buffer sized for that many messages of
// the inline size (a power of two, at most deliveryMaxBytes).
func newDelivery(cfg *settings) *delivery {
	recs := deliveryRecords(cfg)
	per := 8 + recMeta + min(cfg.InlineSize, cfg.MaxMessage)
	size := deliveryMaxBytes
	if recs < deliveryMaxBytes/per { // (no overflow with a 32-bit int)
		size = max(recs*per, 4096)
	}
	r, err := ring.NewRecords(1 << bits.Len(uint(size-1)))
	if err != nil {
		panic(err) // a power of two >= 4096
	}
	return &delivery{r: r, maxRecs: uint64(recs), superseded: new(atomic.Uint64)}
}

// deliveryRecords is how many records the delivery ring holds at most: an
// eighth of the window, so that what waits in the ring (delivered as far
// as the protocol knows) leaves most of the window to measure the
// application's lag against, and large enough that the agent, which
// stalls when the ring is full until a Poll makes room, stalls and is
// woken seldom.
func deliveryRecords(cfg *settings) int {
	return max(1, cfg.Window/8)
}

// room returns how many more records the ring may hold (agent side).
func (d *delivery) room() int {
	if d.pushed-d.xpopped >= d.maxRecs {
		d.xpopped = d.popped.Load()
	}
	return int(d.maxRecs - (d.pushed - d.xpopped))
}

// idle reports whether nothing waits in the spill: the agent may deliver
// from the protocol.
func (d *delivery) idle() bool { return len(d.spill) == 0 }

// begin starts a delivery part (agent side): what Poll consumes from now
// on counts as progress if the part stalls (see stall).
func (d *delivery) begin() {
	d.stalled = false
	d.stallAt = d.popped.Load()
}

// stall notes that the agent stopped for want of room: the next Poll that
// consumes wakes it (see progressed). Progress counts from the part's
// begin, not from here: Poll may have consumed everything the part
// published, the record a spilled message lent included, after the part
// looked (flush keeps the spill while that record is unread) and before
// it stalls; no later Poll would consume anything, so none would wake it.
func (d *delivery) stall() {
	d.stalled = true
	d.full.Store(true)
}

// progressed reports whether a stalled agent has room again: checked after
// the agent armed its wake-up, before it blocks.
func (d *delivery) progressed() bool { return d.stalled && d.popped.Load() != d.stallAt }

// put writes one record: into the ring when nothing is spilled and it
// fits, else into the spill.
func (d *delivery) put(kind byte, s digest.Member, seq, to uint64, payload []byte) {
	n := recMeta + len(payload)
	if kind == recLost {
		n = recSmall
	}
	if d.idle() && n <= d.r.MaxRecord() && d.pushed-d.xpopped < d.maxRecs {
		if b, ok := d.r.Claim(n); ok {
			putRecord(b, kind, s, seq, to, payload)
			d.pushed++
			return
		}
	}
	at := len(d.spill)
	d.spill = append(d.spill, make([]byte, 4+n)...)
	binary.LittleEndian.PutUint32(d.spill[at:], uint32(n))
	putRecord(d.spill[at+4:], kind, s, seq, to, payload)
}

// putRecord encodes a record into b (len(b) is its size).
func putRecord(b []byte, kind byte, s digest.Member, seq, to uint64, payload []byte) {
	b[0] = kind
	binary.LittleEndian.PutUint32(b[4:], s.Inc)
	binary.LittleEndian.PutUint64(b[8:], s.ID)
	binary.LittleEndian.PutUint64(b[16:], seq)
	if kind == recLost {
		binary.LittleEndian.PutUint64(b[recMeta:], to)
		return
	}
	copy(b[recMeta:], payload)
}

// Deliver implements nakack.Handler for the agent's delivery part.
func (d *delivery) Deliver(s digest.Member, seq uint64, payload []byte) {
	d.put(recMsg, s, seq, 0, payload)
}

// Lost implements nakack.Handler: the protocol's OnLost hook
// (Member.lostRange) queues the event, the range goes to Poll's consumer.
func (d *delivery) Lost(s digest.Member, from, to uint64) {
	d.put(recLost, s, from, to, nil)
}

// flush moves spilled records into the ring while there is room, and
// empties the spill once every record has moved and the consumer is done
// with a referenced one. It returns how many records moved (agent side).
func (d *delivery) flush() (moved int) {
	for d.spillAt < len(d.spill) {
		n := int(binary.LittleEndian.Uint32(d.spill[d.spillAt:]))
		rec := d.spill[d.spillAt+4 : d.spillAt+4+n]
		if d.room() == 0 {
			break
		}
		size := n
		if n > d.r.MaxRecord() {
			size = recSmall
		}
		b, ok := d.r.Claim(size)
		if !ok {
			break
		}
		copy(b, rec[:size])
		if size != n {
			b[0] = recRef
			binary.LittleEndian.PutUint32(b[recMeta:], uint32(d.spillAt+4+recMeta))
			binary.LittleEndian.PutUint32(b[recMeta+4:], uint32(n-recMeta))
			d.lent = d.pushed + 1
		}
		d.pushed++
		d.spillAt += 4 + n
		moved++
	}
	if d.spillAt == len(d.spill) && (d.lent == 0 || d.popped.Load() >= d.lent) {
		d.spill, d.spillAt, d.lent = d.spill[:0], 0, 0
	}
	return moved
}

// poll hands up to limit records to h and frees their space (Poll side,
// one goroutine at a time). wake is called when the agent had stopped for
// want of room.
func (d *delivery) poll(h Handler, limit int, wake func()) int {
	n := 0
	for n < limit {
		b, ok := d.r.Next()
		if !ok {
			break
		}
		s := digest.Member{Inc: binary.LittleEndian.Uint32(b[4:]), ID: binary.LittleEndian.Uint64(b[8:])}
		seq := binary.LittleEndian.Uint64(b[16:])
		switch {
		case d.popped.Load()+uint64(n) < d.staleTo.Load():
			d.superseded.Add(1)
		case b[0] == recMsg:
			h.Deliver(s, seq, b[recMeta:])
		case b[0] == recRef:
			off := binary.LittleEndian.Uint32(b[recMeta:])
			l := binary.LittleEndian.Uint32(b[recMeta+4:])
			h.Deliver(s, seq, d.spill[off:off+l:off+l])
		case b[0] == recLost:
			h.Lost(s, seq, binary.LittleEndian.Uint64(b[recMeta:]))
		}
		n++
	}
	if n > 0 {
		d.r.Release()
		d.popped.Add(uint64(n))
		if d.full.Load() && d.full.Swap(false) {
			wake()
		}
	}
	return n
}

// supersede marks every record written so far, in the ring or still
// spilled, as covered by the state that a rejoin will fetch (an exclusion
// with Config.Membership.FetchState): Poll drops them rather than hand the
// application messages the state already holds, after it (agent side).
func (d *delivery) supersede() {
	n := d.pushed
	for at := d.spillAt; at < len(d.spill); n++ {
		at += 4 + int(binary.LittleEndian.Uint32(d.spill[at:]))
	}
	d.staleTo.Store(n)
}

// discard takes the Poll side for good once the agent has stopped (Close)
// and returns how many records were not polled, spilled ones included.
func (d *delivery) discard() uint64 {
	for !d.busy.CompareAndSwap(false, true) {
		runtime.Gosched() // a Poll in progress
	}
	n := uint64(0)
	for {
		if _, ok := d.r.Next(); !ok {
			break
		}
		n++
	}
	d.r.Release()
	for at := d.spillAt; at < len(d.spill); n++ {
		at += 4 + int(binary.LittleEndian.Uint32(d.spill[at:]))
	}
	return n
}
