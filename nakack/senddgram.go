package nakack

import (
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
	// One walk over the length prefixes checks the layout and finds the
	// payloads; Flush below does not move nextSeq (the open bundle's
	// messages took their seqnos when added), so the header written now
	// stays right.
	first = p.nextSeq
	var w wire.DataWriter
	if err := w.Reset(b.B[:min(len(b.B), p.cfg.MaxDatagram)], p.hdr, p.self, first); err != nil {
		return 0, err
	}
	ps := p.dgramPls[:count]
	defer clear(ps)
	if err := w.Adopt(count, end, ps); err != nil {
		return 0, err
	}
	if p.admit(ps, now) < count {
		return 0, p.fl.held
	}
	p.Flush(now)
	d := w.Finish()
	p.storeOwnDatagram(b, ps, first)
	p.emit(digest.Member{}, b, len(d))
	p.stats.Sent += uint64(count)
	p.stats.Bundles++
	p.sentData(now)
	p.took(ps, first, p.nextSeq-1)
	return first, nil
}

// storeOwnDatagram stores the messages ps, slices of b, as the own
// seqnos first.. (one run of the own window, one dref for b) and advances
// NextSeq past them.
func (p *Protocol) storeOwnDatagram(b *wire.Buffer, ps [][]byte, first uint64) {
	ref := p.newRef(b)
	pend := p.ownPend[:len(ps)]
	for i, pl := range ps {
		pend[i] = msg{ref: ref, off: offsetIn(b, pl), n: uint32(len(pl))}
	}
	p.nextSeq = first + uint64(len(ps))
	r := p.own.win.AddRun(first, pend)
	clear(pend)
	p.holdRef(p.own, ref, r.Added, p.nextSeq-1)
	p.dropRef(ref)
	p.own.highest = p.nextSeq - 1
	p.markReady(p.own)
}
