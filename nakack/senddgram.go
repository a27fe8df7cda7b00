package nakack

import (
	"encoding/binary"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

// SendDatagram sends count messages that the caller wrote in place in b,
// in the wire's per-message layout from wire.DataOverhead up to byte end
// (the log-buffer publication: the application writes its messages where
// the datagram will carry them, so the protocol copies nothing). It flushes
// the open bundle first (its seqnos come before), writes the DATA header
// and the trailer room in place, stores every message in the own window
// as a slice of b (retained until stable: repairs and delivery to self
// read it there), and emits b. It takes over the caller's reference to b
// when it returns no error.
//
// It takes all count messages or none: beyond SendLimit, or when flow
// control or the rate limit would hold any of them, it returns
// ErrBackPressure, ErrFlowControl or ErrRateLimit (Held says the same) and
// b stays the caller's. count must be at most Config.MaxBundle and the
// messages must fit a datagram of Config.MaxDatagram with its trailer;
// else it returns wire.ErrMalformed.
func (p *Protocol) SendDatagram(b *wire.Buffer, count, end int, now time.Duration) (first uint64, err error) {
	p.fl.held = nil
	if count < 1 || count > p.cfg.MaxBundle || count > len(p.dgramPls) {
		return 0, wire.ErrMalformed
	}
	if p.nextSeq+uint64(count)-1 > p.SendLimit() {
		p.stats.BackPressure++
		p.fl.held = ErrBackPressure
		return 0, ErrBackPressure
	}
	// One walk over the length prefixes checks the layout (wire Adopt);
	// admission needs only the payload bytes, which the layout gives
	// without a walk, unless flow control or the rate limit is close to
	// holding the datagram back (admitAll: then the payloads go to admit
	// one by one, as SendBatch's do). Flush below does not move nextSeq
	// (the open bundle's messages took their seqnos when added), so the
	// header written now stays right.
	first = p.nextSeq
	var w wire.DataWriter
	if err := w.Reset(b.B[:min(len(b.B), p.cfg.MaxDatagram)], p.hdr, p.self, first); err != nil {
		return 0, err
	}
	if done, err := p.sendInPlace(b, &w, count, end, now); err != nil {
		return 0, err
	} else if done {
		return first, nil
	}
	if err := w.Adopt(count, end, nil); err != nil {
		return 0, err
	}
	total := uint64(end - wire.DataOverhead - count*wire.MsgOverhead)
	if !p.admitAll(total, uint64(binary.LittleEndian.Uint16(b.B[wire.DataOverhead:])), now) {
		ps := w.AppendPayloads(p.dgramPls[:0])
		k := p.admit(ps, now)
		clear(ps)
		if k < count {
			return 0, p.fl.held
		}
	}
	p.Flush(now)
	d := w.Finish()
	p.storeOwnDatagram(b, count, end, first)
	p.emitOwn(b, len(d), count, now)
	return first, nil
}

// emitOwn emits b, a DATA datagram of n bytes carrying count own
// messages just stored.
func (p *Protocol) emitOwn(b *wire.Buffer, n, count int, now time.Duration) {
	p.emit(digest.Member{}, b, n)
	p.stats.Sent += uint64(count)
	p.stats.Bundles++
	p.sentData(now)
}

// sendInPlace is SendDatagram's path for the common case: the run's
// slots in the own window can be reserved (ring.Window.Reserve: no wrap)
// and flow control and the rate limit let the whole run go. The one walk
// over the length prefixes checks the layout and writes the window's
// entries in place, where the general path walks to check (wire Adopt),
// walks again to fill a scratch, copies it into the window and clears
// it. done false with a nil error: not such a run, nothing changed (the
// general path decides); a malformed layout is ErrMalformed, changing
// nothing.
func (p *Protocol) sendInPlace(b *wire.Buffer, w *wire.DataWriter, count, end int, now time.Duration) (done bool, err error) {
	aw := *w // adopted only if this path sends: the general path adopts w itself
	if err := aw.AdoptWalked(count, end); err != nil {
		return false, err
	}
	first := p.nextSeq
	win := p.own.win
	slots := win.Reserve(first, count)
	if slots == nil {
		return false, nil
	}
	ref := p.newRef(b)
	total, ok := fillRun(slots, ref, b.B[:end], wire.DataOverhead, 0)
	if !ok {
		p.dropRef(ref)
		return false, wire.ErrMalformed
	}
	if !p.admitAll(total, uint64(slots[0].n), now) {
		p.dropRef(ref)
		return false, nil
	}
	p.Flush(now) // publishes the open bundle's earlier seqnos: not these slots
	d := aw.Finish()
	win.Commit(first, count)
	p.accountOwn(first, slots)
	p.ownStored(ref, count, count)
	p.emitOwn(b, len(d), count, now)
	return true, nil
}

// accountOwn accounts for the own messages in ms (seqnos first..), just
// sent, in flow control and the rate limit, as took does for payloads
// (the running count in a local, as there).
func (p *Protocol) accountOwn(first uint64, ms []msg) {
	f := &p.fl
	if f.limit == 0 && f.rate == 0 {
		return
	}
	sent0, sent := f.sent, f.sent
	cum := f.cum // nil without flow control
	for i := range ms {
		sent += uint64(ms[i].n)
		if cum != nil {
			cum[(first+uint64(i))&f.mask] = sent
		}
	}
	f.sent = sent
	f.spend(sent0)
}

// ownStored completes the store of count own messages from seqno
// NextSeq() on (their datagram's reference ref; added of them stored in
// the own window): NextSeq moves past them, the reference is held, and
// the own sender's readiness for delivery to self follows.
func (p *Protocol) ownStored(ref *dref, count, added int) {
	p.nextSeq += uint64(count)
	p.holdRef(p.own, ref, added, p.nextSeq-1)
	p.dropRef(ref)
	p.own.highest = p.nextSeq - 1
	p.markReady(p.own)
}

// storeOwnDatagram stores the count messages laid out in b from
// wire.DataOverhead up to end (checked by wire Adopt) as the own seqnos
// first.. (one run of the own window, one dref for b), advances NextSeq
// past them and accounts for their bytes in flow control.
func (p *Protocol) storeOwnDatagram(b *wire.Buffer, count, end int, first uint64) {
	ref := p.newRef(b)
	pend := p.ownPend[:count]
	fillRun(pend, ref, b.B[:end], wire.DataOverhead, 0) // cannot fail: Adopt checked the layout
	p.accountOwn(first, pend)
	r := p.own.win.AddRun(first, pend)
	clear(pend)
	p.ownStored(ref, count, r.Added)
}
