package nakack

import (
	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

// This file holds who may ask this member for anything (peer) and the
// per-requester repair budget (design.md, "Security"): a retransmission
// request is served only for a member of the view (or a departed member
// whose window is still open), and what it makes this member send is
// bounded by what that requester sent:
//
//	repair bytes sent for r <= RepairRatio × XMIT_REQ bytes received from r + RepairBurst
//
// over any interval, for every requester r. A requester's credit starts at
// RepairBurst, each request adds RepairRatio times its size (the whole
// datagram) up to RepairBurst, and every repair datagram byte sent in
// answer to it (headers included) is taken from it; what the credit does
// not cover is left for the requester's next request (counted,
// Stats.RepairsOverCredit), which brings credit of its own. The default
// ratio, MaxDatagram/8, lets every range a request names (16 bytes) be
// answered with two maximum-size datagrams (a loss run of two, as common
// as one at 50% loss), and each request with 8 more for its header,
// without touching the burst, which serves longer runs (a receiver's
// socket overflowing): the engine sets it to what flow control lets a
// sender have in flight (Config.InFlightBytes), the most a receiver can
// lose in one go.

// repairCredit is one requester's repair budget, in bytes.
type repairCredit struct{ tokens int64 }

// peer reports whether m may make requests of this member: a member of
// the view, or a departed member whose window is still open (a graceful
// leaver delivers until its cut closes). A joiner is a member of the view
// at the coordinator from the moment it is sent its JoinRsp, and at the
// others once they install the view.
func (p *Protocol) peer(m digest.Member) bool {
	if _, ok := p.viewPos[m]; ok {
		return true
	}
	s := p.senders[m]
	return s != nil && !s.own
}

// earnCredit adds a request of size bytes from requester r to r's credit
// and returns it.
func (p *Protocol) earnCredit(r digest.Member, size int) *repairCredit {
	c := p.credits[r]
	if c == nil {
		c = &repairCredit{tokens: int64(p.cfg.RepairBurst)}
		p.credits[r] = c
	}
	c.tokens = min(c.tokens+int64(p.cfg.RepairRatio)*int64(size), int64(p.cfg.RepairBurst))
	p.stats.NakBytes += uint64(size)
	return c
}

// viewCredits gives every other member of the view its credit (so that
// no request allocates one) and forgets the credit of members that can no
// longer request (called when a view is installed).
func (p *Protocol) viewCredits() {
	for m := range p.credits {
		if !p.peer(m) {
			delete(p.credits, m)
		}
	}
	for _, m := range p.view.Members {
		if _, ok := p.credits[m]; !ok && m != p.self {
			p.credits[m] = &repairCredit{tokens: int64(p.cfg.RepairBurst)}
		}
	}
}

// repairCost is what repairing m adds to the repair datagrams, at most:
// with open, the repair opens a new bundle (its header and trailer).
func (p *Protocol) repairCost(m msg, open bool) int {
	trailer := 0
	if p.hdr.Auth() {
		trailer = wire.TrailerLen
	}
	if m.fc != 0 {
		return wire.FragOverhead + int(m.n) + trailer
	}
	if open {
		return wire.DataOverhead + trailer + wire.MsgOverhead + int(m.n)
	}
	return wire.MsgOverhead + int(m.n)
}

// chargeRange takes from c the cost of repairing what s holds in rg (as
// the repairer bundles it: a new bundle after a seqno not held and when
// one is full) and returns the prefix of rg that c covers (From > To:
// none). The delayed repairs of a departed sender's messages mix several
// requesters' ranges, so each is charged when it is queued.
func (p *Protocol) chargeRange(s *sender, rg wire.Range, c *repairCredit) wire.Range {
	open, fill := true, 0 // the next message opens a bundle; bytes in the current one
	for seq := rg.From; seq <= rg.To; seq++ {
		m, ok := s.win.Get(seq)
		if !ok {
			open = true
			continue
		}
		if m.fc == 0 && fill+wire.MsgOverhead+int(m.n) > p.cfg.MaxDatagram {
			open = true
		}
		cost := p.repairCost(m, open)
		if c.tokens < int64(cost) {
			p.stats.RepairsOverCredit++
			rg.To = seq - 1
			break
		}
		c.tokens -= int64(cost)
		switch {
		case m.fc != 0:
			open = true // a fragment is a datagram of its own
		case open:
			open, fill = false, cost
		default:
			fill += cost
		}
	}
	return rg
}
