package nakack

import "github.com/nakcast/nakcast/wire"

// dref is a window's hold on one datagram buffer: a single wire.Buffer
// reference for every seqno stored from it, so the datagram, not the
// message, is the unit of refcounting. Each window keeps its drefs ordered
// by the highest seqno stored from them (sender.refs) and releases a
// buffer once its low passes that seqno: a purge costs nothing per message
// beyond the ring's slot clearing, and one Release per datagram.
type dref struct {
	buf    *wire.Buffer
	maxSeq uint64 // highest seqno stored from buf (an upper bound)
	held   bool   // buf retained, dref queued in its window
}

// drefSlab is how many drefs are allocated at once when the free list is
// empty (steady state allocates none).
const drefSlab = 64

// appendRef appends d to refs and counts in p.growth the allocation of an
// append that outgrows refs (a new high-water mark of retained datagrams).
func (p *Protocol) appendRef(refs []*dref, d *dref) []*dref {
	if len(refs) == cap(refs) {
		p.growth++
	}
	return append(refs, d)
}

// GrowthAllocs returns how many allocations the protocol made to grow its
// datagram references: each at a new high-water mark of retention (bounded
// by the windows), none in a steady state. Allocation tests subtract them
// as they subtract a pool's growth.
func (p *Protocol) GrowthAllocs() uint64 { return p.growth }

// newRef returns an unused dref for buf (nothing retained yet).
func (p *Protocol) newRef(buf *wire.Buffer) *dref {
	if len(p.freeRefs) == 0 {
		slab := make([]dref, drefSlab)
		p.growth++
		for i := range slab {
			p.freeRefs = p.appendRef(p.freeRefs, &slab[i])
		}
	}
	d := p.freeRefs[len(p.freeRefs)-1]
	p.freeRefs[len(p.freeRefs)-1] = nil
	p.freeRefs = p.freeRefs[:len(p.freeRefs)-1]
	d.buf = buf
	return d
}

// holdRef records that n seqnos up to maxSeq were stored from d in s's
// window: the first time, d's buffer is retained and d queued in order of
// maxSeq (usually at the tail: a repair goes a few places back).
func (p *Protocol) holdRef(s *sender, d *dref, n int, maxSeq uint64) {
	if n <= 0 {
		return
	}
	if d.held {
		if maxSeq > d.maxSeq { // the open own bundle, always the tail
			d.maxSeq = maxSeq
		}
		return
	}
	d.buf.Retain(1)
	d.held, d.maxSeq = true, maxSeq
	s.refs = p.appendRef(s.refs, d)
	i := len(s.refs) - 1
	for ; i > s.refHead && s.refs[i-1].maxSeq > maxSeq; i-- {
		s.refs[i] = s.refs[i-1]
	}
	s.refs[i] = d
}

// dropRef returns d to the free list if nothing was stored from it.
func (p *Protocol) dropRef(d *dref) {
	if !d.held {
		d.buf = nil
		p.freeRefs = p.appendRef(p.freeRefs, d)
	}
}

// releaseRefs releases the datagrams of s whose every stored seqno lies at
// or below upto (all of them: upto = max uint64).
func (p *Protocol) releaseRefs(s *sender, upto uint64) {
	i := s.refHead
	for ; i < len(s.refs) && s.refs[i].maxSeq <= upto; i++ {
		d := s.refs[i]
		s.refs[i] = nil
		d.buf.Release()
		if d == p.bundleRef {
			// The open bundle (a purge of own messages before it was
			// flushed, e.g. a one-member view): it keeps its dref; what
			// it publishes next is held and queued afresh.
			d.held, d.maxSeq = false, 0
			continue
		}
		*d = dref{}
		p.freeRefs = p.appendRef(p.freeRefs, d)
	}
	s.refHead = i
	if s.refHead == len(s.refs) {
		s.refs, s.refHead = s.refs[:0], 0
	} else if s.refHead > 64 && s.refHead > len(s.refs)/2 {
		n := copy(s.refs, s.refs[s.refHead:])
		clear(s.refs[n:])
		s.refs, s.refHead = s.refs[:n], 0
	}
}

// purgeWin purges s's window up to upto (ring Purge) and releases the
// datagrams wholly below its new low.
func (p *Protocol) purgeWin(s *sender, upto uint64) int {
	n := s.win.Purge(upto, nil)
	if n > 0 && s.own {
		p.ownPurged() // peer lag (stats.go)
	}
	p.releaseRefs(s, s.win.Low())
	return n
}

// skipWin skips s's window to `to` (ring Skip) and releases the datagrams
// wholly below its new low (those holding only skipped seqnos above it go
// with the next purge).
func (p *Protocol) skipWin(s *sender, to uint64) int {
	n := s.win.Skip(to, nil)
	p.releaseRefs(s, s.win.Low())
	return n
}
