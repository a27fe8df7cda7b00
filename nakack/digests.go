package nakack

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nakcast/nakcast/digest"
)

// Digest returns the live digest: one entry (Low, Delivered, Received) per
// member of the view that has a window, in view order. A view member still
// awaiting its join-digest entry is absent, so a MutableDigest built from it
// stays incomplete (seed 002) rather than taking 0.
func (p *Protocol) Digest() digest.Digest {
	return digest.New(p.appendDigest(nil))
}

// appendDigest appends the live digest's entries to dst.
func (p *Protocol) appendDigest(dst []digest.Entry) []digest.Entry {
	if !p.hasView {
		return append(dst, p.entryOf(p.own))
	}
	for _, m := range p.view.Members {
		if s := p.senders[m]; s != nil {
			dst = append(dst, p.entryOf(s))
		}
	}
	return dst
}

// WindowState returns m's window numbers (Low, Delivered, Received; for
// self Received is the highest seqno sent) and whether m has a window.
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
func (p *Protocol) CaptureDigest(reason string, now time.Duration) (CaptureID, digest.Digest) {
	d := p.Digest()
	p.capSeq++
	id := CaptureID(p.capSeq)
	p.captures = append(p.captures, capture{id: id, d: d, reason: reason})
	p.history.Add(now, "capture: "+reason, d)
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
// (a brand-new joiner) when it is. A view member that join lacks gets no
// window (never one at 0): its data waits in the pending queue until
// SetDigest. A sender that left keeps its window, departed, until
// CloseWindow. Resets the coordinator's stability round.
func (p *Protocol) InstallView(v View, join digest.Digest, now time.Duration) {
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
	if n > 2 {
		p.lambda = math.Log(float64(n)) + 1
		p.expm1Lam = math.Expm1(p.lambda)
	}
	for _, m := range p.view.Members {
		if m == p.self {
			continue
		}
		if s := p.senders[m]; s != nil {
			s.state = live
			continue
		}
		if join.Len() > 0 {
			e, ok := join.Lookup(m)
			if !ok {
				continue
			}
			p.newWindow(e, now)
			continue
		}
		p.addSender(m, 0, p.cfg.RecvWindow)
	}
	for _, s := range p.order {
		if _, in := p.viewPos[s.m]; !in && !s.own && s.state == live {
			s.state = departed
			p.checkGaps(s, now)
		}
	}
	p.round.init(n, p.stablePer())
	if p.hasView && p.stableAt == NoDeadline {
		p.stableAt = now + p.cfg.StableInterval
	}
	p.history.Add(now, "view "+v.ID.String(), p.Digest())
	p.drainPending(now)
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

// SetDigest (join) creates windows for the senders in d that have none,
// starting at d's delivered value; existing windows and the own entry are
// left alone.
func (p *Protocol) SetDigest(d digest.Digest, now time.Duration) {
	for i := range d.Len() {
		e := d.At(i)
		if e.Member == p.self || p.senders[e.Member] != nil {
			continue
		}
		p.newWindow(e, now)
	}
	p.history.Add(now, "set digest", d)
	p.drainPending(now)
}

// MergeDigest (merge view) creates windows for unknown senders and raises
// windows that are behind d, never our own: what the holder purged (at or
// below its Low) that we lack is marked lost (reported once by Poll, held
// messages still deliver) and the rest up to its received is fetched.
func (p *Protocol) MergeDigest(d digest.Digest, now time.Duration) {
	for i := range d.Len() {
		e := d.At(i)
		if e.Member == p.self {
			continue
		}
		s := p.senders[e.Member]
		if s == nil {
			p.newWindow(e, now)
			continue
		}
		if s.own {
			continue
		}
		if e.Low > max(s.delivered(), s.floor) {
			s.window().MarkLost(s.delivered()+1, e.Low)
			s.floor = e.Low
			s.advance()
			if s.contig > s.delivered() {
				p.markReady(s)
			}
		}
		s.highest = max(s.highest, e.Delivered, e.Received)
		p.checkGaps(s, now)
	}
	p.history.Add(now, "merge digest", d)
	p.drainPending(now)
}

// OverwriteDigest (state transfer, seed 003) sets every window, own
// included, to d's delivered value: where this member is ahead it
// re-delivers what it retains above it (ring Rewind), where it is behind it
// skips (those messages are in the installed state). The own send seqno is
// kept. Windows are created for senders d has and we lack. An error lists
// the windows that could not be rewound (purged below d's value); they are
// rewound as far as retained.
func (p *Protocol) OverwriteDigest(d digest.Digest, now time.Duration) error {
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
		target := e.Delivered
		if s.own {
			target = min(target, p.nextSeq-1)
		}
		hd := w.Delivered()
		switch {
		case target < hd:
			if err := w.Rewind(target); err != nil {
				errs = append(errs, fmt.Errorf("overwrite %v: %w", s.m, err))
				_ = w.Rewind(w.Low())
			}
			s.reasm.reset()
			p.markReady(s)
		case target > hd:
			p.skipTo(s, target)
			s.reasm.reset()
			s.contig = max(s.contig, target)
			s.floor = max(s.floor, target)
		}
		if !s.own {
			s.highest = max(s.highest, e.Received)
		}
		s.advance()
		if s.contig > s.delivered() {
			p.markReady(s)
		}
		p.checkGaps(s, now)
	}
	p.history.Add(now, "overwrite digest", d)
	p.drainPending(now)
	return errors.Join(errs...)
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
	s.hasCut, s.cut = true, cut
	s.highest = max(s.highest, cut)
	p.checkGaps(s, now)
	return nil
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
// acknowledged the cut), releasing what it retains. Returns how many
// messages it held.
func (p *Protocol) CloseWindow(m digest.Member) (int, error) {
	s := p.senders[m]
	if s == nil || s.own {
		return 0, fmt.Errorf("close window %v: %w", m, ErrUnknownMember)
	}
	n := 0
	if s.win != nil {
		n = s.win.Skip(s.win.Received()+1, p.release)
		n += s.win.Purge(math.MaxUint64, p.release)
	}
	p.removeSender(s)
	return n, nil
}

// ForcePurge purges m's window (self included) up to upto regardless of
// stability, as far as delivered. FOR TESTS AND OPERATORS ONLY: it breaks
// the stability rule and is the only way (short of crashes and partitions)
// to make a member answer MSG_NOT_FOUND (seeds 000-002).
func (p *Protocol) ForcePurge(m digest.Member, upto uint64) (int, error) {
	s := p.senders[m]
	if s == nil {
		return 0, fmt.Errorf("force purge %v: %w", m, ErrUnknownMember)
	}
	if s.win == nil {
		return 0, nil
	}
	n := s.win.Purge(upto, p.release)
	p.stats.Purged += uint64(n)
	return n, nil
}

// skipTo moves s's delivered forward to target without delivering:
// entries held on the way stay retained (others may still need them
// repaired); only past a gap are entries discarded (ring Skip).
func (p *Protocol) skipTo(s *sender, target uint64) {
	w := s.win
	for w.Delivered() < target {
		lim := int(min(uint64(len(p.dscr)), target-w.Delivered()))
		if _, c := w.RemoveBatch(p.dscr[:lim]); c > 0 {
			clear(p.dscr[:c])
			continue
		}
		if r, ok := w.SkipLost(); ok {
			if r.To > target { // consumed past target: cannot split a lost run
				break
			}
			continue
		}
		p.stats.Purged += uint64(w.Skip(target, p.release))
		break
	}
}
