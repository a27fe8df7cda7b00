package gms

import (
	"errors"
	"slices"
	"time"

	"github.com/nakcast/nakcast/digest"
)

var (
	errNotInView = errors.New("view does not contain the joiner")
	errOwnEntry  = errors.New("joiner's own digest entry is not 0")
)

// fdState is failure detection: heartbeats, probes and suspicions.
type fdState struct {
	lastHeard map[digest.Member]time.Duration
	probing   map[digest.Member]time.Duration // deadline of the last probe
	probes    map[digest.Member]probeRun      // the same keys as probing
	suspected map[digest.Member]bool
	// quiet is, for each suspect, lastHeard when it was suspected: a
	// later lastHeard means we heard from it again (unsuspect).
	quiet     map[digest.Member]time.Duration
	nextHB    time.Duration
	nextCheck time.Duration
	resendAt  time.Duration // next resend of our suspicions
	nonce     uint64
	// reportTo is the member our suspicions are reported to (the first we
	// do not suspect) and reportSince when we started reporting to it in
	// the current view, while we suspect anyone (actOnSuspects).
	reportTo    digest.Member
	reportSince time.Duration
	// named is the view each member of ours named in its last heartbeat.
	named map[digest.Member]digest.ViewID
	// back is, for each member heard again after a silence of at least
	// silence (half the SuspectTimeout), when it was: a member that was
	// cut off from us may report suspicions that stem from the cut
	// (onSuspect).
	back    map[digest.Member]time.Duration
	silence time.Duration
}

// inert is fdState.quiet's value for a member suspected because it does
// not act on our reports (actOnSuspects): hearing from it again does not
// withdraw that suspicion; a new view does.
const inert time.Duration = 1<<63 - 1

// probeRun is the probing of a silent member: when the first probe was
// sent and how many were (at most Config.ProbeAttempts). Anything heard
// from the member since the first ends it; so does the last probe's
// deadline passing in silence, with a suspicion.
type probeRun struct {
	since time.Duration
	sent  int
}

func (f *fdState) init(silence time.Duration) {
	*f = fdState{
		back:      make(map[digest.Member]time.Duration),
		silence:   silence,
		lastHeard: make(map[digest.Member]time.Duration),
		probing:   make(map[digest.Member]time.Duration),
		probes:    make(map[digest.Member]probeRun),
		suspected: make(map[digest.Member]bool),
		quiet:     make(map[digest.Member]time.Duration),
		named:     make(map[digest.Member]digest.ViewID),
	}
}

func (f *fdState) heard(m digest.Member, now time.Duration) {
	if last, ok := f.lastHeard[m]; ok {
		if now-last >= f.silence {
			f.back[m] = now
		}
		f.lastHeard[m] = now
	}
}

// viewChanged starts watching v's new members and forgets departed ones
// (and the suspicions of members that did not act on our reports: the new
// view gives them a new chance).
func (f *fdState) viewChanged(v View, now time.Duration) {
	for m := range f.lastHeard {
		if !v.Contains(m) || f.quiet[m] == inert {
			if !v.Contains(m) {
				delete(f.lastHeard, m)
				delete(f.named, m)
				delete(f.back, m)
			}
			f.stopProbing(m)
			delete(f.suspected, m)
			delete(f.quiet, m)
		}
	}
	f.reportTo = digest.Member{}
	for _, p := range v.Members {
		if _, ok := f.lastHeard[p.Member]; !ok {
			f.lastHeard[p.Member] = now
		}
	}
	if f.nextCheck == 0 {
		f.nextCheck = now
	}
}

// tickFD sends heartbeats, probes silent members, suspects those that
// left Config.ProbeAttempts probes unanswered and withdraws the suspicion
// of those heard from again.
//
// A member silent for SuspectTimeout is probed; a probe whose answer is
// not due yet is left alone; at its deadline (ProbeTimeout after it was
// sent, noticed at the next check, within fdInterval) the probing ends if
// anything was heard from the member since the first probe, and otherwise
// the next probe goes out, or, after the last, the member is suspected.
// A crashed member is thus suspected about SuspectTimeout +
// ProbeAttempts×ProbeTimeout after it was last heard from (each step
// noticed up to one fdInterval late), and one lost probe or answer no
// longer suspects a live one.
func (g *GMS) tickFD(now time.Duration) {
	f := &g.fd
	if now < f.nextCheck {
		return
	}
	if now >= f.nextHB {
		g.checkLaggards(now) // coordinator (laggard.go)
		hb := &msg{typ: typeHeartbeat, view: g.view.ID}
		if g.IsCoordinator() {
			hb.kind = 1
			if g.merge != nil {
				hb.id = g.merge.id // the merge we lead, until it ends
			}
			if d := g.lagDigest(); d.Len() > 0 {
				hb.withDigest(d) // the laggards (laggard.go)
			}
		}
		hb.withAddr(g.cfg.Addr)
		g.multicast(hb)
		f.nextHB = now + g.cfg.HeartbeatInterval
	}
	newSuspect := false
	for _, p := range g.view.Members {
		m := p.Member
		if m == g.self.Member {
			continue
		}
		if f.suspected[m] {
			if f.lastHeard[m] > f.quiet[m] {
				g.unsuspect(m)
			}
			continue
		}
		if dl, ok := f.probing[m]; ok {
			if now < dl {
				continue
			}
			run := f.probes[m]
			if f.lastHeard[m] >= run.since {
				f.stopProbing(m)
				continue
			}
			if run.sent < g.cfg.ProbeAttempts {
				g.sendProbe(p)
				run.sent++
				f.probes[m] = run
				f.probing[m] = now + g.cfg.ProbeTimeout
				continue
			}
			f.stopProbing(m)
			f.suspected[m] = true
			f.quiet[m] = f.lastHeard[m]
			g.stats.Suspicions++
			newSuspect = true
			g.log.Info("gms: suspect", "self", g.self.Member, "member", m, "probes", run.sent)
			if g.cfg.Listener != nil {
				g.cfg.Listener.Suspected(m)
			}
			continue
		}
		if now-f.lastHeard[m] >= g.cfg.SuspectTimeout {
			g.startProbing(p, now)
		}
	}
	if newSuspect || (len(f.suspected) > 0 && now >= f.resendAt) {
		f.resendAt = now + g.cfg.SuspectTimeout/2
		g.actOnSuspects(now)
	}
	if len(f.suspected) == 0 {
		f.reportTo = digest.Member{} // nothing to report: the next report times afresh
	}
	f.nextCheck = now + g.fdInterval()
}

// startProbing sends p its first probe.
func (g *GMS) startProbing(p Peer, now time.Duration) {
	g.sendProbe(p)
	g.fd.probing[p.Member] = now + g.cfg.ProbeTimeout
	g.fd.probes[p.Member] = probeRun{since: now, sent: 1}
}

// stopProbing ends the probing of m, if any.
func (f *fdState) stopProbing(m digest.Member) {
	delete(f.probing, m)
	delete(f.probes, m)
}

// sendProbe sends p a probe (PROBE kind 0, a new nonce); p answers it if
// it is a member.
func (g *GMS) sendProbe(p Peer) {
	g.fd.nonce++
	pr := &msg{typ: typeProbe, kind: 0, id: g.fd.nonce}
	pr.withAddr(g.cfg.Addr)
	g.send(p, pr)
}

// unsuspect withdraws this member's suspicion of m, a member of the
// installed view heard from again since it was suspected (any membership
// datagram from it: heartbeat, probe answer, ...). m is no longer reported
// (the resends of actOnSuspects, which follow in the same tickFD, leave it
// out) and is watched again like any member: a new silence makes a new
// suspicion. A coordinator (or a member taking over) that has queued m's
// exclusion keeps the suspicion: the exclusion goes ahead and the view
// without m ends it.
func (g *GMS) unsuspect(m digest.Member) {
	if g.IsCoordinator() && slices.Contains(g.coord.excl, m) {
		return
	}
	delete(g.fd.suspected, m)
	delete(g.fd.quiet, m)
	g.fd.stopProbing(m)
	g.stats.Unsuspicions++
	g.log.Info("gms: unsuspect", "self", g.self.Member, "member", m)
	if g.cfg.Listener != nil {
		g.cfg.Listener.Unsuspected(m)
	}
}

func (g *GMS) fdInterval() time.Duration {
	return min(g.cfg.HeartbeatInterval, g.cfg.ProbeTimeout/2, g.cfg.ViewAckTimeout)
}

// suspects returns our suspected members in view order.
func (g *GMS) suspects() []digest.Member {
	var s []digest.Member
	for _, p := range g.view.Members {
		if g.fd.suspected[p.Member] {
			s = append(s, p.Member)
		}
	}
	return s
}

// actOnSuspects excludes suspects as coordinator, takes over when the
// coordinator is suspected and we are the first member not suspected, or
// reports the suspects to whoever coordinates.
//
// A member we report to in place of a suspected coordinator (the next in
// line) whose heartbeats name another view, and that installs no new view
// of ours within ViewChangeTimeout, does not act as a member of our view
// though we hear from it (it formed a group of its own while cut off from
// us, and ignores reports for a view it does not have): we suspect it too
// and report to the next one, or take over. Hearing from it does not withdraw that suspicion (inert);
// the next view does. (Reports to the coordinator itself are not timed: a
// member left behind in an older view reports to a coordinator that
// brings it forward or excludes it, memberBehind.)
func (g *GMS) actOnSuspects(now time.Duration) {
	s := g.suspects()
	if len(s) == 0 {
		return
	}
	if g.IsCoordinator() {
		for _, m := range s {
			g.queueExclusion(m)
		}
		if g.coord.vc != nil {
			g.checkViewChange(now)
		}
		g.tryViewChange(now)
		return
	}
	next := g.firstUnsuspected(nil)
	if named, ok := g.fd.named[next.Member]; ok && named != g.view.ID && next.Member != g.view.Coord().Member &&
		next.Member == g.fd.reportTo && now-g.fd.reportSince >= g.cfg.ViewChangeTimeout {
		g.suspectInert(next.Member)
		s = g.suspects()
		next = g.firstUnsuspected(nil)
	}
	if next.Member == g.self.Member {
		g.takeOver(s, now)
		return
	}
	if next.Member != g.fd.reportTo {
		g.fd.reportTo, g.fd.reportSince = next.Member, now
	}
	r := &msg{typ: typeSuspect, view: g.view.ID}
	r.withMembers(s)
	g.send(next, r)
}

// suspectInert suspects m, a member that did not act on our reports
// (actOnSuspects).
func (g *GMS) suspectInert(m digest.Member) {
	g.fd.stopProbing(m)
	g.fd.suspected[m] = true
	g.fd.quiet[m] = inert
	g.stats.Suspicions++
	g.log.Info("gms: suspect: it does not act on our reports", "self", g.self.Member, "member", m)
	if g.cfg.Listener != nil {
		g.cfg.Listener.Suspected(m)
	}
}

// firstUnsuspected returns the first member of the view that neither we nor
// extra suspect.
func (g *GMS) firstUnsuspected(extra []digest.Member) Peer {
	for _, p := range g.view.Members {
		if !g.fd.suspected[p.Member] && !slices.Contains(extra, p.Member) {
			return p
		}
	}
	return g.self
}

// takeOver makes us the coordinator in place of a suspected (or leaving)
// one: the next view, which we install, excludes every suspect.
func (g *GMS) takeOver(excl []digest.Member, now time.Duration) {
	if !g.coord.takeover {
		g.log.Info("gms: taking over as coordinator", "self", g.self.Member, "view", g.view)
	}
	g.coord.takeover = true
	for _, m := range excl {
		g.queueExclusion(m)
	}
	g.tryViewChange(now)
}

func (g *GMS) onHeartbeat(m *msg, now time.Duration) {
	if h := g.hold; h != nil && m.kind == 1 && m.sender == h.leader.Member && !h.view.IsZero() &&
		m.view.Counter >= h.view.Counter && m.id != h.id {
		// The leader installed the merge view we took (and we did) and
		// leads no merge any more: its MERGE_DONE was lost. Stop holding
		// stability for it.
		g.proto.ReleaseCapture(h.capID, now)
		g.hold = nil
		g.tryViewChange(now)
	}
	if g.view.Contains(m.sender) {
		g.maxCounter = max(g.maxCounter, m.view.Counter)
		g.fd.named[m.sender] = m.view
		g.onLagDigest(m)
	}
	if m.kind == 1 && g.IsCoordinator() && m.view != g.view.ID && m.addr != "" {
		other := Peer{Member: m.sender, Addr: m.addr}
		g.mergeCandidate(other, m.view, now)
		if m.sender.Less(g.self.Member) && g.merge == nil && g.hold == nil {
			// The other coordinator leads the merge: it must hear of us,
			// even if our multicast heartbeats do not reach it (one-way
			// multicast), so we answer its heartbeat with ours, unicast.
			hb := &msg{typ: typeHeartbeat, kind: 1, view: g.view.ID}
			hb.withAddr(g.cfg.Addr)
			g.send(other, hb)
		}
	}
	if m.kind == 0 && g.status == StatusMember && m.addr != "" && !m.view.Coord.IsZero() &&
		m.view.Counter < g.view.ID.Counter && !g.view.Contains(m.sender) &&
		(g.view.Coord().Member == g.self.Member || m.view.Coord == g.self.Member) {
		g.noticeExcluded(Peer{Member: m.sender, Addr: m.addr})
	}
	if g.status == StatusMember && g.view.Coord().Member == g.self.Member &&
		!m.view.Coord.IsZero() && m.view != g.view.ID && m.view.Counter <= g.view.ID.Counter {
		if p, ok := g.view.Peer(m.sender); ok && m.sender != g.self.Member {
			g.memberBehind(p, m.view, now)
		}
	}
}

// memberBehind handles p, a member of the view we coordinate whose
// heartbeat names another view, not newer than ours (p may coordinate it:
// a member that formed a view of its own on the other side of a partition,
// which a merge cannot bring in while our view counts it): p missed our view
// (multicast, then resent to it until ViewChangeTimeout, after which the
// view change completes without it) and stays in its old view while we
// count it as a member. It is never suspected (it heartbeats), yet
// nothing works for it: the protocol drops its STABLE (tagged with its
// view), so stability and purging stop group-wide; it ignores the cut
// requests for members it still has in its view, so their cuts never
// close; it does not know the joiners.
//
// If we installed p's view and only regular views since, our view brings
// p forward exactly as the lost multicast would have (no digest goes with
// a regular view for a member that was in the previous one): we send it
// to p again, once per heartbeat of p's naming an older view, so repeated
// loss only delays it (a heartbeat sent before p installed it costs a
// repeat that p acknowledges again). Otherwise p missed a merge view
// (installed with a digest that is not kept once the merge completes), or
// a view we never installed (numbered like ours by another coordinator),
// or is too far behind (maxViewHist): no view we can send brings it
// forward safely, so we exclude it and it rejoins with a JoinRsp digest.
// Only once our view is older than the longest resend phase
// (ViewChangeTimeout, MergeTimeout): a heartbeat p sent before installing
// a view that is still being resent is not taken for p being left behind.
// Nothing is done while a view change or a merge is under way: they
// resend their views themselves.
func (g *GMS) memberBehind(p Peer, named digest.ViewID, now time.Duration) {
	if g.coord.vc != nil || g.merge != nil || g.hold != nil {
		return
	}
	if named.Counter < g.view.ID.Counter && g.regularSince(named) {
		g.stats.ViewsResent++
		vm := &msg{typ: typeView, kind: 0, view: g.view.ID}
		vm.withView(g.view)
		g.send(p, vm)
		return
	}
	if now < g.viewAt+max(g.cfg.ViewChangeTimeout, g.cfg.MergeTimeout) || slices.Contains(g.coord.excl, p.Member) {
		return
	}
	g.stats.BehindExcluded++
	g.log.Warn("gms: excluding a member left behind in another view", "member", p.Member, "its view", named, "view", g.view.ID)
	g.queueExclusion(p.Member)
	g.tryViewChange(now)
}

// noticeExcluded sends our view to p, a member that is not in it but
// whose heartbeat names an older view than ours: p may have missed the
// view that excluded it (multicast once, and never resent to a member it
// excludes), and would then stay in its old view for ever. The notice
// (VIEW kind 2, for p's incarnation) is our current view; p treats it as
// it would treat that view multicast (onView: it leaves with ErrExcluded
// if we are in its view) and never installs it. We send it on every
// heartbeat of p's that we hear, so repeated loss only delays it.
//
// Only the coordinator of our view, or of the view p names, answers, and
// only members' heartbeats (kind 0): a coordinator's heartbeat from
// another view is a merge (mergeCandidate). A joiner sends no heartbeat
// before it installs a view, and the coordinator has installed that view
// (with the joiner) first; a member of another partition is in a view
// that does not contain us, and ignores the notice.
func (g *GMS) noticeExcluded(p Peer) {
	n := &msg{typ: typeView, kind: 2, view: g.view.ID, member: p.Member}
	n.withView(g.view)
	g.send(p, n)
}

func (g *GMS) onProbe(m *msg, now time.Duration) {
	switch m.kind {
	case 0:
		if g.status == StatusMember || g.status == StatusLeaving {
			r := &msg{typ: typeProbe, kind: 1, id: m.id}
			g.send(Peer{Member: m.sender, Addr: m.addr}, r)
		}
	case 1:
		g.fd.stopProbing(m.sender)
	}
}

// onSuspect: the sender suspects members. A coordinator excludes them,
// unless the sender itself was cut off from us until lately (silent for
// half the SuspectTimeout, heard again within the time it takes to
// suspect) and we heard the suspect within the SuspectTimeout: then the
// suspicion may stem from the cut that just healed (the sender probed
// across it), and we verify it as our own (tickFD's probes: a suspect that
// answers stays, one that does not is excluded ProbeAttempts×ProbeTimeout
// later) rather than split the group for nothing. A member that the
// sender believes is next in line probes the coordinator itself before
// taking over.
func (g *GMS) onSuspect(m *msg, now time.Duration) {
	if g.status != StatusMember || m.view != g.view.ID {
		return
	}
	if !g.view.Contains(m.sender) {
		g.stats.Refused++ // only a member of the view reports suspicions
		return
	}
	if g.IsCoordinator() {
		back, wasCut := g.fd.back[m.sender]
		wasCut = wasCut && now-back < g.cfg.SuspectTimeout+time.Duration(g.cfg.ProbeAttempts+1)*g.cfg.ProbeTimeout
		for _, s := range m.members {
			if s == g.self.Member || !g.view.Contains(s) {
				continue
			}
			if wasCut && now-g.fd.lastHeard[s] < g.cfg.SuspectTimeout {
				g.verifySuspect(s, now)
				continue
			}
			g.queueExclusion(s)
		}
		g.tryViewChange(now)
		return
	}
	for _, s := range m.members {
		g.verifySuspect(s, now)
	}
}

// verifySuspect probes s, which another member suspects, unless we suspect
// or probe it already: if it stays silent, tickFD suspects it.
func (g *GMS) verifySuspect(s digest.Member, now time.Duration) {
	p, ok := g.view.Peer(s)
	if !ok || s == g.self.Member || g.fd.suspected[s] {
		return
	}
	if _, probing := g.fd.probing[s]; !probing {
		g.startProbing(p, now)
		g.fd.lastHeard[s] = min(g.fd.lastHeard[s], now-g.cfg.SuspectTimeout)
	}
}

// leaveState is a graceful leave in progress.
type leaveState struct {
	highest  uint64
	low      uint64 // own purge point
	resendAt time.Duration
	deadline time.Duration
}

// Leave leaves the group gracefully: the coordinator installs a view without
// us, survivors complete our messages up to our highest seqno (we keep
// answering retransmissions), then LeaveRsp ends it (Listener.Left(nil)).
// The application must stop sending before calling Leave.
func (g *GMS) Leave(now time.Duration) error {
	if g.status != StatusMember {
		return ErrNotMember
	}
	var highest, low uint64
	if e, ok := g.proto.Digest().Lookup(g.self.Member); ok {
		highest, low = e.Received, e.Low
	}
	g.leave = leaveState{highest: highest, low: low, deadline: now + g.cfg.LeaveTimeout}
	if len(g.view.Members) == 1 {
		// Alone: one LEAVE still tells leavers that hold an older view
		// with us in it that everyone else is gone too
		// (leaveWithTheRest), and each leaver whose cut we run gets its
		// LeaveRsp: no survivor is left to need its messages.
		g.sendLeave(now)
		for _, m := range sortedKeys(g.cuts) {
			if c := g.cuts[m]; !c.closed && c.dep.peer.Addr != "" {
				g.sendLeaveRsp(c)
			}
		}
		g.exit(nil, now)
		return nil
	}
	// A leaving coordinator abandons its tasks (and tells the other side
	// of a merge); the next member takes over.
	if g.IsCoordinator() {
		g.abandonMerge(now)
		g.releaseAll(now)
		g.coord = coordState{}
		g.merge = nil
	}
	g.status = StatusLeaving
	g.sendLeave(now)
	g.leaveWithTheRest(now)
	return nil
}

// leaveWithTheRest ends our leave at once (Listener.Left(nil)) when every
// other member of our view has announced its leave too: no member will
// stay to cut us and answer with a LeaveRsp, nor need our messages (every
// leaver is gone or going), so waiting could only end in LeaveTimeout.
// This is how a group whose members all close together ends.
func (g *GMS) leaveWithTheRest(now time.Duration) {
	for _, p := range g.view.Members {
		if _, ok := g.leavers[p.Member]; !ok && p.Member != g.self.Member {
			return
		}
	}
	g.log.Debug("gms: every other member leaves too", "self", g.self.Member, "view", g.view.ID)
	g.stats.LeftTogether++
	// Once more: a member that lost our first LEAVE would otherwise wait
	// out LeaveTimeout for us (we no longer resend).
	g.sendLeave(now)
	g.exit(nil, now)
}

// sendLeave multicasts LEAVE with our highest seqno and our purge point
// (b), every member of the view hears it: the coordinator handles it (the
// next in line when we coordinate); every other member remembers it
// (onLeave), so that a member that takes over as coordinator, before or
// after the view that drops us, cuts us as a leaver: up to our highest,
// declaring lost only what no survivor holds at or below our purge point
// (a forced purge), and a LeaveRsp once the cut closes. A leaver runs no failure
// detection and may suspect a coordinator that is alive: that coordinator
// still handles the leave (the next in line ignores a LEAVE unless the
// coordinator itself leaves or it coordinates itself); if it has crashed,
// the member that takes over accepts a resend once it does.
func (g *GMS) sendLeave(now time.Duration) {
	g.multicast(&msg{typ: typeLeave, kind: 0, view: g.view.ID, a: g.leave.highest, b: g.leave.low})
	g.leave.resendAt = now + 2*g.cfg.ViewAckTimeout
}

func (g *GMS) tickLeave(now time.Duration) {
	if now >= g.leave.deadline {
		g.log.Warn("gms: leave timed out", "self", g.self.Member)
		g.stats.LeaveTimeouts++
		g.exit(nil, now)
		return
	}
	if now >= g.leave.resendAt {
		g.sendLeave(now)
	}
}

// onLeave: kind 0 a member leaves (to the coordinator, or to the next in
// line when the coordinator itself leaves); kind 1 our leave is complete.
func (g *GMS) onLeave(m *msg, now time.Duration) {
	if m.kind == 1 {
		if g.status == StatusLeaving && g.view.Contains(m.sender) {
			g.exit(nil, now)
		}
		return
	}
	if g.status == StatusLeaving && g.view.Contains(m.sender) {
		g.markLeaver(m)
		g.leaveWithTheRest(now)
		return
	}
	if g.status != StatusMember {
		return
	}
	d := departure{member: m.sender, highest: m.a, low: m.b, graceful: true}
	if !g.view.Contains(m.sender) {
		g.departedLeave(d, now)
		return
	}
	g.markLeaver(m)
	if g.IsCoordinator() {
		g.queueLeave(d)
		g.tryViewChange(now)
		return
	}
	g.takeOverFromLeavers(now)
}

// takeOverFromLeavers takes over as coordinator when the coordinator
// announced its leave and every member between it and us in view order is
// suspected or leaving too: a leaver never coordinates (Leave drops its
// tasks; it ignores LEAVEs), so when members finish together (the
// coordinator and the next in line leaving within the same few
// milliseconds) the first member that stays must handle their leaves, or
// nobody would until failure detection. Every leave we heard is queued,
// in view order.
func (g *GMS) takeOverFromLeavers(now time.Duration) {
	if _, ok := g.leavers[g.view.Coord().Member]; !ok {
		return
	}
	var leaving []digest.Member
	for _, p := range g.view.Members {
		if _, ok := g.leavers[p.Member]; ok {
			leaving = append(leaving, p.Member)
		}
	}
	if g.firstUnsuspected(leaving).Member != g.self.Member {
		return
	}
	for _, m := range leaving {
		l := g.leavers[m]
		g.queueLeave(departure{member: m, highest: l.highest, low: l.low, graceful: true})
	}
	g.takeOver(nil, now)
}

// markLeaver remembers m's LEAVE (the highest seqno and purge point its
// sender announced) until a view drops the sender (setView).
func (g *GMS) markLeaver(m *msg) {
	l := g.leavers[m.sender]
	g.leavers[m.sender] = leaveMark{highest: max(l.highest, m.a), low: max(l.low, m.b)}
}

// departedLeave handles d, the LEAVE of a member that is no longer in our
// view but whose window is still open here (its cut is under way, or yet
// to start under a coordinator that took over): its departure is a
// graceful one. As coordinator of its cut, the cut is made one (up to its
// highest, declaring lost only what it purged, if not fixed yet) and the
// leaver gets its LeaveRsp when the cut closes, or now if it is closed
// already (it missed it).
func (g *GMS) departedLeave(d departure, now time.Duration) {
	ow := g.open[d.member]
	if ow != nil {
		ow.graceful, ow.highest, ow.low = true, max(ow.highest, d.highest), max(ow.low, d.low)
	}
	c, ok := g.cuts[d.member]
	if !ok || !g.IsCoordinator() {
		return
	}
	if !c.fixed {
		c.dep.highest, c.dep.low = max(c.dep.highest, d.highest), max(c.dep.low, d.low)
	}
	if !c.dep.graceful {
		c.leaveBy = now + g.cfg.LeaveTimeout
	}
	c.dep.graceful = true
	if c.dep.peer.Addr == "" && ow != nil {
		c.dep.peer = ow.peer
	}
	if c.closed {
		g.sendLeaveRsp(c)
	}
}
