package nakack

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

// Digest returns the live digest: one entry (Low, Delivered, Received) per
// member of the view that has a window, in view order. A view member still
// awaiting its join-digest entry is absent, so a MutableDigest built from it
// stays incomplete (seed 002) rather than taking 0. Delivered is the
// reported point: while a fragmented message of a sender is being
// reassembled, the seqno before its first fragment (reportEntry), so a
// digest never ends inside a message this member will still deliver.
func (p *Protocol) Digest() digest.Digest {
	return digest.New(p.appendDigest(nil))
}

// AppendDigest appends the live digest's entries (Digest's, in view order)
// to dst and returns it: Digest without allocating once dst has room.
func (p *Protocol) AppendDigest(dst []digest.Entry) []digest.Entry {
	return p.appendDigest(dst)
}

// appendDigest appends the live digest's entries to dst.
func (p *Protocol) appendDigest(dst []digest.Entry) []digest.Entry {
	if !p.hasView {
		return append(dst, p.reportEntry(p.own))
	}
	for _, m := range p.view.Members {
		if s := p.senders[m]; s != nil {
			dst = append(dst, p.reportEntry(s))
		}
	}
	return dst
}

// WindowState returns m's window numbers (Low, Delivered, Received; for
// self Received is the highest seqno sent) and whether m has a window.
// Delivered is the window's own point: unlike Digest's, it counts the
// fragments a reassembly under way has consumed.
func (p *Protocol) WindowState(m digest.Member) (digest.Entry, bool) {
	s := p.senders[m]
	if s == nil {
		return digest.Entry{}, false
	}
	return p.entryOf(s), true
}

// CaptureDigest captures the live digest for a JoinRsp, a merge or a state
// transfer (reason is recorded in the history). Until ReleaseCapture, this
// member's STABLE advertises at most the captured delivered values, so no
// member purges past the captured point.
//
// A captured entry's Delivered is where the application stands
// (sender.consumed): it covers a lost run Poll has reported beyond the
// window's delivered point (the application has consumed those seqnos, so
// a state taken with the capture covers them, and whoever installs the
// digest must neither wait for them nor report them lost again), and
// stops before a pending lost event the window has consumed but Poll has
// not reported (pendingLost: the state lacks it, and whoever installs the
// digest learns of it as this member will).
func (p *Protocol) CaptureDigest(reason string, now time.Duration) (CaptureID, digest.Digest) {
	es := p.appendDigest(nil)
	for i := range es {
		if s := p.senders[es[i].Member]; s != nil {
			c := s.consumed() // at least the reported point appendDigest gave
			es[i].Delivered, es[i].Received = c, max(es[i].Received, c)
		}
	}
	d := digest.New(es)
	p.capSeq++
	id := CaptureID(p.capSeq)
	p.captures = append(p.captures, capture{id: id, d: d, reason: reason})
	p.history.Add(now, "capture: "+reason, d)
	return id, d
}

// CaptureMergeDigest captures the live digest for a merge. A merge fetches
// from the other partition everything above the holder's Low (design.md,
// "Merges"), so until ReleaseCapture this member's STABLE advertises at most
// the captured Low values (not the delivered ones), and a coordinator drops
// the stability round in progress (it may hold values folded before the
// capture): nobody purges past the captured Low while the merge is under
// way.
func (p *Protocol) CaptureMergeDigest(reason string, now time.Duration) (CaptureID, digest.Digest) {
	id, d := p.CaptureDigest(reason, now)
	p.captures[len(p.captures)-1].atLow = true
	if p.coord == p.self {
		p.round.reset()
	}
	return id, d
}

// ReleaseCapture releases a capture; false if id is not held.
func (p *Protocol) ReleaseCapture(id CaptureID) bool {
	for i := range p.captures {
		if p.captures[i].id == id {
			p.captures = slices.Delete(p.captures, i, i+1)
			return true
		}
	}
	return false
}

// Captures returns how many captures are held.
func (p *Protocol) Captures() int { return len(p.captures) }

// InstallView installs v. Members new to this member get a window: from
// join (the JoinRsp digest; SetDigest semantics) when it is not empty, at 0
// (a brand-new joiner) when it is, or where its window was closed for a
// sender seen before (resumeOrStart: a merge view missed). A view member that join lacks gets no
// window (never one at 0): its data waits in the pending queue until
// SetDigest. A sender that left keeps its window, departed, until
// CloseWindow; one that is back in v (a merge before its cut closed) is live
// again, its cut dropped. Resets the coordinator's stability round.
func (p *Protocol) InstallView(v View, join digest.Digest, now time.Duration) {
	p.installView(v, join, false, now)
	p.history.Add(now, "view "+v.ID.String(), p.Digest())
	p.drainPending(now)
}

// InstallMergeView installs a merge view v together with its digest d (the
// merge of the partitions' digests, covering v), in one step so that no
// window is ever created at 0 for a member of the other partition. Members
// new to this member get a window by MergeDigest's rules: a sender whose
// window was closed after a cut resumes at the delivered point remembered
// then, what lies between it and the holder's Low (d's entry) reported
// lost; a sender never seen starts at the holder's Low, as a joiner's
// window (meetWindow). In both cases the rest up to d's Received is
// fetched. Existing windows are raised as by MergeDigest.
// A view member d lacks gets no window (its data waits in the pending
// queue).
func (p *Protocol) InstallMergeView(v View, d digest.Digest, now time.Duration) {
	p.installView(v, d, true, now)
	for i := range d.Len() {
		if e := d.At(i); p.senders[e.Member] != nil {
			p.mergeEntry(e, now)
		}
	}
	p.history.Add(now, "merge view "+v.ID.String(), d)
	p.drainPending(now)
}

// installView installs v; new members get windows from d (merge: by
// mergeEntry's rules, else by SetDigest's), or at 0 if d is empty.
func (p *Protocol) installView(v View, d digest.Digest, merge bool, now time.Duration) {
	p.view = View{ID: v.ID, Members: slices.Clone(v.Members)}
	p.hasView = len(v.Members) > 0
	clear(p.viewPos)
	for i, m := range p.view.Members {
		p.viewPos[m] = i
	}
	if p.hasView {
		p.coord = p.view.Members[0]
	} else {
		p.coord = digest.Member{}
	}
	n := len(p.view.Members)
	p.lambda, p.expm1Lam = 0, 0
	p.nakJitter = scaledJitter(&p.cfg, n)
	p.nakInterval, p.repairLinger = scaledRetry(&p.cfg, n)
	if n > 2 {
		p.lambda = math.Log(float64(n)) + 1
		p.expm1Lam = math.Expm1(p.lambda)
	}
	for _, m := range p.view.Members {
		if m == p.self {
			continue
		}
		if s := p.senders[m]; s != nil {
			if s.state == departed {
				p.dropCut(s, now)
			}
			continue
		}
		if d.Len() > 0 || merge {
			e, ok := d.Lookup(m)
			if !ok {
				continue
			}
			if merge {
				p.mergeEntry(e, now)
			} else {
				p.joinWindow(e, now)
			}
			continue
		}
		p.resumeOrStart(m, now)
	}
	for _, s := range p.order {
		if _, in := p.viewPos[s.m]; !in && !s.own && s.state == live {
			p.depart(s, now)
		}
	}
	p.round.init(n, p.stablePer())
	p.mlag.init(n, p.round.chunks)
	p.lastStab, p.lastSettled, p.chaseAt = p.lastStab[:0], false, NoDeadline
	p.groupRecv = 0 // a new member may not have read anything yet
	p.viewCredits()
	for len(p.challenged) > 0 { // a MSG_NOT_FOUND counts for its view only
		p.dropChallenge(p.challenged[0])
	}
	p.stablePoint = 0
	if p.hasView && p.stableAt == NoDeadline {
		p.stableAt = now + p.cfg.StableInterval
	}
}

// depart makes s, which v left, departed: its cut decides from now on
// what is lost. Seqnos that a MSG_NOT_FOUND or a merge digest marked lost
// (the sender's side purged them) and that Poll has not reported yet are
// missing again: another survivor may hold them, this member's report
// shows them missing (Gaps), and the cut declares lost only what no
// survivor holds. Reporting them anyway would leave this member with
// another record of the sender than a survivor that delivered them.
//
// A pending lost event (pendingLost) is unwound first (unwindPending):
// the application was not told of it, and a survivor may hold its seqnos.
func (p *Protocol) depart(s *sender, now time.Duration) {
	s.state = departed
	if s.win != nil {
		hi := max(s.floor, s.lostTo)
		if s.pend.To != 0 {
			hi = max(hi, p.unwindPending(s))
		}
		if d := s.delivered(); hi > d {
			s.win.UnmarkLost(d+1, hi)
			s.floor, s.lostTo = min(s.floor, d), min(s.lostTo, d)
			s.contig = d
			s.advance()
			if s.contig > d {
				p.markReady(s) // held messages the unwinding gave back
			}
		}
	}
	p.checkGaps(s, now)
}

// dropCut makes departed sender s live again (a view brings it back before
// its window closed): its cut no longer limits delivery, and the seqnos
// its cut declared lost that Poll has not reported are missing again, to
// be fetched from the sender, which is alive and holds them (a merge
// digest then marks lost what its side purged; what a MSG_NOT_FOUND or an
// earlier merge made lost stays lost). A cut that Poll has not reported
// past stays an event boundary here (sender.bounds): a survivor that
// reached it before the sender came back ended any lost event there
// (nothing beyond a cut is delivered or reported), and whether it did
// depends on what that survivor held at the cut, which this member's
// window may not hold yet (the fragment at the cut beginning a message
// that goes on beyond it). A bound splits only an event that spans it,
// which every survivor that reported up to the cut split the same way.
func (p *Protocol) dropCut(s *sender, now time.Duration) {
	if s.hasCut && s.cut > s.reasm.reported && (len(s.bounds) == 0 || s.bounds[len(s.bounds)-1] < s.cut) {
		s.bounds = append(s.bounds, s.cut)
	}
	s.state, s.hasCut, s.cut = live, false, 0
	if s.win != nil && len(s.cutLost) > 0 {
		keep := max(s.lostTo, s.floor) // purged by the sender's side: lost for good
		for _, r := range s.cutLost {
			s.win.UnmarkLost(max(r.From, keep+1), r.To)
		}
		s.contig = max(s.delivered(), s.floor)
		s.advance()
	}
	s.cutLost, s.cutStable = s.cutLost[:0], 0
	p.dequeueRepair(s)
	p.checkGaps(s, now)
}

// resumeOrStart gives m, new in a view that brings no digest, a window: at
// 0 for a brand-new joiner, but at the delivered point remembered when its
// window was closed after a cut for a sender seen before (no joiner: a new
// incarnation is a new member). Such a sender is back in a regular view
// only if this member missed the merge view that brought it back: it
// resumes where it stood (never at 0: it would deliver again what it
// delivered before), fetches what the sender holds and learns from its
// MSG_NOT_FOUND what it purged meanwhile.
func (p *Protocol) resumeOrStart(m digest.Member, now time.Duration) {
	start, seen := p.closed[m]
	s := p.addSender(m, start, p.cfg.RecvWindow)
	if !seen {
		return
	}
	p.forgetClosed(m)
	s.floor = start
	s.reasm.reported, s.reasm.skipTo, s.reasm.lostTo = start, start, 0
	p.checkGaps(s, now)
}

// newWindow creates a window starting at e's delivered value, wanting up to
// e's received.
func (p *Protocol) newWindow(e digest.Entry, now time.Duration) *sender {
	s := p.addSender(e.Member, e.Delivered, p.cfg.RecvWindow)
	s.highest = max(e.Delivered, e.Received)
	s.floor = e.Delivered
	p.checkGaps(s, now)
	return s
}

// joinWindow creates a window from a join digest entry (newWindow): a
// message that began at or before e's delivered value (its fragment 0 at
// or below it) was never promised to this member, so its tail fragments
// beyond the join point are skipped silently (reassembly.joinedAt).
func (p *Protocol) joinWindow(e digest.Entry, now time.Duration) {
	s := p.newWindow(e, now)
	s.reasm.joinedAt = e.Delivered
}

// meetWindow creates the window of a sender this member meets in a merge
// without having had a window of it (a member of the other partition it
// never shared a view with): as a joiner's (joinWindow), at the holder's
// Low, and fetches the rest up to e's Received. What the sender sent
// before lies in a history this member never took part in; reporting it
// lost would make the report's boundaries depend on when each member first
// met the sender (one that met it in an earlier merge reported the prefix
// up to the Low of then, and the rest at a later cut or merge, in two
// ranges where a member meeting it only now would report one).
func (p *Protocol) meetWindow(e digest.Entry, now time.Duration) {
	e.Delivered, e.Received = e.Low, max(e.Low, e.Delivered, e.Received)
	p.joinWindow(e, now)
}

// SetDigest (join) creates windows for the senders in d that have none,
// starting at d's delivered value (a message the digest ends inside is
// skipped, see joinWindow); existing windows and the own entry are left
// alone.
func (p *Protocol) SetDigest(d digest.Digest, now time.Duration) {
	for i := range d.Len() {
		e := d.At(i)
		if e.Member == p.self || p.senders[e.Member] != nil {
			continue
		}
		p.joinWindow(e, now)
	}
	p.history.Add(now, "set digest", d)
	p.drainPending(now)
}

// MergeDigest (merge view) folds d in: windows that are behind d are
// raised, never our own: what the holder purged (at or below its Low) that
// we lack is marked lost (reported once by Poll, held messages still
// deliver) and the rest up to its received is fetched. A sender without a
// window gets one as InstallMergeView gives it (resuming at the point its
// window was closed, reporting lost what lies from there to d's Low, or at
// d's Low if never seen). Prefer InstallMergeView, which installs the merge
// view and its digest in one step.
func (p *Protocol) MergeDigest(d digest.Digest, now time.Duration) {
	for i := range d.Len() {
		p.mergeEntry(d.At(i), now)
	}
	p.history.Add(now, "merge digest", d)
	p.drainPending(now)
}

// mergeEntry applies one merge-digest entry (see MergeDigest).
func (p *Protocol) mergeEntry(e digest.Entry, now time.Duration) {
	if e.Member == p.self {
		return
	}
	s := p.senders[e.Member]
	if s == nil {
		start, seen := p.closed[e.Member]
		if !seen {
			p.meetWindow(e, now)
			return
		}
		resume := start
		var lost wire.Range
		if e.Low > start {
			lost = wire.Range{From: start + 1, To: e.Low}
			start = e.Low
		}
		p.forgetClosed(e.Member)
		s = p.addSender(e.Member, start, p.cfg.RecvWindow)
		s.floor = start
		s.highest = max(start, e.Delivered, e.Received)
		s.contig = start
		// Nothing at or below the closed point is reported again: a
		// fragmented message the cut ended inside was reported lost up to
		// the cut; its fragments beyond it are reported from the cut+1.
		s.reasm.reported, s.reasm.skipTo, s.reasm.lostTo = resume, resume, 0
		if lost.To != 0 {
			// Reported once its end is decided, as a run the window
			// found lost (pendingLost): the seqnos after it may turn
			// out lost too (a later merge or MSG_NOT_FOUND).
			s.pend = pendingLost{From: lost.From, To: lost.To, skipTo: resume}
			s.reasm.skipTo = lost.To
			p.markReady(s)
		}
		p.checkGaps(s, now)
		return
	}
	if s.own {
		return
	}
	if e.Low > max(s.delivered(), s.floor) {
		p.markLost(s, e.Low)
		s.floor = e.Low
		s.advance()
		if s.contig > s.delivered() {
			p.markReady(s)
		}
	}
	s.highest = max(s.highest, e.Delivered, e.Received)
	p.checkGaps(s, now)
}

// closedMax bounds how many closed windows' delivered points are
// remembered for merges.
const closedMax = 1024

func (p *Protocol) rememberClosed(m digest.Member, delivered uint64) {
	if _, ok := p.closed[m]; !ok {
		if len(p.closedOrder) >= closedMax {
			delete(p.closed, p.closedOrder[0])
			p.closedOrder = slices.Delete(p.closedOrder, 0, 1)
		}
		p.closedOrder = append(p.closedOrder, m)
	}
	p.closed[m] = delivered
}

func (p *Protocol) forgetClosed(m digest.Member) {
	if _, ok := p.closed[m]; !ok {
		return
	}
	delete(p.closed, m)
	if i := slices.Index(p.closedOrder, m); i >= 0 {
		p.closedOrder = slices.Delete(p.closedOrder, i, i+1)
	}
}

// Gaps appends to dst the missing ranges of m's window (seqnos neither held
// nor marked lost) in (delivered, received], in order, and returns the
// extended slice; nothing if m has no window (or is this member). It
// allocates only if dst lacks capacity.
func (p *Protocol) Gaps(m digest.Member, dst []wire.Range) []wire.Range {
	s := p.senders[m]
	if s == nil || s.own || s.win == nil {
		return dst
	}
	after := uint64(0)
	for {
		g, ok := s.win.NextGap(after)
		if !ok {
			return dst
		}
		dst = append(dst, wire.Range{From: g.From, To: g.To})
		after = g.To
	}
}

// Unheld appends to dst the ranges of m's window in (low, delivered] that
// it does not hold: delivered as lost (MSG_NOT_FOUND, a cut or a merge
// declared them), so this member cannot repair them. Nothing if m has no
// window (or is this member). It allocates only if dst lacks capacity.
func (p *Protocol) Unheld(m digest.Member, dst []wire.Range) []wire.Range {
	s := p.senders[m]
	if s == nil || s.own || s.win == nil {
		return dst
	}
	return s.win.AppendUnheld(dst)
}

// ClosedWindow reports where m's window was closed after a cut (its
// delivered point then), if this member closed one and has no window of m
// now.
func (p *Protocol) ClosedWindow(m digest.Member) (uint64, bool) {
	if p.senders[m] != nil {
		return 0, false
	}
	at, ok := p.closed[m]
	return at, ok
}

// ErrNotRetained is wrapped by OverwriteDigest and CheckOverwrite when a
// window would have to re-deliver messages this member no longer retains
// (purged or discarded below the digest's delivered value).
var ErrNotRetained = errors.New("nakack: messages to re-deliver not retained")

// overwriteTarget returns where OverwriteDigest puts s for entry e.
func (p *Protocol) overwriteTarget(s *sender, e digest.Entry) uint64 {
	if s.own {
		return min(e.Delivered, p.nextSeq-1)
	}
	return e.Delivered
}

// CheckOverwrite reports whether OverwriteDigest(d) can be applied: nil,
// or an error wrapping ErrNotRetained naming every window that would have to
// re-deliver messages it no longer retains. It changes nothing.
func (p *Protocol) CheckOverwrite(d digest.Digest) error {
	p.publishOwn()
	var errs []error
	for i := range d.Len() {
		e := d.At(i)
		s := p.senders[e.Member]
		if s == nil {
			continue
		}
		target := p.overwriteTarget(s, e)
		if target >= s.delivered() {
			continue
		}
		if floor := max(s.low(), s.discarded); target < floor {
			errs = append(errs, fmt.Errorf("overwrite %v to %d: %w: nothing retained at or below %d (delivered %d)",
				s.m, target, ErrNotRetained, floor, s.delivered()))
		}
	}
	return errors.Join(errs...)
}

// OverwriteDigest (state transfer, seed 003) sets every window, own
// included, to d's delivered value: where this member is ahead it
// re-delivers what it retains above it (ring Rewind), where it is behind it
// skips (those messages are in the installed state). The own send seqno is
// kept. Windows are created for senders d has and we lack. It is atomic:
// if CheckOverwrite(d) fails, it returns that error and changes nothing
// (the state transfer must then be abandoned or retried).
func (p *Protocol) OverwriteDigest(d digest.Digest, now time.Duration) error {
	if err := p.CheckOverwrite(d); err != nil {
		return err
	}
	var errs []error
	for i := range d.Len() {
		e := d.At(i)
		s := p.senders[e.Member]
		if s == nil {
			if e.Member != p.self {
				p.newWindow(e, now)
			}
			continue
		}
		w := s.window()
		target := p.overwriteTarget(s, e)
		hd := w.Delivered()
		// The installed state, not a join, now decides what this member
		// is owed: the tail of a message that began before the join is
		// no longer skipped silently (reported lost if it cannot be
		// delivered, as after any overwrite).
		s.reasm.joinedAt = 0
		// A pending lost event is part of what the digest rewinds or
		// skips (or, at the window's point, of the installed state);
		// what lies beyond the window's point is reported afresh.
		if s.pend.To != 0 {
			s.reasm.skipTo = min(s.reasm.skipTo, max(s.pend.skipTo, hd))
			s.pend = pendingLost{}
		}
		switch {
		case target < hd:
			if err := w.Rewind(target); err != nil { // checked above: cannot happen
				errs = append(errs, fmt.Errorf("overwrite %v: %w", s.m, err))
			}
			s.reasm.reset()
			p.markReady(s)
		case target > hd:
			p.skipTo(s, target)
			s.reasm.reset()
			s.contig = max(s.contig, target)
			s.floor = max(s.floor, target)
		case s.reasm.active:
			// The digest ends inside the message being reassembled here
			// (target == hd, at or above its first fragment). Its holder
			// reports the seqno before a message it still reassembles,
			// so it will never deliver this one and its state lacks it:
			// neither does this member. The message's remaining
			// fragments are orphans, reported lost from its first
			// fragment, as when the digest ends inside it above or
			// below this point.
			s.reasm.active = false
		}
		if !s.own {
			// A point inside a fragmented message: reported lost from its
			// first fragment, by its next fragment or at a cut there.
			s.reasm.orphan = p.messageAround(s, target)
		}
		if !s.own {
			s.highest = max(s.highest, e.Received)
		}
		s.advance()
		if s.contig > s.delivered() {
			p.markReady(s)
		}
		p.roomMade(s, now) // a skip may have raised low
	}
	p.history.Add(now, "overwrite digest", d)
	p.drainPending(now)
	return errors.Join(errs...)
}

// messageAround returns the first fragment of the fragmented message
// seqno at lies inside (at least one fragment of it beyond at), as far as
// the fragments s's window retains tell (the one after at, or the nearest
// one at or below it); 0 if at is at a message boundary or nothing tells.
func (p *Protocol) messageAround(s *sender, at uint64) uint64 {
	w := s.window()
	if m, ok := w.Get(at + 1); ok {
		if m.fc != 0 && m.fi != 0 {
			return at + 1 - uint64(m.fi)
		}
		return 0
	}
	for seq := at; seq > w.Low() && at-seq < uint64(s.cap); seq-- {
		m, ok := w.Get(seq)
		if !ok {
			continue
		}
		if first := seq - uint64(m.fi); m.fc != 0 && first+uint64(m.fc)-1 > at {
			return first
		}
		return 0
	}
	return 0
}

// HighestReceived returns the highest seqno of m held or marked lost (for
// the coordinator's cut of a departed sender).
func (p *Protocol) HighestReceived(m digest.Member) (uint64, bool) {
	s := p.senders[m]
	if s == nil {
		return 0, false
	}
	if s.own {
		return p.nextSeq - 1, true
	}
	return s.received(), true
}

// CompleteCut fixes the cut of departed sender m: this member fetches
// whatever it lacks up to cut from peers (any holder repairs a departed
// sender's messages) and delivers nothing beyond cut.
func (p *Protocol) CompleteCut(m digest.Member, cut uint64, now time.Duration) error {
	s := p.senders[m]
	if s == nil || s.own {
		return fmt.Errorf("complete cut %v: %w", m, ErrUnknownMember)
	}
	if s.state != departed {
		return fmt.Errorf("complete cut %v: %w", m, ErrLive)
	}
	s.hasCut, s.cut = true, cut
	s.highest = max(s.highest, cut)
	if (s.reasm.active || s.reasm.orphan != 0) && s.delivered() >= cut {
		p.markReady(s) // Poll reports the message the cut ends inside (lostAtCut)
	}
	if s.contig > s.delivered() || s.pend.To != 0 {
		// A lost run held back while the sender was live (lostChain: a
		// message after it with a fragment missing, or a pending event)
		// is decided by the cut, even if no repair or declaration
		// follows.
		p.markReady(s)
	}
	p.checkGaps(s, now)
	return nil
}

// PurgeCut purges departed sender m's window up to upto, as far as it is
// delivered: the cut's stable point, what every survivor of the cut that
// reported a window had delivered, which none of them asks for again. A
// departed sender's window gets no STABILITY, so without it a window
// delivered to its capacity could never take the rest up to the cut.
// Returns how many messages it released.
func (p *Protocol) PurgeCut(m digest.Member, upto uint64, now time.Duration) (int, error) {
	s := p.senders[m]
	if s == nil || s.own {
		return 0, fmt.Errorf("purge cut %v: %w", m, ErrUnknownMember)
	}
	if s.state != departed || !s.hasCut {
		return 0, fmt.Errorf("purge cut %v: %w", m, ErrLive)
	}
	s.cutStable = max(s.cutStable, upto)
	if s.win == nil {
		return 0, nil
	}
	low := s.win.Low()
	n := p.purgeWin(s, upto)
	if s.win.Low() > low {
		p.roomMade(s, now)
	}
	return n, nil
}

// CutBlocked reports whether departed sender m's window, its cut fixed,
// can take nothing more below the cut: it has received up to its
// capacity, and only PurgeCut (a higher stable point) or a run the cut
// declared lost right after the window (skipDeclared) moves its low.
func (p *Protocol) CutBlocked(m digest.Member) bool {
	s := p.senders[m]
	if s == nil || s.own || s.state != departed || !s.hasCut || s.win == nil {
		return false
	}
	rc := s.win.Received()
	return rc < s.cut && rc >= s.win.Low()+uint64(s.cap)
}

// skipDeclared moves departed sender s's window on to `to` (at most its
// cut), when Poll reported a run that its cut declared lost beyond the
// window's capacity (lostEnd): those seqnos are consumed, and the window
// would otherwise never take them, nor the rest up to the cut, since a
// departed sender's window gets no STABILITY. The window's low moves up to
// the capacity below `to`, which releases only what nobody will ask for:
// seqnos this member does not hold, and held ones at or below the cut's
// stable point (PurgeCut); it stops below the first other held one.
func (p *Protocol) skipDeclared(s *sender, to uint64) {
	w := s.win
	to = min(to, s.cut)
	if to <= w.Delivered() {
		return
	}
	if c := uint64(s.cap); to > w.Low()+c {
		from := max(w.Low(), s.cutStable) + 1
		if q, held := w.FirstHeld(from, min(to-c, w.Low()+c)); held {
			to = q - 1 + c
		}
	}
	if to <= w.Delivered() {
		return
	}
	low := w.Low()
	p.skipWin(s, to)
	if w.Low() > low {
		p.roomMade(s, p.clock)
	}
}

// Consumed returns where the application stands in m's stream (false: no
// window): the window's delivered point, the end of a lost run Poll
// reported beyond it, or the seqno before a pending lost event
// (sender.consumed). A departed sender's cut is
// complete here once it reaches the cut, although the window may not:
// its capacity stopped it below a run the cut declared lost.
func (p *Protocol) Consumed(m digest.Member) (uint64, bool) {
	s := p.senders[m]
	if s == nil {
		return 0, false
	}
	return s.consumed(), true
}

// CutPending reports whether Poll still has to report something of
// departed sender m up to its cut although its delivered point reached the
// cut: a fragmented message that the cut ends inside (lostAtCut), or a
// pending lost event (pendingLost). A
// survivor acknowledges the cut only once it is false, since CloseWindow
// drops what Poll has not reported.
func (p *Protocol) CutPending(m digest.Member) bool {
	s := p.senders[m]
	return s != nil && !s.own && s.hasCut && (s.reasm.active || s.reasm.orphan != 0 || s.pend.To != 0)
}

// lostAtCut is Poll's step once departed sender s's delivered point
// reached its cut: a fragmented message that was being reassembled (its
// first fragments at or below the cut, its last beyond it) can never
// complete, so its seqnos from its first fragment to the cut are reported
// lost, once. Every survivor holds the same seqnos up to the cut (held or
// declared lost), so every survivor reports the same range. So is a
// message an OverwriteDigest left the window inside (reassembly.orphan).
// Returns whether it reported.
func (p *Protocol) lostAtCut(s *sender, h Handler) bool {
	if !s.reasm.active && s.reasm.orphan == 0 {
		return false
	}
	p.reportLost(s, h, s.cut, s.cut) // widened down to the message's first fragment
	return true
}

// cutLostReady reports whether Poll may consume the lost run that comes
// next in departed sender s's window (cut fixed): only once every seqno up
// to the cut, or up to the window's capacity if the cut lies beyond it, is
// held or marked lost. How far a lost run is widened (over the held
// fragments of the message it cuts) must not depend on whether a repair
// has arrived yet, or survivors would report different ranges; a run that
// reaches the capacity goes on through the declared ranges beyond it
// (lostEnd), so a member with a smaller window reports it as one with a
// larger one does.
func cutLostReady(s *sender) bool {
	w := s.win
	if rc := w.Received(); rc < s.cut && rc < w.Low()+uint64(s.cap) {
		return false // the rest is not even announced yet
	}
	g, ok := w.NextGap(w.Delivered())
	return !ok || g.From > s.cut
}

// cutLostThrough returns the end of the run of seqnos from from on that
// departed sender s's cut declared lost (its ranges chained, at most the
// cut), or from-1 if the cut did not declare from lost.
func cutLostThrough(s *sender, from uint64) uint64 {
	to := from - 1
	for more := true; more; {
		more = false
		for _, r := range s.cutLost {
			if r.From <= to+1 && r.To > to {
				to, more = r.To, true
			}
		}
	}
	return min(to, max(s.cut, from-1))
}

// markCutLost marks again the ranges departed sender s's cut declared
// lost, where the window's capacity stopped DeclareLost (roomMade, after
// a purge). It returns how many seqnos were newly marked.
func (p *Protocol) markCutLost(s *sender) int {
	w := s.window()
	n := 0
	for _, r := range s.cutLost {
		if r.To > w.Received() {
			n += w.MarkLost(r.From, r.To)
		}
	}
	if n > 0 {
		s.advance()
		if s.contig > s.delivered() {
			p.markReady(s)
		}
	}
	return n
}

// DeclareLost marks m's seqnos from..to that this member does not hold as
// lost (the coordinator declared that no survivor holds them); Poll reports
// them once. Returns how many seqnos were marked.
func (p *Protocol) DeclareLost(m digest.Member, from, to uint64, now time.Duration) (int, error) {
	s := p.senders[m]
	if s == nil || s.own {
		return 0, fmt.Errorf("declare lost %v: %w", m, ErrUnknownMember)
	}
	n := s.window().MarkLost(from, to)
	if s.state == departed {
		s.cutLost = append(s.cutLost, wire.Range{From: from, To: to})
		if d := s.win.Delivered(); s.hasCut && cutLostThrough(s, d+1) > d {
			p.markReady(s) // right after a full window (lostBeyondFullCut)
		}
	}
	if n > 0 {
		s.advance()
		if s.contig > s.delivered() {
			p.markReady(s)
		}
	}
	p.checkGaps(s, now)
	return n, nil
}

// CloseWindow drops m's window (departed sender, after every survivor
// acknowledged the cut), releasing what it retains, and remembers its
// delivered point: if a merge brings m back, its window resumes there.
// Returns how many messages it held.
func (p *Protocol) CloseWindow(m digest.Member) (int, error) {
	s := p.senders[m]
	if s == nil || s.own {
		return 0, fmt.Errorf("close window %v: %w", m, ErrUnknownMember)
	}
	if s.state != departed {
		return 0, fmt.Errorf("close window %v: %w", m, ErrLive)
	}
	// The window's own point (it may lie inside a message never
	// delivered) or, beyond it, the end of a lost run already reported.
	// A pending lost event was not reported: the point before it.
	at := max(s.delivered(), s.consumed())
	if s.pend.To != 0 {
		at = s.consumed()
	}
	p.rememberClosed(m, at)
	n := 0
	if s.win != nil {
		n = p.skipWin(s, s.win.Received()+1)
		n += p.purgeWin(s, math.MaxUint64)
	}
	p.removeSender(s)
	return n, nil
}

// ForcePurge purges m's window (self included) up to upto regardless of
// stability, as far as delivered. FOR TESTS AND OPERATORS ONLY: it breaks
// the stability rule and is the only way (short of crashes and partitions)
// to make a member answer MSG_NOT_FOUND (seeds 000-002).
func (p *Protocol) ForcePurge(m digest.Member, upto uint64) (int, error) {
	p.publishOwn()
	s := p.senders[m]
	if s == nil {
		return 0, fmt.Errorf("force purge %v: %w", m, ErrUnknownMember)
	}
	if s.win == nil {
		return 0, nil
	}
	n := p.purgeWin(s, upto)
	p.stats.Purged += uint64(n)
	if s.own {
		// Stability is overridden: so is the receive windows' bound on
		// sending (SendLimit).
		p.groupLow = max(p.groupLow, s.win.Low())
	}
	if n > 0 {
		p.roomMade(s, p.clock)
	}
	return n, nil
}

// skipTo moves s's delivered forward to target without delivering:
// entries held on the way stay retained (others may still need them
// repaired); only past a gap are entries discarded (ring Skip).
func (p *Protocol) skipTo(s *sender, target uint64) {
	w := s.win
	for w.Delivered() < target {
		lim := int(min(uint64(deliverRunMax), target-w.Delivered()))
		if _, c := w.Consume(lim); c > 0 {
			continue
		}
		if r, ok := w.SkipLost(); ok {
			if r.To > target { // consumed past target: cannot split a lost run
				break
			}
			continue
		}
		p.stats.Purged += uint64(p.skipWin(s, target))
		s.discarded = max(s.discarded, target)
		break
	}
}
