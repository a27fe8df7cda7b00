package nakack

import (
	"math"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

// stableRound is the coordinator's collection of STABLE digests for one
// round: a running minimum of delivered per sender (view position), which
// senders some member's digest lacked, and which (member, chunk) pairs have
// reported. A member's digest is split into chunks of per entries by view
// position when it does not fit one datagram. Folding a STABLE costs O(its
// entries); members never compute from every digest.
type stableRound struct {
	n, per, chunks int
	min            []uint64
	minRecv        []uint64 // minimum Received per sender (STABILITY's Received)
	lack           []bool
	got            []bool // member*chunks + chunk
	nGot           int
	seen           []uint64
	foldSeq        uint64
}

func (r *stableRound) init(n, per int) {
	r.n, r.per = n, max(per, 1)
	r.chunks = max(1, (n+r.per-1)/r.per)
	r.min = make([]uint64, n)
	r.minRecv = make([]uint64, n)
	r.lack = make([]bool, n)
	r.got = make([]bool, n*r.chunks)
	r.seen = make([]uint64, n)
	r.reset()
}

func (r *stableRound) reset() {
	for i := range r.min {
		r.min[i] = math.MaxUint64
		r.minRecv[i] = math.MaxUint64
	}
	clear(r.lack)
	clear(r.got)
	r.nGot = 0
}

// stableEntries returns (in p.entries) the delivered digest this member
// advertises: one entry per view member in view order (zero for a member
// without a window: nothing of it may be purged), Delivered the reported
// point (reportEntry: never inside a fragmented message being
// reassembled) lowered to what any held capture says (its Low for a
// merge capture).
func (p *Protocol) stableEntries() []digest.Entry {
	es := p.entries[:0]
	for _, m := range p.view.Members {
		s := p.senders[m]
		if s == nil {
			es = append(es, digest.Entry{Member: m})
			continue
		}
		e := p.reportEntry(s)
		for i := range p.captures {
			if c, ok := p.captures[i].d.Lookup(m); ok {
				hold := c.Delivered
				if p.captures[i].atLow {
					hold = c.Low
				}
				e.Delivered = min(e.Delivered, hold)
			}
		}
		es = append(es, e)
	}
	p.entries = es
	return es
}

// entryOf returns s's window numbers (WindowState): Low, the window's
// delivered point (fragments consumed by a reassembly under way count) and
// Received (for self, the highest seqno sent).
func (p *Protocol) entryOf(s *sender) digest.Entry {
	e := digest.Entry{Member: s.m, Low: s.low(), Delivered: s.delivered(), Received: s.received()}
	if s.own {
		e.Received = p.nextSeq - 1
	}
	return e
}

// reportEntry returns s's entry as this member reports it to others
// (STABLE, and the digests it hands out: Digest, CaptureDigest,
// MSG_NOT_FOUND): entryOf with Delivered at the reported point
// (sender.reported), the end of the last whole message delivered or
// reported lost, so that stability keeps a fragmented message until every
// member delivered it whole and a digest never ends inside a message its
// holder will still deliver.
func (p *Protocol) reportEntry(s *sender) digest.Entry {
	e := p.entryOf(s)
	e.Delivered = s.reported()
	return e
}

func (p *Protocol) stablePer() int { return max(1, wire.MaxDigestEntries(p.cfg.MaxDatagram)) }

// stableNudge is how often a STABLE waiting for the delivery of released
// messages looks again (creditStable).
const stableNudge = 20 * time.Microsecond

// sendStable sends this member's delivered digest to the coordinator (folds
// it directly when this member is the coordinator) and restarts the timer.
func (p *Protocol) sendStable(now time.Duration) {
	p.stableAt = now + p.cfg.StableInterval
	p.stableBytes = 0
	p.stableWait = nil
	if !p.hasView {
		return
	}
	es := p.stableEntries()
	self, ok := p.viewPos[p.self]
	if !ok {
		return
	}
	per := p.stablePer()
	if p.coord == p.self {
		for i := 0; i < len(es); i += per {
			fold(p, self, wire.EntrySlice(es[i:min(len(es), i+per)]), now)
		}
		return
	}
	for i := 0; i < len(es); i += per {
		chunk := es[i:min(len(es), i+per)]
		b := p.getBuf(wire.StableOverhead + len(chunk)*wire.EntryLen)
		if b == nil {
			return
		}
		d, err := wire.EncodeStable(b.B, p.hdr, p.view.ID, wire.EntrySlice(chunk))
		if err != nil {
			panic(err)
		}
		p.emit(p.coord, b, len(d))
		p.stats.StableSent++
	}
}

func (p *Protocol) onStable(h wire.Header, body []byte, now time.Duration) error {
	st, err := wire.DecodeStable(h, body)
	if err != nil {
		p.stats.Drops.Malformed++
		return err
	}
	from, ok := p.viewPos[h.Sender]
	if !p.hasView || p.coord != p.self || st.View != p.view.ID || !ok {
		p.stats.Drops.WrongView++
		return nil
	}
	fold(p, from, st.Digest, now)
	if p.round.onlyMissing(p.viewPos[p.self]) {
		// Every other member has reported: fold our own digest now, as of
		// now, rather than at our next STABLE tick. The round closes as
		// soon as the last member's STABLE arrives, so a sender whose
		// window is full waits one STABLE trip, not a trip plus a timer.
		p.sendStable(now)
	}
	return nil
}

// onlyMissing reports whether the round lacks chunks of the member at view
// position pos and of nobody else.
func (r *stableRound) onlyMissing(pos int) bool {
	if r.n == 0 || pos < 0 || pos >= r.n {
		return false
	}
	own := 0
	for c := 0; c < r.chunks; c++ {
		if r.got[pos*r.chunks+c] {
			own++
		}
	}
	return own < r.chunks && r.nGot-own == (r.n-1)*r.chunks
}

// fold adds one STABLE chunk from the member at view position from.
func fold[E wire.Entries](p *Protocol, from int, d E, now time.Duration) {
	r := &p.round
	if d.Len() == 0 || r.n != len(p.view.Members) {
		return
	}
	pos0, ok := p.viewPos[d.At(0).Member]
	if !ok {
		return
	}
	chunk := pos0 / r.per
	r.foldSeq++
	ms := p.view.Members
	for i := 0; i < d.Len(); i++ {
		e := d.At(i)
		j := pos0 + i
		if j >= len(ms) || ms[j] != e.Member {
			if j, ok = p.viewPos[e.Member]; !ok {
				continue
			}
		}
		r.seen[j] = r.foldSeq
		r.min[j] = min(r.min[j], e.Delivered)
		r.minRecv[j] = min(r.minRecv[j], max(e.Received, e.Delivered))
	}
	for j := chunk * r.per; j < min(r.n, (chunk+1)*r.per); j++ {
		if r.seen[j] != r.foldSeq {
			r.lack[j] = true
		}
	}
	if gi := from*r.chunks + chunk; !r.got[gi] {
		r.got[gi] = true
		r.nGot++
	}
	if r.nGot == r.n*r.chunks {
		p.emitStability(now)
		r.reset()
	}
}

// emitStability multicasts the round's minimum (senders no member lacked)
// and applies it here: per sender, Low and Delivered are the minimum
// delivered (the stable seqno), Received the minimum received (what every
// member has read of that sender: GroupReceived).
func (p *Protocol) emitStability(now time.Duration) {
	r := &p.round
	es := p.entries[:0]
	for j, m := range p.view.Members {
		if r.lack[j] || r.min[j] == 0 || r.min[j] == math.MaxUint64 {
			continue
		}
		v := r.min[j]
		es = append(es, digest.Entry{Member: m, Low: v, Delivered: v, Received: max(v, r.minRecv[j])})
	}
	p.entries = es
	if len(es) == 0 {
		return
	}
	per := p.stablePer()
	if len(p.view.Members) > 1 {
		for i := 0; i < len(es); i += per {
			chunk := es[i:min(len(es), i+per)]
			b := p.getBuf(wire.StableOverhead + len(chunk)*wire.EntryLen)
			if b == nil {
				break
			}
			d, err := wire.EncodeStability(b.B, p.hdr, p.view.ID, wire.EntrySlice(chunk))
			if err != nil {
				panic(err)
			}
			p.emit(digest.Member{}, b, len(d))
			p.stats.StabilitySent++
		}
	}
	applyStability(p, wire.EntrySlice(es), now)
}

func (p *Protocol) onStability(h wire.Header, body []byte, now time.Duration) error {
	st, err := wire.DecodeStability(h, body)
	if err != nil {
		p.stats.Drops.Malformed++
		return err
	}
	if !p.hasView || h.Sender != p.coord || st.View != p.view.ID {
		p.stats.Drops.WrongView++
		return nil
	}
	p.stats.StabilityReceived++
	applyStability(p, st.Digest, now)
	return nil
}

// OwnLow is the own window's purge point: every own seqno at or below it
// is stable and released. Send takes seqnos up to OwnLow plus the window's
// capacity, so room for it is made only when OwnLow moves.
func (p *Protocol) OwnLow() uint64 { return p.own.low() }

// GroupReceived returns how far every other member of the view has read
// this member's own messages: the minimum over the view of the highest own
// seqno each member reported as received (STABLE's Received, folded by the
// coordinator into the Received of its STABILITY), never below the own
// window's Low (what is stable was received by all) nor above the highest
// seqno sent. Until a STABILITY of the current view carried it, it is Low.
// A single-member view returns the highest seqno sent; without a view, Low.
//
// It is a sender's flow-control point: what lies above it is in flight
// towards some member's socket buffer, whereas Low also waits for every
// repair and delivery. It is as fresh as the last STABILITY (members report
// every StableInterval and every StableBytes received) and costs nothing
// per message: O(1) per call, one comparison per STABILITY entry.
func (p *Protocol) GroupReceived() uint64 {
	low, sent := p.own.low(), p.nextSeq-1
	switch {
	case !p.hasView:
		return low
	case len(p.view.Members) == 1 && p.view.Members[0] == p.self:
		return sent
	}
	return min(max(p.groupRecv, low), sent)
}

// applyStability purges every live sender's window up to its stable seqno
// and, where low rose, re-checks what the purge made room for (roomMade).
func applyStability[E wire.Entries](p *Protocol, d E, now time.Duration) {
	for i := 0; i < d.Len(); i++ {
		e := d.At(i)
		s := p.senders[e.Member]
		if s == nil || s.win == nil || s.state != live {
			continue
		}
		if s.own {
			// Every member has read up to e.Received (a coordinator
			// older than this field's use wrote Delivered: a lower bound
			// too).
			p.groupRecv = max(p.groupRecv, min(e.Received, p.nextSeq-1))
		}
		low := s.win.Low()
		p.stats.Purged += uint64(p.purgeWin(s, e.Delivered))
		if s.win.Low() > low {
			p.roomMade(s, now)
		}
	}
}
