package nakack

import (
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

// nakRound sends one round of requests for s's gaps and backs off.
func (p *Protocol) nakRound(s *sender, now time.Duration) {
	rs := p.collectGaps(s)
	if len(rs) == 0 || !p.hasView {
		p.disarm(s)
		return
	}
	p.sendXmitReq(s, rs)
	s.backoff = p.nextBackoff(s.backoff)
	s.nakAt = now + s.backoff + p.jitter()
}

// collectGaps returns (in p.ranges) the missing ranges of s above what it
// delivered and above its floor, up to what it wants (target), within the
// window's capacity, at most MaxNakRanges.
func (p *Protocol) collectGaps(s *sender) []wire.Range {
	rs := p.ranges[:0]
	if s.own {
		return rs
	}
	after := max(s.contig, s.delivered(), s.floor)
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

// suppress takes another member's request for s as ours: if it covers our
// oldest gap, our timer backs off as if we had sent it (SRM-style
// suppression); it is also remembered so a gap we detect right after does
// not trigger a request of its own.
func (p *Protocol) suppress(s *sender, req *wire.XmitReq, now time.Duration) {
	g := max(s.contig, s.delivered(), s.floor) + 1
	covers := false
	var hi uint64
	for i := 0; i < req.Ranges.Len(); i++ {
		r := req.Ranges.At(i)
		hi = max(hi, r.To)
		if r.From <= g && g <= r.To {
			covers = true
		}
	}
	if covers {
		s.otherTo, s.otherAt = hi, now
	}
	if covers && s.armed {
		s.backoff = p.nextBackoff(s.backoff)
		s.nakAt = now + s.backoff + p.jitter()
		p.stats.Suppressed++
	}
}
