package nakack

import (
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

// nakRound sends one round of requests for s: every gap if the retry
// deadline passed, else only the gaps above the last request.
func (p *Protocol) nakRound(s *sender, now time.Duration) {
	includeOld := now >= s.oldAt
	above := uint64(0)
	if !includeOld {
		above = s.reqTo
	}
	rs := p.collectGaps(s, above)
	if len(rs) == 0 || !p.hasView {
		if !s.hasGaps() || !p.hasView {
			p.disarm(s)
			return
		}
		// Gaps exist but none is requestable now: they lie beyond the
		// window's capacity (low+cap) until a purge makes room. Every purge
		// that raises low re-checks the gaps (roomMade), so this is only a
		// safety net: stay armed and look again after a backoff that grows
		// to NakMaxInterval, never leaving the timer without a deadline.
		s.newAt = NoDeadline
		if s.oldAt <= now || s.oldAt == NoDeadline {
			s.backoff = p.nextBackoff(s.backoff)
			s.oldAt = now + s.backoff
		}
		s.nakAt = s.oldAt
		return
	}
	p.sendXmitReq(s, rs)
	s.reqTo = max(s.reqTo, rs[len(rs)-1].To)
	s.lastReq = now
	s.newAt = NoDeadline
	if includeOld {
		s.backoff = p.nextBackoff(s.backoff)
		s.oldest = s.oldestGap()
		s.oldAt = now + s.backoff + p.jitter()
	} else {
		if s.backoff == 0 {
			s.backoff = p.nakInterval
			s.oldest = s.oldestGap()
		}
		s.oldAt = min(s.oldAt, now+p.nakInterval+p.jitter())
	}
	s.nakAt = min(s.oldAt, s.newAt)
}

// collectGaps returns (in p.ranges) the missing ranges of s above what it
// delivered and above its floor, up to what it wants (target), within the
// window's capacity, at most MaxNakRanges.
func (p *Protocol) collectGaps(s *sender, above uint64) []wire.Range {
	rs := p.ranges[:0]
	if s.own {
		return rs
	}
	after := max(s.contig, s.delivered(), s.floor, above)
	tgt := min(s.target(), s.low()+uint64(s.cap))
	if after >= tgt {
		return rs
	}
	if s.win != nil {
		for len(rs) < p.cfg.MaxNakRanges {
			g, ok := s.win.NextGap(after)
			if !ok || g.From > tgt {
				break
			}
			g.To = min(g.To, tgt)
			rs = append(rs, wire.Range{From: g.From, To: g.To})
			after = g.To
		}
	}
	if from := max(s.received(), after) + 1; from <= tgt && len(rs) < p.cfg.MaxNakRanges {
		rs = append(rs, wire.Range{From: from, To: tgt})
	}
	p.ranges = rs
	return rs
}

// sendXmitReq emits the ranges for s in as few XMIT_REQ datagrams as fit.
func (p *Protocol) sendXmitReq(s *sender, rs []wire.Range) {
	per := wire.MaxXmitRanges(p.cfg.MaxDatagram)
	var to digest.Member
	if p.cfg.UnicastNaks && s.state == live {
		to = s.m
	}
	for len(rs) > 0 {
		k := min(per, len(rs))
		b := p.getBuf(wire.XmitReqOverhead + k*wire.RangeLen)
		if b == nil {
			return
		}
		d, err := wire.EncodeXmitReq(b.B, p.hdr, p.view.ID, s.m, s.delivered(), rs[:k])
		if err != nil {
			panic(err) // ranges are valid by construction
		}
		p.emit(to, b, len(d))
		p.stats.NakSent++
		p.stats.NakRangesSent += uint64(k)
		rs = rs[k:]
	}
}

// suppress takes another member's request for s as ours (SRM-style
// suppression): if it covers our oldest gap, our retry backs off as if we
// had sent it; if it covers our first new (never requested) gap, everything
// up to its highest seqno counts as requested. It is also remembered so a
// gap we detect right after does not trigger a request of its own.
func (p *Protocol) suppress(s *sender, req *wire.XmitReq, now time.Duration) {
	g := s.oldestGap()
	fa, hasNew := s.firstGapAbove(s.reqTo)
	coversOld, coversNew := false, false
	var hi uint64
	for i := 0; i < req.Ranges.Len(); i++ {
		r := req.Ranges.At(i)
		hi = max(hi, r.To)
		coversOld = coversOld || r.Contains(g)
		coversNew = coversNew || (hasNew && r.Contains(fa))
	}
	if hi >= g {
		s.otherTo, s.otherAt = max(s.otherTo, hi), now
	}
	if !s.armed || !(coversOld || coversNew) {
		return
	}
	if coversOld && g <= s.reqTo {
		if now >= s.lastReq+s.backoff/2 { // grow once per round, however many ask
			s.backoff = p.nextBackoff(s.backoff)
		}
		s.oldest = g
		s.lastReq = now
		s.oldAt = now + s.backoff + p.jitter()
	}
	if coversNew || (coversOld && g > s.reqTo) {
		s.reqTo = max(s.reqTo, hi)
		s.lastReq = now
		if s.backoff == 0 {
			s.backoff = p.nakInterval
			s.oldest = g
		}
		// What was just requested is retried one interval from now, also
		// when the backoff of older gaps grew far beyond it.
		if s.oldAt == NoDeadline || s.oldAt > now+p.nakInterval+p.nakJitter {
			s.oldAt = now + p.nakInterval + p.jitter()
		}
		if !s.hasGapAbove(s.reqTo) {
			s.newAt = NoDeadline
		}
	}
	s.nakAt = min(s.oldAt, s.newAt)
	p.stats.Suppressed++
}
