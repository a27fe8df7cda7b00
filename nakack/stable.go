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
	minLow         []uint64 // minimum Low per sender (STABILITY's Low)
	maxRecv        []uint64 // maximum Received (or Delivered) per sender: settled
	lack           []bool
	got            []bool // member*chunks + chunk
	nGot           int
	seen           []uint64
	foldSeq        uint64
	// stab is the stable point of the last STABILITY per sender (view
	// position; 0 before the first): a report whose Low lies below it
	// comes from a member that missed that STABILITY, which gets a repeat
	// (once per round: repeated, by member).
	stab     []uint64
	repeated []bool
	// chasedGot is nGot at the last chase (-1 before the first).
	chasedGot int
}

func (r *stableRound) init(n, per int) {
	r.n, r.per = n, max(per, 1)
	r.chunks = max(1, (n+r.per-1)/r.per)
	r.min = make([]uint64, n)
	r.minRecv = make([]uint64, n)
	r.minLow = make([]uint64, n)
	r.maxRecv = make([]uint64, n)
	r.lack = make([]bool, n)
	r.got = make([]bool, n*r.chunks)
	r.seen = make([]uint64, n)
	r.stab = make([]uint64, n)
	r.repeated = make([]bool, n)
	r.reset()
}

func (r *stableRound) reset() {
	for i := range r.min {
		r.min[i] = math.MaxUint64
		r.minRecv[i] = math.MaxUint64
		r.minLow[i] = math.MaxUint64
	}
	clear(r.maxRecv)
	clear(r.lack)
	clear(r.got)
	clear(r.repeated)
	r.nGot = 0
}

// complete reports whether every chunk of the member at view position pos
// is in the round.
func (r *stableRound) complete(pos int) bool {
	for c := 0; c < r.chunks; c++ {
		if !r.got[pos*r.chunks+c] {
			return false
		}
	}
	return true
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
	if fold(p, from, st.Digest, now) {
		p.sendStability(h.Sender, 0) // it missed the last STABILITY: repeat it
	}
	if p.round.nGot > 0 && p.chaseAt == NoDeadline {
		// The round's reports are coming in: chase those that do not
		// come (chase).
		p.chaseIval = p.chaseDelay()
		p.chaseAt = now + p.chaseIval
		p.round.chasedGot = -1
	}
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

// fold adds one STABLE chunk from the member at view position from. It
// reports whether the chunk shows that the member missed the last
// STABILITY (a Low below its stable point) and has not been sent a repeat
// of it in this round.
func fold[E wire.Entries](p *Protocol, from int, d E, now time.Duration) (behind bool) {
	r := &p.round
	if d.Len() == 0 || r.n != len(p.view.Members) {
		return false
	}
	pos0, ok := p.viewPos[d.At(0).Member]
	if !ok {
		return false
	}
	chunk := pos0 / r.per
	r.foldSeq++
	ms := p.view.Members
	var lagSum uint64
	for i := 0; i < d.Len(); i++ {
		e := d.At(i)
		j := pos0 + i
		if j >= len(ms) || ms[j] != e.Member {
			if j, ok = p.viewPos[e.Member]; !ok {
				continue
			}
		}
		lagSum += p.mlag.entry(from, j, e.Delivered) // peerlag.go
		r.seen[j] = r.foldSeq
		r.min[j] = min(r.min[j], e.Delivered)
		r.minRecv[j] = min(r.minRecv[j], max(e.Received, e.Delivered))
		r.minLow[j] = min(r.minLow[j], e.Low)
		r.maxRecv[j] = max(r.maxRecv[j], e.Received, e.Delivered)
		behind = behind || e.Low < r.stab[j]
	}
	p.mlag.report(from, chunk, lagSum)
	behind = behind && !r.repeated[from]
	if behind {
		r.repeated[from] = true
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
	return behind
}

// emitStability multicasts the round's minimum (senders no member lacked)
// and applies it here: per sender, Delivered is the minimum delivered (the
// stable seqno, members purge up to it), Received the minimum received
// (what every member has read of that sender: GroupReceived) and Low the
// minimum Low (where every member's window starts: SendLimit). It keeps
// the entries (lastStab) for repeats and chases, and starts the next
// round's clock: members that get it report again one StableInterval
// later (alignStable), the coordinator with them.
func (p *Protocol) emitStability(now time.Duration) {
	r := &p.round
	es := p.lastStab[:0]
	settled := true
	for j, m := range p.view.Members {
		settled = settled && !r.lack[j] && r.min[j] != math.MaxUint64 && r.maxRecv[j] <= r.min[j]
		if r.lack[j] || r.min[j] == 0 || r.min[j] == math.MaxUint64 {
			continue
		}
		v := r.min[j]
		r.stab[j] = v
		es = append(es, digest.Entry{Member: m, Low: min(v, r.minLow[j]), Delivered: v, Received: max(v, r.minRecv[j])})
	}
	p.lastStab = es
	p.lastSettled = settled
	p.chaseAt = NoDeadline
	if settled {
		p.stats.StabilitySettled++
	}
	if len(es) == 0 {
		return
	}
	p.stableAt = now + p.cfg.StableInterval
	if len(p.view.Members) > 1 {
		p.sendStability(digest.Member{}, 0)
	}
	applyStability(p, wire.EntrySlice(es), now)
}

// sendStability sends the last STABILITY (lastStab; empty before the
// first) to to (zero: multicast), with flags (FlagReport: a chase).
func (p *Protocol) sendStability(to digest.Member, flags uint8) {
	es := p.lastStab
	per := p.stablePer()
	h := p.hdr
	h.Flags |= flags
	if p.lastSettled {
		h.Flags |= wire.FlagSettled
	}
	for i := 0; i == 0 || i < len(es); i += per {
		chunk := es[i:min(len(es), i+per)]
		b := p.getBuf(wire.StableOverhead + len(chunk)*wire.EntryLen)
		if b == nil {
			return
		}
		d, err := wire.EncodeStability(b.B, h, p.view.ID, wire.EntrySlice(chunk))
		if err != nil {
			panic(err)
		}
		p.emit(to, b, len(d))
		p.stats.StabilitySent++
	}
}

// reportSpread is how much earlier than one StableInterval after a
// STABILITY a member may send its next report (alignStable): an eighth of
// the interval, at most NakInterval/2 (scaled to the view).
func (p *Protocol) reportSpread() time.Duration {
	return min(p.cfg.StableInterval/8, p.nakInterval/2)
}

// chaseDelay is how long after the first report of a round the coordinator
// waits for the others before asking for them (chase): the members report
// within reportSpread of each other, and NakInterval exceeds a round trip.
func (p *Protocol) chaseDelay() time.Duration {
	return max(1, p.nakInterval+p.reportSpread())
}

// chase asks every member the round still lacks a report from for its
// STABLE (a STABILITY with FlagReport, unicast, repeating the last one,
// which it may have missed too), and rearms: after the same delay while
// the last chase brought reports in, after a doubled one (up to
// StableInterval) when it brought none (a member that is gone and not yet
// out of the view). A lost STABLE so costs the round a chase delay, not a
// StableInterval; at a thousand members some report of every round is
// lost, and some answers to a chase too.
func (p *Protocol) chase(now time.Duration) {
	r := &p.round
	if r.nGot == r.chasedGot {
		p.chaseIval = min(2*p.chaseIval, p.cfg.StableInterval)
	}
	r.chasedGot = r.nGot
	p.chaseAt = now + p.chaseIval
	if !p.hasView || p.coord != p.self || r.n != len(p.view.Members) || r.nGot == 0 {
		p.chaseAt = NoDeadline
		return
	}
	for pos, m := range p.view.Members {
		if m != p.self && !r.complete(pos) {
			p.sendStability(m, wire.FlagReport)
			p.stats.StableChased++
		}
	}
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
	if h.Flags&wire.FlagSettled != 0 {
		p.stats.StabilitySettled++
	}
	applyStability(p, st.Digest, now)
	switch {
	case h.Flags&wire.FlagReport != 0:
		p.sendStable(now) // the coordinator's round lacks our report
	case p.stableWait == nil:
		p.alignStable(now)
	}
	return nil
}

// alignStable schedules this member's next STABLE one StableInterval after
// a STABILITY, less a random spread (reportSpread, so that a large view's
// reports do not reach the coordinator all at once): the members' reports
// for the next round arrive together, and the coordinator chases those
// that do not.
func (p *Protocol) alignStable(now time.Duration) {
	p.stableAt = now + p.cfg.StableInterval - time.Duration(p.rng.Int64N(int64(p.reportSpread())+1))
}

// SendLimit is the highest seqno Send may claim now: SendWindow above the
// own window's purge point (OwnLow), and RecvWindow above the lowest point
// any member's window for this sender starts at (the minimum Low of the
// members' reports, carried by STABILITY): so a member that purges late,
// its STABILITY lost, never has to discard data for want of room. It
// assumes every member's RecvWindow is at least this member's. It moves
// only on STABILITY.
func (p *Protocol) SendLimit() uint64 {
	lim := p.own.low() + uint64(p.cfg.SendWindow)
	// groupLow never exceeds what we sent (applyStability caps it), so
	// the sum cannot wrap.
	if p.hasView && len(p.view.Members) > 1 {
		lim = min(lim, p.groupLow+uint64(p.cfg.RecvWindow))
	}
	return lim
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
			// Every member has read up to e.Received, and every member's
			// window starts at or above e.Low (a coordinator older than
			// these fields' use wrote Delivered: a lower bound too).
			p.groupRecv = max(p.groupRecv, min(e.Received, p.nextSeq-1))
			// Capped at what we sent: no member's window of ours can
			// start beyond it, and SendLimit adds RecvWindow to it (a
			// coordinator's absurd value must not wrap that sum).
			p.groupLow = max(p.groupLow, min(e.Low, e.Delivered, p.nextSeq-1))
			p.stablePoint = max(p.stablePoint, e.Delivered)
			if e.Received < p.nextSeq-1 {
				// A member has not read all our messages, perhaps the
				// tail of a stream it never heard of: announce our
				// highest at the base interval, not backed off.
				p.highestIval = p.cfg.HighestInterval
				p.highestAt = min(p.highestAt, now+p.highestIval)
			}
		}
		low := s.win.Low()
		p.stats.Purged += uint64(p.purgeWin(s, e.Delivered))
		if s.win.Low() > low {
			p.roomMade(s, now)
		}
	}
}
