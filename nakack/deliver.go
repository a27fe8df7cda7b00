package nakack

import (
	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/ring"
)

// deliverRunMax bounds a run of a window's entries taken in one step
// (delivered in place, or consumed): what a BatchHandler gets in one
// call at most, and the capacity of the payload scratch it is given.
const deliverRunMax = 256

// reassembly is the per-sender state of a fragmented message being
// delivered. Its buffer grows to the largest message seen (bounded by
// Config.MaxMessage) and is reused.
type reassembly struct {
	buf      []byte
	first    uint64 // seqno of fragment 0
	next     uint32 // index expected next
	count    uint32
	active   bool
	skipTo   uint64 // fragments up to here belong to a message reported lost
	reported uint64 // highest seqno reported lost
	// lostTo is the end of the last lost run reported (reportLost), which
	// may lie beyond the window's delivered point (a departed sender's run
	// through its cut's declarations, sender.consumed); 0 after a rewind
	// or a join.
	lostTo uint64
	// joinedAt is where a join digest started this window (0: not
	// started by a join; seqnos start at 1). A message whose fragment 0
	// is at or below it began before this member joined: it was never
	// promised to this member, so its remaining fragments, and lost runs
	// known to lie inside it, are dropped silently (see doc.go).
	joinedAt uint64
	// orphan is the first fragment of a message the window's delivered
	// point lies inside and this member never delivers: an OverwriteDigest
	// ended inside it (the state's holder never delivers it). The next
	// report (its next fragment, an orphan, or a lost run after the point)
	// starts there; a cut at the point reports [orphan, cut] (lostAtCut).
	// 0: none.
	orphan uint64
}

// reported is the delivered point this member reports for s (STABLE and
// the digests it hands out, reportEntry): the end of the last whole
// message it delivered or reported lost, never a point inside a message
// it will still deliver. The window's delivered point counts the
// fragments a reassembly under way has consumed; while one is active the
// reported point stays at the seqno before its first fragment. (Elsewhere
// it is the window's point, which may lie inside a message this member
// never delivers: one reported lost, or begun before its join point,
// whose remaining fragments it consumes silently.)
//
// So stability never purges a message's first fragments before every
// member has delivered the message whole (a member that needs them can
// still fetch them), and a digest (join, state transfer) never ends inside
// a message its holder will still deliver: a state captured with it lacks
// the message, and whoever installs the digest delivers the message too.
//
// It is O(1) and never exceeds the window's delivered point. It does not
// go backwards while the window only moves forward: a reassembly starts
// when the window's delivered point is its first fragment, the reported
// point being then first-1 either way, and ends (delivered, reported lost,
// broken by the sender, or ended by an OverwriteDigest at the window's
// point) with the delivered point at or above its first fragment. Only a rewind (OverwriteDigest below the delivered point) moves
// it back, as it moves the window's.
func (s *sender) reported() uint64 {
	d := s.delivered()
	if s.reasm.active {
		return min(d, s.reasm.first-1)
	}
	return d
}

// consumed is where the application stands in s's stream: the reported
// point (sender.reported), or the end of a lost run Poll reported beyond
// the window's delivered point (a departed sender's run through the
// ranges its cut declared lost beyond the window's capacity, which the
// window consumes as it moves on; lostBeyondFullCut), or, while a lost
// event is pending (pendingLost), the seqno before it: the window has
// consumed its seqnos, the application has not been told. A digest handed
// out with a state (CaptureDigest), the point a closed window is
// remembered at (CloseWindow) and a cut's completion (Consumed) use it,
// so that nothing the application was told is delivered or reported
// again, and nothing it was not told is skipped.
func (s *sender) consumed() uint64 {
	if s.own {
		return s.reported()
	}
	if s.pend.To != 0 {
		return max(s.pend.From-1, s.reasm.reported)
	}
	if !s.reasm.active && s.reasm.lostTo > s.delivered() {
		return s.reasm.lostTo
	}
	return s.reported()
}

// pendingLost is a lost event of a live sender that reaches the window's
// capacity before its end is known: nothing beyond the capacity can be
// held, so whether the seqno after it is held, lost too (a later
// MSG_NOT_FOUND or merge digest naming a later purge point) or still
// missing only shows once purges make room. The window consumes the
// event's seqnos silently (its delivered point, which STABLE reports,
// moves on, so stability can make that room) and Poll reports the event
// once, when its end is decided as for a run within the window (the seqno
// after it held, or the highest seqno known reached), so that members
// whose windows or whose knowledge of the purge point differ report the
// same range. To == 0: none.
type pendingLost struct {
	From, To uint64
	// wasActive: the event cut a reassembly under way (From is its first
	// fragment); reportLost's rule for a message begun before the join
	// point needs it.
	wasActive bool
	// skipTo is reassembly.skipTo before the event: what it is back to if
	// a departure unwinds the event (unwindPending).
	skipTo uint64
}

func (r *reassembly) reset() {
	r.active = false
	r.buf = r.buf[:0]
	r.skipTo = 0
	r.reported = 0
	r.lostTo = 0
	r.joinedAt = 0
	r.orphan = 0
}

// Poll delivers, in per-sender order, up to limit seqnos: each held message
// through h.Deliver (a fragmented message once, when its last fragment is
// consumed) and each lost run through h.Lost (a lost run counts as one).
// A limit may end inside a bundle or a fragmented message. Senders are
// served round-robin. It returns how many seqnos and lost runs it consumed.
// Delivered messages stay retained until stability purges them. If h is a
// BatchHandler, runs of whole messages go to DeliverBatch.
func (p *Protocol) Poll(h Handler, limit int) int {
	p.publishOwn()
	bh, _ := h.(BatchHandler)
	n := 0
	for len(p.ready) > 0 && n < limit {
		s := p.ready[0]
		k, more := p.drain(s, h, bh, limit-n)
		n += k
		copy(p.ready, p.ready[1:])
		p.ready[len(p.ready)-1] = nil
		p.ready = p.ready[:len(p.ready)-1]
		if more {
			p.ready = append(p.ready, s)
		} else {
			s.inReady = false
		}
	}
	return n
}

// drain consumes up to max seqnos of s; more is true if it stopped at max.
func (p *Protocol) drain(s *sender, h Handler, bh BatchHandler, max int) (k int, more bool) {
	if s.own && p.cfg.DiscardOwn {
		p.discardOwn(s)
		return 0, false
	}
	w := s.win
	if s.pend.To != 0 {
		w = s.window() // a merge's lost range before the window's start
	}
	if w == nil {
		return 0, false
	}
	for k < max {
		if s.pend.To != 0 {
			c, progress := p.pendingStep(s, h, bh, max-k)
			k += c
			if !progress {
				return k, false
			}
			continue
		}
		lim := min(max-k, deliverRunMax)
		if s.hasCut {
			d := w.Delivered()
			if d >= s.cut {
				if p.lostAtCut(s, h) {
					k++
				}
				return k, false
			}
			lim = int(min(uint64(lim), s.cut-d))
		}
		// The run is delivered from the window's slots in place, and
		// delivered moves past it after: Purge frees only delivered
		// seqnos, so the slots stay as they are meanwhile.
		first, run := w.Peek(lim)
		if c := len(run); c > 0 {
			p.deliverRun(s, h, bh, first, run)
			w.Advance(c)
			k += c
			continue
		}
		if s.hasCut && !cutLostReady(s) {
			return k, false
		}
		if p.lostBeyondFullCut(s, h) {
			k++
			continue
		}
		if r, ok := w.PeekLost(); ok {
			to, ready := p.lostEnd(s, r)
			if !ready {
				return k, false
			}
			end, ready := p.lostChain(s, to)
			if !ready {
				return k, false
			}
			w.SkipLost()
			if s.state != departed && end >= w.Low()+uint64(s.cap) && end < s.target() {
				p.startPending(s, r.From, end)
				continue
			}
			p.reportLost(s, h, r.From, end)
			if s.hasCut && to > w.Delivered() {
				p.skipDeclared(s, to)
			}
			k++
			continue
		}
		return k, false
	}
	return k, true
}

// startPending makes the lost event [from, to] of live sender s, which
// reaches the window's capacity, pending (pendingLost) instead of
// reporting it: it cuts the reassembly under way as reportLost would, and
// the fragments the window holds up to to are dropped (reassembly.skipTo).
func (p *Protocol) startPending(s *sender, from, to uint64) {
	skip := s.reasm.skipTo
	from, was := s.reasm.cutBy(from)
	s.pend = pendingLost{From: from, To: to, wasActive: was, skipTo: skip}
	s.reasm.skipTo = max(s.reasm.skipTo, to)
}

// extendPending makes s's pending lost event go on through to (a lost run
// that continues it; through to lostTo if it reaches the window's
// capacity, as lostEnd).
func (p *Protocol) extendPending(s *sender, to uint64) {
	if to >= s.win.Low()+uint64(s.cap) {
		to = lostBeyondCap(s, to)
	}
	s.pend.To = max(s.pend.To, to)
	s.reasm.skipTo = max(s.reasm.skipTo, s.pend.To)
}

// pendingStep is Poll's step while s has a pending lost event: the
// window consumes its seqnos silently (lost runs, and the held fragments
// of messages it makes undeliverable), a lost run right after it extends
// it, and once the window has consumed it, its end is decided as for a
// run within the window (lostChain: the seqno after it held, the highest
// seqno known, a gap that a live sender's event waits for) and it is
// reported, unless it reaches the capacity again. A departed sender's
// (left after a departure unwound what it could, unwindPending) waits for
// its cut, which decides the rest at once (lostEnd). It returns how many
// seqnos and events it consumed and whether it made progress.
func (p *Protocol) pendingStep(s *sender, h Handler, bh BatchHandler, limit int) (n int, progress bool) {
	w, pd := s.win, &s.pend
	gone := s.state == departed
	if gone && (!s.hasCut || !cutLostReady(s)) {
		return 0, false
	}
	if d := w.Delivered(); d < pd.To {
		if r, ok := w.PeekLost(); ok {
			w.SkipLost()
			p.extendPending(s, r.To)
			return 0, true
		}
		lim := int(min(uint64(min(limit, deliverRunMax)), pd.To-d))
		if first, run := w.Peek(lim); len(run) > 0 { // read in place, as drain does
			c := len(run)
			p.deliverRun(s, h, bh, first, run) // dropped: skipTo
			w.Advance(c)
			return c, true
		}
		return 0, false // not received yet, or no room yet
	}
	to := max(pd.To, w.Delivered())
	if r, ok := w.PeekLost(); ok {
		if !gone {
			w.SkipLost()
			p.extendPending(s, r.To)
			return 0, true
		}
		to, _ = p.lostEnd(s, r) // a departed sender's, cut fixed: decided
		w.SkipLost()
	}
	end := to
	switch edge := w.Low() + uint64(s.cap); {
	case gone:
		end, _ = p.lostChain(s, to)
	case to >= edge:
		if to < s.target() {
			return 0, false // wait for room to see what follows
		}
	default:
		var ready bool
		if end, ready = p.lostChain(s, to); !ready {
			return 0, false
		}
		if end >= edge && end < s.target() {
			p.extendPending(s, end) // it reaches the capacity again
			return 0, true
		}
	}
	from, was := pd.From, pd.wasActive
	*pd = pendingLost{}
	p.emitLost(s, h, from, end, was)
	if s.hasCut && to > w.Delivered() {
		p.skipDeclared(s, to)
	}
	return 1, true
}

// unwindPending undoes, when a view drops s, what its window consumed of
// s's pending lost event, as far as the window still retains it: those
// seqnos are missing again (depart), so that this member fetches them
// from a survivor that holds them or the cut declares them lost, as for
// a member that had not found them lost. What lies at or below the
// window's low stays consumed (every member's window passed it) and
// remains the start of the event, which the cut then ends. It returns
// the window's delivered point before.
func (p *Protocol) unwindPending(s *sender) uint64 {
	w, pd := s.win, &s.pend
	d := w.Delivered()
	target := max(pd.From-1, w.Low())
	if target >= d || w.Rewind(target) != nil {
		target = d
	}
	if target < pd.From {
		s.reasm.skipTo = pd.skipTo
		*pd = pendingLost{}
	} else {
		pd.To = min(pd.To, target)
		s.reasm.skipTo = max(pd.skipTo, pd.To)
	}
	return d
}

// lostBeyondFullCut reports, once, the run departed sender s's cut
// declared lost right after the window's capacity when the window has
// delivered everything it can hold: nothing in the window leads to it (no
// lost run reaches the capacity, lostEnd), and the window cannot take it
// while the cut's stable point keeps its delivered messages (a survivor
// that was behind when the cut was fixed: no STABILITY purges a departed
// sender's window). The run is then consumed (Consumed covers it), and
// the survivor completes the cut as one whose window could hold it.
// Reports whether it reported.
func (p *Protocol) lostBeyondFullCut(s *sender, h Handler) bool {
	w := s.win
	d := w.Delivered()
	if !s.hasCut || d >= s.cut || d < w.Low()+uint64(s.cap) || s.reasm.lostTo > d {
		return false
	}
	to := cutLostThrough(s, d+1)
	if to <= d {
		return false
	}
	p.reportLost(s, h, d+1, to)
	return true
}

// lostEnd decides whether Poll may consume the lost run r of s's window
// now, and up to where it is known lost, so that a run is one event
// whatever the member's window and whenever its pieces became known (two
// members that lose the same seqnos report the same ranges):
//   - a run that reaches the window's capacity goes on up to lostTo (the
//     holder's purge point a MSG_NOT_FOUND or merge gave, marked as purges
//     make room): nothing beyond the capacity is held, so all of it is
//     lost; a live sender's is not decided beyond that point (drain makes
//     it a pending event, pendingLost), a departed sender's goes on
//     through the ranges its cut declared lost that continue it
//     (cutLostThrough, marked as purges make room too) and is reported;
//   - a live sender's run followed by a gap it still wants is not ready:
//     the gap may turn out lost too (a later MSG_NOT_FOUND), and is
//     repaired otherwise, which ends the run (a held seqno);
//   - otherwise (followed by a held seqno, or the run reaches the highest
//     seqno known, or a departed sender's, decided by cutLostReady), it is
//     ready as it is.
//
// The event may go on past the run's end: over the fragmented messages
// the run makes undeliverable and the lost runs after them (lostChain).
func (p *Protocol) lostEnd(s *sender, r ring.Range) (to uint64, ready bool) {
	w := s.win
	if edge := w.Low() + uint64(s.cap); r.To >= edge {
		return lostBeyondCap(s, r.To), true
	}
	if s.state == departed {
		return r.To, true
	}
	if next := r.To + 1; next <= s.target() && !w.Has(next) {
		return r.To, false
	}
	return r.To, true
}

// lostBeyondCap is where a lost run of s that ends at to, at or beyond
// the window's capacity, ends as an event: on up to lostTo (all of it is
// lost: nothing beyond the capacity is held) and, for a departed sender,
// through the ranges its cut declared lost that continue it.
func lostBeyondCap(s *sender, to uint64) uint64 {
	to = max(to, s.lostTo)
	if s.hasCut {
		to = max(to, cutLostThrough(s, to+1))
	}
	return to
}

// lostChain returns where the lost event whose run of s's window ends at
// to (as lostEnd decided) ends, and whether it may be reported now. A
// lost run is one event with the fragmented messages it makes
// undeliverable and the lost runs right after them, whatever fragments of
// those messages this member holds: a member that holds a fragment of a
// lost message reports the same range as one that holds none (168 lost,
// 169 held, 170..225 lost, 168..169 one message, is 168..225, not
// 168..169 then 170..225). From to+1 on, while the window says so:
//   - a held fragment other than the first belongs to a message that began
//     in the run (or before it): the message is lost, the event goes on to
//     its last fragment (not for a message begun at or below the join
//     point: reportLost skips the run with it);
//   - a held first fragment whose message has a fragment marked lost: the
//     message is lost too, the event goes on to its last fragment; one
//     whose fragments are all held ends the event (it is delivered); one
//     with a gap and no lost fragment is undecided: a live sender's event
//     is not ready (the gap is repaired or turns out lost), a departed
//     sender's ends there;
//   - a lost run continues the event (through to lostTo, or the ranges
//     the cut declared, if it reaches the window's capacity, as lostEnd);
//   - a gap ends the event, not ready for a live sender (as lostEnd);
//   - anything else (a whole message, the highest seqno known, the
//     window's capacity, a departed sender's cut, a message the cut ends
//     inside, reported by lostAtCut) ends it.
//
// The window consumes the pieces after the first as usual: the held
// fragments are dropped (reassembly.skipTo) and the later lost runs were
// reported already (reassembly.reported), so they report nothing.
func (p *Protocol) lostChain(s *sender, to uint64) (uint64, bool) {
	w := s.win
	live := s.state != departed
	for {
		edge := w.Low() + uint64(s.cap)
		if to >= edge || (s.hasCut && to >= s.cut) {
			return to, true
		}
		q := to + 1
		if q > s.target() {
			return to, true
		}
		m, held := w.Get(q)
		if !held {
			lr, lost := w.LostRun(q)
			if !lost {
				return to, !live // a gap
			}
			if to = lr.To; to >= edge {
				return lostBeyondCap(s, to), true
			}
			continue
		}
		if m.fc == 0 {
			return to, true
		}
		first := q - uint64(m.fi)
		last := first + uint64(m.fc) - 1
		if m.fi != 0 {
			if first <= s.reasm.joinedAt {
				return to, true
			}
			to = last
			if s.hasCut {
				to = min(to, s.cut)
			}
			continue
		}
		if last > edge || (s.hasCut && last > s.cut) {
			return to, true
		}
		switch fragsFate(w, q+1, last) {
		case fragsHeld:
			return to, true
		case fragsUndecided:
			return to, !live
		}
		to = last
	}
}

const (
	fragsHeld      = iota // every fragment is held
	fragsLost             // a fragment is marked lost
	fragsUndecided        // a fragment is missing, none is lost
)

// fragsFate tells whether w holds every seqno in [from, to] (the fragments
// of a message after its first), has one of them marked lost, or neither.
func fragsFate(w *ring.Window[msg], from, to uint64) int {
	fate := fragsHeld
	for q := from; q <= to; q++ {
		if w.Has(q) {
			continue
		}
		if _, lost := w.LostRun(q); lost {
			return fragsLost
		}
		fate = fragsUndecided
	}
	return fate
}

// deliverRun delivers ms (seqnos first..): runs of whole messages
// directly (one DeliverBatch per run for a BatchHandler), fragments and a
// whole message that interrupts a reassembly through deliver.
func (p *Protocol) deliverRun(s *sender, h Handler, bh BatchHandler, first uint64, ms []msg) {
	for i := 0; i < len(ms); {
		if ms[i].fc != 0 || s.reasm.active {
			p.deliver(s, h, first+uint64(i), ms[i])
			i++
			continue
		}
		j := i + 1
		for j < len(ms) && ms[j].fc == 0 {
			j++
		}
		if bh != nil {
			var rb runBytes
			ps := p.pscr[:0]
			for k := i; k < j; k++ {
				ps = append(ps, rb.payload(&ms[k]))
			}
			p.pscr = ps
			bh.DeliverBatch(s.m, first+uint64(i), ps)
		} else {
			deliverWhole(h, s.m, first+uint64(i), ms[i:j])
		}
		p.stats.Delivered += uint64(j - i)
		i = j
	}
}

// deliverWhole hands whole messages ms (seqnos first..) to h.Deliver: a
// loop of its own, so that little state lives across each call.
func deliverWhole(h Handler, sender digest.Member, first uint64, ms []msg) {
	var rb runBytes
	for i := range ms {
		h.Deliver(sender, first+uint64(i), rb.payload(&ms[i]))
	}
}

// runBytes hands out the payloads of a run's messages, which mostly share
// their datagram: it looks a datagram's bytes up (msg.ref.buf.B, two
// dependent loads) once, not once a message. Payloads are capped as
// msg.payload's.
type runBytes struct {
	ref *dref
	b   []byte
}

func (r *runBytes) payload(m *msg) []byte {
	if m.ref != r.ref {
		r.ref, r.b = m.ref, m.ref.buf.B
	}
	return r.b[m.off : m.off+m.n : m.off+m.n]
}

func (p *Protocol) deliver(s *sender, h Handler, seq uint64, m msg) {
	r := &s.reasm
	if m.fc == 0 {
		if r.active { // a whole message inside a fragmented one: the sender broke it
			p.stats.Drops.Reassembly += uint64(r.next)
			r.active = false
		}
		r.orphan = 0
		p.stats.Delivered++
		h.Deliver(s.m, seq, m.payload())
		return
	}
	first := seq - uint64(m.fi)
	last := first + uint64(m.fc) - 1
	if seq <= r.skipTo {
		return // part of a message already reported lost
	}
	if first <= r.joinedAt && !r.active {
		// The tail of a message that began before this member joined
		// (the join digest ends inside it): skipped, never reported.
		return
	}
	if m.fi == 0 {
		if r.active {
			p.stats.Drops.Reassembly += uint64(r.next)
		}
		r.active, r.first, r.next, r.count, r.buf = true, seq, 0, m.fc, r.buf[:0]
	}
	if !r.active || r.first != first || r.next != m.fi || r.count != m.fc {
		// Orphan: the message's start was lost. Report the whole message.
		r.active = false
		p.reportLost(s, h, first, last)
		return
	}
	if len(r.buf)+int(m.n) > p.cfg.MaxMessage {
		r.active = false
		p.stats.Drops.Reassembly++
		p.reportLost(s, h, first, last)
		return
	}
	r.buf = append(r.buf, m.payload()...)
	r.next++
	if r.next == r.count {
		r.active = false
		p.stats.Delivered++
		h.Deliver(s.m, first, r.buf)
	}
}

// reportLost reports [from, to] lost, widened to whole fragmented messages
// and without repeating what was already reported.
func (p *Protocol) reportLost(s *sender, h Handler, from, to uint64) {
	from, wasActive := s.reasm.cutBy(from)
	p.emitLost(s, h, from, to, wasActive)
}

// cutBy ends, for a lost event from from on, the reassembly under way and
// an orphan point: the event takes their messages in (from widened down
// to their first fragment). wasActive tells whether a reassembly was
// under way.
func (r *reassembly) cutBy(from uint64) (_ uint64, wasActive bool) {
	wasActive = r.active
	if wasActive { // the lost run cuts the message being reassembled
		from = min(from, r.first)
		r.active = false
	}
	if r.orphan != 0 { // the run follows a point inside a message never delivered
		from = min(from, r.orphan)
		r.orphan = 0
	}
	return from, wasActive
}

// emitLost reports [from, to] (from already widened by cutBy), widened to
// the end of the fragmented message to lies inside and without repeating
// what was already reported.
func (p *Protocol) emitLost(s *sender, h Handler, from, to uint64, wasActive bool) {
	r := &s.reasm
	if s.win != nil {
		if m, ok := s.win.Get(to + 1); ok && m.fc != 0 && m.fi != 0 {
			first := to + 1 - uint64(m.fi)
			last := first + uint64(m.fc) - 1
			if first <= r.joinedAt && !wasActive {
				// The run lies inside a message that began before this
				// member joined (it starts above the join point, the
				// message at or below it): skipped with the message.
				return
			}
			to = last
		}
	}
	if s.hasCut {
		to = min(to, s.cut) // nothing beyond a departed sender's cut
	}
	r.skipTo = max(r.skipTo, to)
	from = max(from, r.reported+1)
	if from > to {
		return
	}
	r.reported = to
	r.lostTo = to
	for len(s.bounds) > 0 && s.bounds[0] < to {
		if b := s.bounds[0]; b >= from {
			p.lostEvent(s, h, from, b)
			from = b + 1
		}
		s.bounds = s.bounds[1:]
	}
	p.lostEvent(s, h, from, to)
}

// lostEvent tells h (and Config.OnLost) that s's seqnos [from, to] are
// lost, and counts it.
func (p *Protocol) lostEvent(s *sender, h Handler, from, to uint64) {
	p.stats.LostRanges++
	p.stats.LostMessages += to - from + 1
	if p.cfg.OnLost != nil {
		p.cfg.OnLost(s.m, from, to)
	}
	h.Lost(s.m, from, to)
}

// discardOwn consumes every held own message without delivering it
// (Config.DiscardOwn). Own messages are never lost nor cut, and fragments
// need no reassembly when nothing is delivered, so the window's delivered
// point simply moves to its received point.
func (p *Protocol) discardOwn(s *sender) {
	for {
		_, n := s.win.Consume(1 << 20)
		if n == 0 {
			return
		}
		p.stats.OwnDiscarded += uint64(n)
	}
}
