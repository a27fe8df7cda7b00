package gms

import (
	"cmp"
	"slices"
	"time"

	"github.com/nakcast/nakcast/digest"
)

// cutState is the coordinator's side of fixing a departed sender's cut
// (design.md, "Crashed senders").
type cutState struct {
	dep      departure
	reports  map[digest.Member]cutReport
	fixed    bool
	closed   bool
	cut      uint64
	lost     []Range
	stable   uint64 // what every survivor that reported a window had delivered
	acks     map[digest.Member]bool
	resendAt time.Duration
	// fix numbers the latest fix (numberFix: one made anew at the same
	// cut with the same lost ranges, or with its stable point raised,
	// keeps it). A survivor's CutAck names the fix it acknowledges and
	// counts only for that one: one that missed a fix made anew at
	// another cut or with more lost (recut) still acknowledges the
	// earlier one (resent, or late), and a close taken on it would close
	// its window at the earlier cut, the seqnos up to the new one
	// neither delivered nor reported lost. The close names it too.
	fix uint64
	// leaveBy: a graceful leaver repairs what it holds only until its
	// leave times out (LeaveTimeout after it left, which was before we
	// learnt of its leave): from leaveBy, LeaveTimeout after we did, the
	// cut takes it as gone (leaverGone) and is fixed again if its fix
	// counted on the leaver's repairs (leaverLimited), so that a leaver
	// that could not repair (it purged after announcing its purge point,
	// or was cut off from the survivors) does not leave them waiting for
	// ever.
	leaveBy       time.Duration
	leaverGone    bool
	leaverLimited bool
	// closedAt: a closed cut is kept a while (pruneCuts), to answer a
	// survivor that missed the close (its CutAck or report gets the close
	// again) and a leaver that missed its LeaveRsp (its LEAVE gets it
	// again).
	closedAt time.Duration
}

type cutReport struct {
	ok bool
	// closed: no window, closed after an earlier cut of the sender at
	// delivered (= received); such a member can repair nothing.
	closed              bool
	delivered, received uint64
	gaps                []Range
	// declared: the report covers a fix applied here that declared
	// ranges lost (they are among the gaps, and final at this member).
	declared bool
}

// reportMsg is the CUT_REPORT of r for sender: a delivered, b received, c
// 1 if this member holds a window (2 if it closed one after a cut), id 1
// if r covers an applied fix that declared ranges lost, the gaps as ranges.
func (g *GMS) reportMsg(sender digest.Member, r cutReport) *msg {
	rep := &msg{typ: typeCutReport, view: g.view.ID, member: sender, a: r.delivered, b: r.received}
	switch {
	case r.ok:
		rep.c = 1
	case r.closed:
		rep.c = 2
	}
	if r.declared {
		rep.id = 1
	}
	return rep.withRanges(r.gaps)
}

// memberCut is a survivor's side of a cut, from the first fix it applies
// until it closes the window (the entry is then deleted: a later fix for
// a sender it holds no window of is acknowledged at once, see applyCut).
type memberCut struct {
	coord    Peer
	fix      uint64 // the number of the fix applied (cutState.fix), named by the CutAck
	cut      uint64
	lost     []Range // declared lost with the cut (kept to report them again)
	acked    bool
	resendAt time.Duration
	// progress, progressAt: the delivered point this member last sent
	// the coordinator while its window was blocked (reportCutProgress),
	// and when it may send the same point again.
	progress   uint64
	progressAt time.Duration
}

// cutPender is implemented by a Protocol whose window may reach the cut
// with something still to report to the application (NakackProtocol: a
// fragmented message the cut ends inside is reported lost by the next
// Poll). CloseWindow would drop it, so a survivor acknowledges only once
// CutPending is false.
type cutPender interface {
	CutPending(sender digest.Member) bool
}

// cutConsumer is implemented by a Protocol that can report a departed
// sender's stream consumed further than its window's delivered point
// (NakackProtocol: a run the cut declared lost beyond the window's
// capacity, reported to the application while the window, full of
// messages the cut's stable point keeps, cannot take it). Consumed up to
// the cut, the survivor's part is complete.
type cutConsumer interface {
	Consumed(sender digest.Member) uint64
}

// cutBlocker is implemented by a Protocol whose departed sender's window
// can stop short of the cut for want of room (NakackProtocol: received at
// the window's capacity, its low held by the cut's stable point). Such a
// survivor reports how far it delivered to the coordinator, which raises
// the stable point once every survivor delivered past it
// (reportCutProgress, raiseCutStable).
type cutBlocker interface {
	CutBlocked(sender digest.Member) bool
}

// openWin is a departed sender whose window this member has not closed.
// If no cut for it is under way with the current coordinator by nudgeAt
// (the coordinator that excluded it died, and the one that took over never
// installed that view), this member reports its state of the sender to the
// current coordinator unasked, which starts (or resends) the cut.
type openWin struct {
	peer    Peer
	nudgeAt time.Duration
	// graceful: the sender announced a graceful leave (LEAVE, with its
	// highest seqno): whoever cuts it cuts it as a leaver (departure).
	graceful     bool
	highest, low uint64
}

// departure returns the departure that cuts ow's sender m.
func (ow *openWin) departure(m digest.Member) departure {
	return departure{member: m, peer: ow.peer, highest: ow.highest, low: ow.low, graceful: ow.graceful}
}

// startCut asks every survivor for its state of the departed sender.
func (g *GMS) startCut(d departure, now time.Duration) {
	if _, ok := g.cuts[d.member]; ok {
		return
	}
	c := &cutState{dep: d, reports: make(map[digest.Member]cutReport), acks: make(map[digest.Member]bool)}
	if d.graceful {
		c.leaveBy = now + g.cfg.LeaveTimeout
	}
	g.cuts[d.member] = c
	c.reports[g.self.Member] = g.localReport(d.member)
	c.resendAt = now + g.cfg.ViewAckTimeout
	g.multicast(&msg{typ: typeCutReq, view: g.view.ID, member: d.member})
	g.checkCut(c, now)
}

// refixCuts runs again, as coordinator of the view just installed, every
// cut it fixed that has not closed, if that view dropped a member of the
// previous one (prev) or is a merge view: a survivor that left may have
// held the only copy of seqnos the others still fetch (the fix, made from
// its report, did not declare them lost), and members merged in may hold
// what nobody here does, so the fix must be made anew from the reports of
// the members there are now. Survivors report a fix they applied as
// received up to its cut with its lost ranges missing, so the new fix is
// at least as high and declares at least as much lost (what nobody holds
// now); one that already acknowledged acknowledges again.
func (g *GMS) refixCuts(prev View, merge bool, now time.Duration) {
	if g.view.Coord().Member != g.self.Member {
		return
	}
	shrank := false
	for _, p := range prev.Members {
		shrank = shrank || !g.view.Contains(p.Member)
	}
	if !shrank && !merge {
		return
	}
	for _, sender := range sortedKeys(g.cuts) {
		c := g.cuts[sender]
		if c == nil || c.closed || !c.fixed {
			continue // not fixed: the reports of the members there are now are still awaited
		}
		g.log.Info("gms: cut fixed again for the members there are now", "sender", sender, "view", g.view.ID)
		g.recut(c, nil, now)
	}
}

// recut asks the members of the current view for their state of c's
// sender again and fixes the cut anew from their reports (reopening it if
// it had closed). reports, if not nil, holds reports already in hand (the
// one that made the coordinator reopen the cut); they count as received.
func (g *GMS) recut(c *cutState, reports map[digest.Member]cutReport, now time.Duration) {
	sender := c.dep.member
	c.fixed, c.closed = false, false
	if reports == nil {
		reports = make(map[digest.Member]cutReport, 1)
	}
	reports[g.self.Member] = g.localReport(sender)
	c.reports = reports
	clear(c.acks)
	c.resendAt = now + g.cfg.ViewAckTimeout
	g.multicast(&msg{typ: typeCutReq, view: g.view.ID, member: sender})
	g.checkCut(c, now)
}

// localReport is this member's state of sender for a cut. Its gaps are
// what it cannot repair: the missing ranges above delivered and the ranges
// it delivered as lost (a MSG_NOT_FOUND, an earlier cut), so that a range
// one survivor was told is lost and another still lacks is declared lost
// for the latter instead of awaited from the former. If a cut fixed by an
// earlier coordinator is open here, the report covers it: received is at
// least that cut and the ranges it declared lost count as missing (they
// are, here and everywhere), so that a coordinator that resumes the cut
// fixes one at least as high and declares those ranges lost again for
// survivors that never got the first fix. Without a window, the report
// gives the point where an earlier cut closed it, if one did.
func (g *GMS) localReport(sender digest.Member) cutReport {
	dl, rc, gaps, ok := g.proto.SenderState(sender, g.gaps[:0])
	if ok {
		gaps = g.proto.Unheld(sender, gaps)
	}
	g.gaps = gaps[:0]
	r := cutReport{ok: ok, delivered: dl, received: rc, gaps: normRanges(gaps)}
	if !ok {
		if at, closed := g.proto.ClosedWindow(sender); closed {
			r.closed, r.delivered, r.received = true, at, at
		}
	}
	if mc := g.mcuts[sender]; ok && mc != nil {
		r.declared = len(mc.lost) > 0
		if r.received < mc.cut {
			r.gaps = append(r.gaps, Range{From: r.received + 1, To: mc.cut})
			r.received = mc.cut
		}
		r.gaps = normRanges(append(r.gaps, mc.lost...))
	}
	return r
}

// onCutReq answers the coordinator's request for this member's state of a
// departed sender, only once this member has installed a view without that
// sender (the view that dropped it, or a later one): until then the
// protocol still takes the sender's data as live, so a report taken now
// could be followed by data the coordinator never hears of (delivered here
// while the cut declares it lost). Such a request is ignored; the
// coordinator resends it to every member that has not reported, and the
// view to every member that has not acknowledged it.
func (g *GMS) onCutReq(m *msg, now time.Duration) {
	if (g.status != StatusMember && g.status != StatusLeaving) || m.sender != g.view.Coord().Member {
		return
	}
	if g.view.Contains(m.member) {
		g.stats.CutReqsEarly++
		return
	}
	g.send(g.view.Coord(), g.reportMsg(m.member, g.localReport(m.member)))
}

func (g *GMS) onCutReport(m *msg, now time.Duration) {
	c, ok := g.cuts[m.member]
	if !g.view.Contains(m.sender) {
		return
	}
	if !ok && m.c != 2 && g.IsCoordinator() && g.coord.vc == nil && !g.view.Contains(m.member) {
		// Unasked: a survivor still has this departed sender's window open
		// and we never cut it (we never installed the view that dropped
		// it). Cut it now.
		g.stats.CutsResumed++
		g.log.Info("gms: cutting a departed sender a member still holds", "sender", m.member, "from", m.sender)
		d := departure{member: m.member, peer: Peer{Member: m.member}}
		if ow := g.open[m.member]; ow != nil {
			d = ow.departure(m.member)
		}
		g.startCut(d, now)
		c, ok = g.cuts[m.member]
	}
	if ok && c.closed && m.c == 1 && !c.acks[m.sender] && g.IsCoordinator() && g.coord.vc == nil {
		// It holds a window and never acknowledged: it was not in the view
		// the cut closed in (away in another partition and merged back),
		// so it may lack what the others were repaired, and a close would
		// not close its window (it has no cut to close). Cut again with
		// everyone there is now.
		g.stats.CutsResumed++
		g.log.Info("gms: closed cut reopened for a member that never acknowledged it", "sender", m.member, "from", m.sender)
		g.recut(c, map[digest.Member]cutReport{
			m.sender: {ok: true, delivered: m.a, received: m.b, gaps: m.ranges, declared: m.id == 1},
		}, now)
		return
	}
	if ok && c.fixed && !c.acks[m.sender] {
		if m.c == 1 && g.onCutProgress(m.sender, m.member, m.a, now) {
			return // the fix, with its stable point raised, was multicast
		}
		if p, in := g.view.Peer(m.sender); in && m.sender != g.self.Member {
			g.send(p, cutFix(c, g.view.ID))
		}
		return
	}
	if ok && c.closed {
		// It acknowledged but still reports: it missed the close (its
		// window is still open, tickCuts).
		if p, in := g.view.Peer(m.sender); in && m.sender != g.self.Member {
			g.send(p, cutClose(c, g.view.ID))
		}
		return
	}
	if !ok || c.fixed {
		return
	}
	c.reports[m.sender] = cutReport{ok: m.c == 1, closed: m.c == 2, delivered: m.a, received: m.b, gaps: m.ranges, declared: m.id == 1}
	g.checkCut(c, now)
}

// checkCut fixes the cut once every member of the current view reported,
// and closes it once every member acknowledged.
func (g *GMS) checkCut(c *cutState, now time.Duration) {
	if !c.fixed {
		for _, p := range g.view.Members {
			if _, ok := c.reports[p.Member]; !ok && !g.fd.suspected[p.Member] {
				return
			}
		}
		g.fixCut(c, now)
	}
	if c.closed {
		return
	}
	for _, p := range g.view.Members {
		if !c.acks[p.Member] && !g.fd.suspected[p.Member] {
			return
		}
	}
	c.closed = true
	c.closedAt = now
	g.stats.CutsClosed++
	g.multicast(cutClose(c, g.view.ID))
	g.closeMemberCut(c.dep.member, now)
	g.sendLeaveRsp(c)
	g.pruneCuts(now)
}

// sendLeaveRsp tells c's departed sender, if it left gracefully, that its
// leave is complete.
func (g *GMS) sendLeaveRsp(c *cutState) {
	if c.dep.graceful {
		g.send(c.dep.peer, &msg{typ: typeLeave, kind: 1})
	}
}

// reincarnated reports whether a later incarnation of m is a member of
// our view: m's incarnation has ended (it left and joined again), so it
// repairs nothing any more, even if it left gracefully.
func (g *GMS) reincarnated(m digest.Member) bool {
	for _, p := range g.view.Members {
		if p.Member.ID == m.ID && p.Member.Inc > m.Inc {
			return true
		}
	}
	return false
}

// fixCut picks the cut (the highest seqno any survivor received, at
// least a leaver's announced highest) and the ranges no survivor holds.
// Where another survivor closed its window does not raise the cut: that
// may be another partition's cut of the same sender, and the survivors of
// the view this cut belongs to must close at the same point. A leaver
// repairs all it holds until its cut closes, so of it only what no
// survivor holds at or below its announced purge point is declared lost
// (a forced purge; what stability purged every survivor delivered). Not
// so when the leaver is gone: a later incarnation of it is in the view
// (reincarnated), a survivor closed its window after an earlier cut
// (which closed, so the leaver got its LeaveRsp), or its leave has timed
// out (leaverGone). Nor when a
// survivor reports a fix that declared ranges lost (a coordinator that did
// not know of the leave cut the sender as crashed): they are final at that
// survivor, so they are declared again for everyone (they are in every
// survivor's gaps: nobody held them).
func (g *GMS) fixCut(c *cutState, now time.Duration) {
	c.fixed = true
	prevCut, prevLost := c.cut, c.lost
	cut := c.dep.highest
	minD := ^uint64(0)
	refix, gone := false, c.leaverGone || g.reincarnated(c.dep.member)
	for _, p := range g.view.Members {
		r := c.reports[p.Member]
		if r.ok {
			cut = max(cut, r.received)
			minD = min(minD, r.delivered)
			refix = refix || r.declared
		}
		if r.closed {
			gone = true
		}
	}
	c.cut, c.stable = cut, min(cut, minD)
	upto := cut
	if c.dep.graceful && !refix && !gone {
		upto = min(cut, c.dep.low) // a leaver repairs all it has not purged
	}
	c.leaverLimited = upto < cut
	if minD < upto {
		// Lost = what every reporter misses in (minD, upto]. A reporter
		// misses its gaps and everything above its received.
		lost := []Range{{From: minD + 1, To: upto}}
		for _, p := range g.view.Members {
			r := c.reports[p.Member]
			if !r.ok {
				continue
			}
			miss := slices.Clone(r.gaps)
			if r.received < cut {
				miss = append(miss, Range{From: r.received + 1, To: cut})
			}
			lost = intersectRanges(lost, miss)
		}
		c.lost = lost
	}
	g.numberFix(c, prevCut, prevLost)
	g.log.Info("gms: cut fixed", "sender", c.dep.member, "cut", c.cut, "stable", c.stable, "lost", c.lost)
	g.multicast(cutFix(c, g.view.ID))
	g.applyCut(g.self, c.dep.member, c.fix, c.cut, c.stable, c.lost, now)
}

// numberFix gives c's fix just made a new number unless it has one and
// the fix before (at prevCut, declaring prevLost) asked the same: the
// same cut and lost ranges. A survivor that acknowledged that one has
// delivered everything up to the cut with those ranges lost, so its
// acknowledgement, counted since the cut was made anew, stands. With a
// new number, acknowledgements of the earlier fix count for nothing.
func (g *GMS) numberFix(c *cutState, prevCut uint64, prevLost []Range) {
	if c.fix != 0 && c.cut == prevCut && slices.Equal(c.lost, prevLost) {
		return
	}
	g.fixes++
	c.fix = g.fixes
	clear(c.acks)
}

// cutFix is c's fix (CUT kind 0): id its number, a the cut, b its stable
// point, the ranges declared lost.
func cutFix(c *cutState, view digest.ViewID) *msg {
	fix := &msg{typ: typeCut, kind: 0, view: view, member: c.dep.member, id: c.fix, a: c.cut, b: c.stable}
	return fix.withRanges(c.lost)
}

// cutClose is the close of c's fix (CUT kind 1): id the fix's number.
func cutClose(c *cutState, view digest.ViewID) *msg {
	return &msg{typ: typeCut, kind: 1, view: view, member: c.dep.member, id: c.fix}
}

// intersectRanges returns the seqnos in both a and b, as sorted disjoint
// ranges. Inputs need not be sorted.
func intersectRanges(a, b []Range) []Range {
	a, b = normRanges(a), normRanges(b)
	var out []Range
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		lo, hi := max(a[i].From, b[j].From), min(a[i].To, b[j].To)
		if lo <= hi {
			out = append(out, Range{From: lo, To: hi})
		}
		if a[i].To < b[j].To {
			i++
		} else {
			j++
		}
	}
	return out
}

// normRanges sorts and coalesces rs (a copy).
func normRanges(rs []Range) []Range {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(x, y Range) int {
		switch {
		case x.From < y.From:
			return -1
		case x.From > y.From:
			return 1
		}
		return 0
	})
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 && r.From <= out[n-1].To+1 {
			out[n-1].To = max(out[n-1].To, r.To)
			continue
		}
		out = append(out, r)
	}
	return out
}

// applyCut is a survivor's side: the protocol completes the window to the
// cut, and we acknowledge once it holds everything up to it.
//
// A member that holds no window of sender and has none to close (it closed
// it already, or never had one: it joined after sender left) has nothing
// to complete and is acknowledged at once, keeping nothing: a coordinator
// that resumes a cut this member closed, or a joiner that is asked about a
// sender it never saw, must still acknowledge for the cut to close.
func (g *GMS) applyCut(coord Peer, sender digest.Member, fix, cut, stable uint64, lost []Range, now time.Duration) {
	mc, ok := g.mcuts[sender]
	if !ok && g.open[sender] == nil {
		if _, _, gaps, held := g.proto.SenderState(sender, g.gaps[:0]); !held {
			g.gaps = gaps[:0]
			g.ackCut(coord, sender, fix, now)
			return
		}
	}
	switch {
	case !ok:
		mc = &memberCut{coord: coord, cut: cut, lost: slices.Clone(lost)}
		g.mcuts[sender] = mc
		g.proto.CompleteCut(sender, cut, lost, now)
	case cut != mc.cut || !slices.Equal(normRanges(lost), normRanges(mc.lost)):
		// A coordinator that took over fixed the cut again (at least as
		// high, declaring at least what the first fix declared).
		mc.cut, mc.lost = cut, normRanges(append(mc.lost, lost...))
		g.proto.CompleteCut(sender, cut, lost, now)
	}
	if stable > 0 {
		g.proto.PurgeCut(sender, min(stable, cut), now)
	}
	mc.coord, mc.fix = coord, fix
	mc.acked = false
	g.checkMemberCut(sender, mc, now)
}

func (g *GMS) checkMemberCut(sender digest.Member, mc *memberCut, now time.Duration) {
	if mc.acked && now < mc.resendAt {
		return
	}
	dl, rc, gaps, ok := g.proto.SenderState(sender, g.gaps[:0])
	g.gaps = gaps[:0]
	// Complete once everything up to the cut is held or lost and delivered
	// (closing the window drops what was not delivered).
	complete := !ok || (rc >= mc.cut && dl >= mc.cut)
	for _, r := range gaps {
		if r.From <= mc.cut {
			complete = false
		}
	}
	if cc, is := g.proto.(cutConsumer); ok && is && !complete && cc.Consumed(sender) >= mc.cut {
		complete = true // all of it delivered or reported lost
	}
	if cp, ok := g.proto.(cutPender); ok && complete && cp.CutPending(sender) {
		complete = false // Poll has yet to report the message the cut ends inside
	}
	if !complete {
		g.reportCutProgress(sender, mc, now)
		return
	}
	mc.acked = true
	mc.resendAt = now + 2*g.cfg.ViewAckTimeout
	g.ackCut(mc.coord, sender, mc.fix, now)
}

// reportCutProgress sends the coordinator of sender's cut this member's
// report (delivered point included) while its window is blocked below the
// cut (cutBlocker): full to its capacity above the cut's stable point,
// which no STABILITY moves for a departed sender. The stable point is what
// every survivor had delivered when the cut was fixed; a survivor that was
// behind then keeps it low although it has since delivered as far as the
// others, and a window of one that was ahead, or that another survivor
// (a joiner whose window started higher) can fill beyond its capacity,
// cannot take the rest up to the cut until the stable point rises
// (raiseCutStable). Sent again when delivered moves, and otherwise every
// ViewAckTimeout (a report or the raised fix may be lost).
func (g *GMS) reportCutProgress(sender digest.Member, mc *memberCut, now time.Duration) {
	cb, ok := g.proto.(cutBlocker)
	if !ok || !cb.CutBlocked(sender) {
		return
	}
	r := g.localReport(sender)
	if !r.ok || (r.delivered <= mc.progress && now < mc.progressAt) {
		return
	}
	mc.progress, mc.progressAt = r.delivered, now+g.cfg.ViewAckTimeout
	if mc.coord.Member == g.self.Member {
		g.onCutProgress(g.self.Member, sender, r.delivered, now)
		return
	}
	g.send(mc.coord, g.reportMsg(sender, r))
}

// onCutProgress is the coordinator's side of a report from a survivor
// that has not acknowledged sender's fixed cut: it delivered up to
// delivered. It returns whether the cut's stable point rose (the fix was
// multicast again with it).
func (g *GMS) onCutProgress(from, sender digest.Member, delivered uint64, now time.Duration) bool {
	c, ok := g.cuts[sender]
	if !ok || !c.fixed || c.closed || c.acks[from] || !g.IsCoordinator() {
		return false
	}
	r, ok := c.reports[from]
	if !ok || !r.ok {
		return false // no window at the fix: it does not count for the stable point
	}
	if delivered > r.delivered {
		r.delivered = delivered
		c.reports[from] = r
	}
	return g.raiseCutStable(c, now)
}

// raiseCutStable raises c's stable point (fixCut: what every survivor that
// reported a window had delivered) to what they have delivered now, as
// far as their reports tell: the latest delivered point of each, or the
// cut for one that acknowledged (it holds or was told everything up to
// the cut and asks for nothing more). A member of the view that did not
// report, and is not suspected, keeps it where it is. If it rose, the fix
// is multicast again with it: survivors purge their windows of the
// departed sender up to it (PurgeCut) and so make room for the rest up to
// the cut; nobody asks for what lies at or below it again, since every
// survivor delivered it. The cut and its lost ranges do not change.
func (g *GMS) raiseCutStable(c *cutState, now time.Duration) bool {
	stable := c.cut
	for _, p := range g.view.Members {
		if c.acks[p.Member] {
			continue
		}
		r, ok := c.reports[p.Member]
		switch {
		case !ok && g.fd.suspected[p.Member]:
			continue
		case !ok:
			return false
		case !r.ok:
			continue // no window: it holds and needs nothing of the sender
		}
		stable = min(stable, r.delivered)
	}
	if stable <= c.stable {
		return false
	}
	c.stable = stable
	g.log.Info("gms: cut's stable point raised", "sender", c.dep.member, "cut", c.cut, "stable", c.stable)
	g.multicast(cutFix(c, g.view.ID))
	g.applyCut(g.self, c.dep.member, c.fix, c.cut, c.stable, c.lost, now)
	return true
}

// ackCut acknowledges coord's fix number fix of sender's cut to coord (to
// ourselves when we fixed it).
func (g *GMS) ackCut(coord Peer, sender digest.Member, fix uint64, now time.Duration) {
	if coord.Member == g.self.Member {
		g.onCutAckFrom(g.self.Member, sender, fix, now)
		return
	}
	g.send(coord, &msg{typ: typeCutAck, view: g.view.ID, member: sender, id: fix})
}

func (g *GMS) onCut(m *msg, now time.Duration) {
	if g.status != StatusMember && g.status != StatusLeaving {
		return
	}
	coord, ok := g.view.Peer(m.sender)
	if !ok || g.view.Contains(m.member) {
		return // never cut a member of our view (a stale cut after a merge)
	}
	switch m.kind {
	case 0:
		// A fix counts only from our view's coordinator: a member of our
		// view that split away and formed a view of its own cuts the same
		// sender there, at another point, and its multicast fix reaches
		// us once the partition heals. A coordinator that takes over
		// sends its fix again once we install its view (tickCuts).
		if coord.Member != g.view.Coord().Member {
			g.stats.Refused++
			return
		}
		// And only for our view: the coordinator fixes a cut from the
		// reports of its view's members, so a member it has dropped (a
		// leaver still waiting for its LeaveRsp, a member it excluded) was
		// not asked, and the fix may declare lost what that member
		// delivered. A member of a newer view that has not installed it
		// yet gets the fix again (tickCuts) once it has.
		if m.view != g.view.ID {
			g.stats.Refused++
			return
		}
		g.applyCut(coord, m.member, m.id, m.a, m.b, m.ranges, now)
	case 1:
		// A close counts only from the coordinator whose fix we applied,
		// for that fix, once we acknowledged it: closing the window
		// earlier, or after an earlier fix than the one that closed,
		// would drop what lies below the cut undelivered and unreported.
		if mc := g.mcuts[m.member]; mc == nil || mc.coord.Member != m.sender || mc.fix != m.id || !mc.acked {
			return
		}
		g.closeMemberCut(m.member, now)
	}
}

// closeMemberCut closes sender's window and forgets its cut: a repeat of
// the close finds nothing, a repeat of the fix (a coordinator that took
// over and resumed the cut) is acknowledged at once (applyCut).
func (g *GMS) closeMemberCut(sender digest.Member, now time.Duration) {
	if _, ok := g.mcuts[sender]; !ok {
		return
	}
	g.proto.CloseWindow(sender, now)
	delete(g.open, sender)
	delete(g.mcuts, sender)
}

func (g *GMS) onCutAck(m *msg, now time.Duration) {
	if g.view.Contains(m.sender) {
		g.onCutAckFrom(m.sender, m.member, m.id, now)
	}
}

// onCutAckFrom counts from's acknowledgement of fix number fix of
// sender's cut (while the cut is being made anew too: numberFix keeps it
// if the new fix asks the same). One of another fix (an earlier one,
// resent or late, from a survivor that missed the latest) counts for
// nothing: the survivor gets the latest fix again.
func (g *GMS) onCutAckFrom(from, sender digest.Member, fix uint64, now time.Duration) {
	c, ok := g.cuts[sender]
	if !ok || c.fix == 0 {
		return
	}
	p, in := g.view.Peer(from)
	in = in && from != g.self.Member
	switch {
	case fix != c.fix:
		if in && c.fixed {
			g.send(p, cutFix(c, g.view.ID))
		}
		return
	case c.closed:
		if in {
			g.send(p, cutClose(c, g.view.ID))
		}
		return
	}
	c.acks[from] = true
	g.checkCut(c, now)
}

// tickCuts resends cut requests and fixes to silent survivors (coordinator)
// and re-checks and re-acknowledges pending cuts (survivor).
func (g *GMS) tickCuts(now time.Duration) {
	g.pruneCuts(now)
	for _, sender := range sortedKeys(g.mcuts) {
		if mc := g.mcuts[sender]; mc != nil {
			g.checkMemberCut(sender, mc, now)
		}
	}
	coord := g.view.Coord()
	for _, sender := range sortedKeys(g.open) {
		ow := g.open[sender]
		if ow == nil || now < ow.nudgeAt || coord.Member == g.self.Member {
			continue
		}
		ow.nudgeAt = now + g.cfg.ViewChangeTimeout
		if mc := g.mcuts[sender]; mc != nil && mc.coord.Member == coord.Member && !mc.acked {
			continue // the current coordinator is cutting it
		}
		// No cut of the current coordinator covers it, or we acknowledged
		// one long ago and never heard it close: the coordinator resends
		// the close if it still has the cut, and otherwise (it forgot it,
		// pruneCuts) cuts the sender again.
		g.send(coord, g.reportMsg(sender, g.localReport(sender)))
	}
	if !g.IsCoordinator() {
		return
	}
	for _, sender := range sortedKeys(g.cuts) {
		c := g.cuts[sender]
		if c != nil && !c.closed && c.dep.graceful && !c.leaverGone && c.leaveBy > 0 && now >= c.leaveBy {
			// The leaver's leave has timed out: it repairs nothing any
			// more. A fix that counted on its repairs is made anew,
			// declaring lost what no survivor holds.
			c.leaverGone = true
			if c.fixed && c.leaverLimited {
				g.stats.LeaversTimedOut++
				g.log.Info("gms: leaver's cut fixed again, its leave has timed out", "sender", sender)
				g.recut(c, nil, now)
				continue
			}
		}
		if c == nil || c.closed || now < c.resendAt {
			// nil: a cut that closed in this loop pruned it (checkCut).
			continue
		}
		c.resendAt = now + g.cfg.ViewAckTimeout
		for _, p := range g.view.Members {
			if p.Member == g.self.Member {
				continue
			}
			if !c.fixed {
				if _, ok := c.reports[p.Member]; !ok {
					g.send(p, &msg{typ: typeCutReq, view: g.view.ID, member: sender})
				}
			} else if !c.acks[p.Member] {
				g.send(p, cutFix(c, g.view.ID))
			}
		}
		g.checkCut(c, now) // the view may have shrunk
	}
}

func (g *GMS) cutDeadlines(at func(time.Duration)) {
	// The engine asks for deadlines on every loop; ranging over an empty
	// map still sets up an iterator, a cost per loop for nothing.
	if len(g.open) == 0 && len(g.mcuts) == 0 && len(g.cuts) == 0 {
		return
	}
	if !g.IsCoordinator() {
		for _, ow := range g.open {
			at(ow.nudgeAt)
		}
	}
	for _, mc := range g.mcuts {
		// resendAt is the acknowledgement's resend, kept from an earlier
		// ack when a new fix made the cut pending again: until the window
		// completes, only the poll is due (a stale resendAt would be a
		// deadline in the past that Tick never moves).
		if mc.acked {
			at(mc.resendAt)
		} else {
			at(g.fd.nextCheck) // poll the protocol for completion
		}
	}
	for _, c := range g.cuts {
		switch {
		case c.closed:
			at(c.closedAt + g.closedCutKept())
		case g.IsCoordinator():
			at(c.resendAt)
			if c.dep.graceful && !c.leaverGone && c.leaveBy > 0 {
				at(c.leaveBy)
			}
		}
	}
}

// closedCutKept is how long a coordinator keeps a closed cut: long enough
// for a survivor that missed the close to ask again many times (it resends
// its CutAck every 2×ViewAckTimeout) and for a leaver that missed its
// LeaveRsp to resend LEAVE until it gives up (LeaveTimeout, counted from
// before the cut started).
func (g *GMS) closedCutKept() time.Duration {
	return max(g.cfg.ViewChangeTimeout, g.cfg.LeaveTimeout)
}

// pruneCuts forgets the closed cuts kept closedCutKept, and the oldest
// closed ones beyond as many as the view has members, so that a
// coordinator's bookkeeping does not grow with every member that ever
// departed (one that comes back is a new incarnation: setView never
// deletes the old one's entry) nor with the rate of departures.
//
// Nothing depends on a closed cut afterwards. Every survivor acknowledged
// it, so none needs data from another. A survivor that missed the close
// through every resend still has the window open and, ViewChangeTimeout
// after the view that dropped the sender and again every
// ViewChangeTimeout, reports the sender to the coordinator unasked
// (tickCuts): while the cut is kept the coordinator answers with the
// close; once it is forgotten it starts a new cut (onCutReport), which
// every survivor can answer (one that closed the window reports nothing
// held and acknowledges the fix at once, applyCut; the one that did not
// reports what the first cut gave it) and which closes at the same cut
// with nothing more lost. A CutAck for a forgotten cut is ignored, and a
// leaver whose LEAVE finds no cut any more gives up at its LeaveTimeout.
func (g *GMS) pruneCuts(now time.Duration) {
	var closed []digest.Member
	for _, m := range sortedKeys(g.cuts) {
		c := g.cuts[m]
		switch {
		case !c.closed:
		case now >= c.closedAt+g.closedCutKept():
			delete(g.cuts, m)
		default:
			closed = append(closed, m)
		}
	}
	if extra := len(closed) - len(g.view.Members); extra > 0 {
		slices.SortStableFunc(closed, func(a, b digest.Member) int {
			return cmp.Compare(g.cuts[a].closedAt, g.cuts[b].closedAt)
		})
		for _, m := range closed[:extra] {
			delete(g.cuts, m)
		}
	}
}

// sortedKeys returns m's keys in member order, for deterministic iteration.
func sortedKeys[V any](m map[digest.Member]V) []digest.Member {
	ks := make([]digest.Member, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b digest.Member) int {
		switch {
		case a.Less(b):
			return -1
		case b.Less(a):
			return 1
		}
		return 0
	})
	return ks
}
