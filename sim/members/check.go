package members

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nakcast/nakcast/digest"
)

// IdleCheck is how long a settled group is watched for retransmission
// traffic (there must be none) and for purging everything.
const IdleCheck = 3 * time.Second

// Settled reports whether the nodes that should be members (Final) are in
// one view, with nothing pending and everything delivered.
func (c *Cluster) Settled() bool {
	f := c.Final()
	return len(f) > 0 && Converged(f...) && Quiet(f...) && Delivered(f...)
}

// Check runs the checks of a settled group (see the package doc) and
// returns every violation found.
func (c *Cluster) Check() error {
	final := c.Final()
	errs := []error{c.checkCuts(), c.checkOwed(final), c.checkBoundaries(), c.checkStates(final), c.checkMalformed()}
	return errors.Join(errs...)
}

// CheckIdle runs the group for IdleCheck and requires that no XMIT_REQ,
// repair or MSG_NOT_FOUND is sent meanwhile and that every final member
// purged everything of every sender of its view.
func (c *Cluster) CheckIdle() error {
	m := c.Meter
	xmits, repairs, mnf := m.XmitReqs(), m.RepairDatagrams, m.MsgNotFounds()
	settled := c.Sim.Now()
	if err := c.Sim.RunUntil(settled + IdleCheck); err != nil {
		return err
	}
	if x, r, n := m.XmitReqs()-xmits, m.RepairDatagrams-repairs, m.MsgNotFounds()-mnf; x+r+n > 0 {
		return fmt.Errorf("retransmission traffic after settling at %v: %d XMIT_REQ, %d repairs, %d MSG_NOT_FOUND (last at %v)",
			settled, x, r, n, m.LastRetransmission)
	}
	for _, n := range c.Final() {
		inc := n.Cur()
		if inc == nil {
			return fmt.Errorf("%v left the group while idle", n)
		}
		for _, e := range inc.P.Digest().Entries() {
			if hi := c.Ledger.Highest(e.Member); e.Low != hi || e.Delivered != hi || e.Received != hi {
				return fmt.Errorf("%v retains %v after idling (sender's highest %d)", n, e, hi)
			}
		}
	}
	return nil
}

// every calls fn for every incarnation of every node, in order.
func (c *Cluster) every(fn func(inc *Incarnation)) {
	for _, n := range c.nodes {
		for _, inc := range n.incs {
			fn(inc)
		}
	}
}

// checkCuts: every incarnation that closed a departed sender's window
// had completed the cut it applied first (its stream reaches the cut), and
// the survivors of one cut (members that closed the sender's window under
// the same coordinator after the same view dropped it: survivors a
// partition split before the cut closed end under different ones) closed
// it at the same cut, and those of them that acknowledged the same fix
// (fixKey) have the same stream of it from where they stood then up to the
// cut, boundaries included.
func (c *Cluster) checkCuts() error {
	// Every incarnation, not only the final members': one that later
	// crashed or left closed its windows all the same, and a close before
	// the stream reached the cut leaves the messages between neither
	// delivered nor reported lost.
	var early error
	c.every(func(inc *Incarnation) {
		for _, ep := range inc.Episodes {
			if next := inc.App.next(ep.Sender); ep.Closed && ep.HasCut && next <= ep.Cut && early == nil {
				early = fmt.Errorf("%v closed %v's window (cut %d, dropped in view %v) with its stream at %d: %d..%d neither delivered nor reported lost",
					inc.Member, ep.Sender, ep.Cut, ep.Dropped, next-1, next, ep.Cut)
			}
		}
	})
	if early != nil {
		return early
	}
	type key struct {
		sender, closer digest.Member
		view           digest.ViewID
	}
	type survivor struct {
		inc *Incarnation
		ep  *Episode
	}
	first := map[key]survivor{}
	sameFix := map[fixKey]survivor{}
	var err error
	c.every(func(inc *Incarnation) {
		for _, ep := range inc.Episodes {
			if !ep.Closed || !ep.HasCut {
				continue
			}
			k := key{ep.Sender, ep.ClosedBy, ep.Dropped}
			f, ok := first[k]
			if !ok {
				first[k] = survivor{inc, ep}
			} else if f.ep.Cut != ep.Cut {
				err = errors.Join(err, fmt.Errorf("survivors %v and %v of the view %v that dropped %v closed it at cuts %d and %d",
					f.inc.Member, inc.Member, k.view, k.sender, f.ep.Cut, ep.Cut))
				continue
			}
			fk := fixKey{ep.Sender, ep.ClosedBy, ep.Dropped, ep.Cut, ep.Lost}
			f, ok = sameFix[fk]
			if !ok {
				sameFix[fk] = survivor{inc, ep}
				continue
			}
			from := max(f.ep.From, ep.From)
			if e := sameStream(f.inc.App.Stream(k.sender), inc.App.Stream(k.sender), from, ep.Cut); e != nil {
				err = errors.Join(err, fmt.Errorf("survivors %v and %v of the view %v that dropped %v (fix: cut %d, lost %s): %w",
					f.inc.Member, inc.Member, k.view, k.sender, ep.Cut, ep.Lost, e))
			}
		}
	})
	return err
}

// fixKey names one fix of a cut: a coordinator that fixes a sender's cut
// again (a survivor left or crashed, a member that was away reports the
// window it still holds, a leaver's leave timed out) computes it from the
// survivors it has then, so members that acknowledged different fixes of
// one coordinator may differ where a member that acknowledged only the
// earlier one delivered what the later one declares lost (it left, or
// closed and purged in its own partition).
type fixKey struct {
	sender, closer digest.Member
	view           digest.ViewID
	cut            uint64
	lost           string
}

// checkOwed: no final member owes a lost range for the message an
// installed state's point fell inside (the protocol reported it, by the
// message's next fragment or at the sender's cut).
func (c *Cluster) checkOwed(final []*Node) error {
	for _, n := range final {
		inc := n.Cur()
		for _, s := range inc.App.Senders() {
			if st := inc.App.Stream(s); st.Owed {
				return fmt.Errorf("%v: the state installed at %v's %d lies inside a message never reported lost", inc.Member, s, st.Start-1)
			}
		}
	}
	return nil
}

// sameStream requires a and b to have the same events over the seqnos
// both account for in [from, upto]: the same deliveries and the same lost
// ranges with the same boundaries (clipped to the common span).
func sameStream(a, b *Stream, from, upto uint64) error {
	if a == nil || b == nil {
		return nil
	}
	lo, hi := max(a.Start, b.Start, from), min(a.Next, b.Next, upto+1)-1
	if lo > hi {
		return nil
	}
	ea, eb := clip(a.Events, lo, hi), clip(b.Events, lo, hi)
	if !slices.Equal(ea, eb) {
		return fmt.Errorf("streams of %v differ over [%d,%d]: %v and %v", a.Sender, lo, hi, ea, eb)
	}
	return nil
}

// span is an event reduced to what two streams must agree on.
type span struct {
	lost     bool
	from, to uint64
}

// clip returns the events overlapping [lo, hi], clipped to it.
func clip(evs []Event, lo, hi uint64) []span {
	var out []span
	for _, e := range evs {
		if e.To < lo || e.From > hi {
			continue
		}
		out = append(out, span{lost: e.Lost, from: max(e.From, lo), to: min(e.To, hi)})
	}
	return out
}

// checkBoundaries: two members that report the same maximal run of a
// sender's seqnos lost (adjacent lost ranges together) report it in the
// same ranges.
func (c *Cluster) checkBoundaries() error {
	type block struct {
		sender   digest.Member
		from, to uint64
	}
	seen := map[block][]span{}
	owner := map[block]digest.Member{}
	var err error
	c.every(func(inc *Incarnation) {
		for _, s := range inc.App.Senders() {
			evs := inc.App.Stream(s).Events
			for i := 0; i < len(evs); {
				if !evs[i].Lost {
					i++
					continue
				}
				j := i
				for j+1 < len(evs) && evs[j+1].Lost {
					j++
				}
				b := block{s, evs[i].From, evs[j].To}
				parts := clip(evs[i:j+1], b.from, b.to)
				if prev, ok := seen[b]; ok && !slices.Equal(prev, parts) {
					err = errors.Join(err, fmt.Errorf("%v and %v report %v's seqnos %d..%d lost in different ranges: %v and %v",
						owner[b], inc.Member, s, b.from, b.to, prev, parts))
				} else if !ok {
					seen[b], owner[b] = parts, inc.Member
				}
				i = j + 1
			}
		}
	})
	return err
}

// checkStates: the requester of a state transfer and its provider, both
// still members at the end (the provider not having installed a state of
// its own since), have the same application state of every sender the
// digest covered, where both streams stand at the end (or, if one stream
// ends earlier, a departed sender's cut on one side of a partition, where
// both accounted for the same seqnos), or, if either was told lost
// anything of that sender since the transfer, where both stood before the
// first such range (stateEnd).
func (c *Cluster) checkStates(final []*Node) error {
	cur := map[digest.Member]*Incarnation{}
	for _, n := range final {
		if inc := n.Cur(); inc != nil {
			cur[inc.Member] = inc
		}
	}
	var err error
	for _, n := range final {
		req := n.Cur()
		if req == nil || len(req.Installs) == 0 {
			continue
		}
		in := req.Installs[len(req.Installs)-1]
		prov := cur[in.Provider]
		if prov == nil || (len(prov.Installs) > 0 && prov.Installs[len(prov.Installs)-1].At > in.At) {
			continue // gone, or it replaced its own state since
		}
		for _, e := range in.Digest.Entries() {
			rs, ps := req.App.Stream(e.Member), prov.App.Stream(e.Member)
			if rs == nil || ps == nil {
				continue
			}
			end, ok := stateEnd(rs, ps, e.Delivered, in.At)
			if !ok {
				continue
			}
			rc, rok := rs.chainAt(end)
			pc, pok := ps.chainAt(end)
			if rok && pok && rc != pc {
				err = errors.Join(err, fmt.Errorf("state of %v at %d: requester %v (installed from %v at %v) has chain %x, provider %x",
					e.Member, end, req.Member, prov.Member, in.At, rc, pc))
			}
		}
	}
	return err
}

// stateEnd returns the seqno up to which a state transfer's requester
// (stream rs) and provider (ps) must have the same application state of a
// sender: where both streams stand, or just before the first range either
// was told lost since the transfer, where they may part (a forced purge's
// MSG_NOT_FOUND tells one member lost what another holds and delivers).
// The transfer began for the provider when it took the state, at the
// digest's point for the sender (point): a range above it was lost since,
// even if the provider was told so before the requester installed the
// state (at). The requester's stream starts at the install (at). ok is
// false when the requester was told lost the message the point falls
// inside, before anything else (nothing is left to compare).
func stateEnd(rs, ps *Stream, point uint64, at time.Duration) (end uint64, ok bool) {
	end = min(rs.Next, ps.Next) - 1
	for _, e := range rs.Events {
		if e.Lost && e.At >= at {
			end = min(end, e.From-1)
			break
		}
	}
	for _, e := range ps.Events {
		if e.Lost && (e.To > point || e.At >= at) {
			end = min(end, e.From-1)
			break
		}
	}
	return end, end >= point
}

// checkMalformed: no datagram failed to decode anywhere.
func (c *Cluster) checkMalformed() error {
	if c.Meter.DecodeErrors > 0 {
		return fmt.Errorf("%d datagrams on the network failed to decode", c.Meter.DecodeErrors)
	}
	var err error
	for _, n := range c.nodes {
		if m := n.GMS.Stats().Malformed; m > 0 {
			err = errors.Join(err, fmt.Errorf("%v: gms rejected %d malformed datagrams", n, m))
		}
		for _, inc := range n.incs {
			if m := inc.P.Stats().Drops.Malformed; m > 0 {
				err = errors.Join(err, fmt.Errorf("%v: nakack rejected %d malformed datagrams", inc.Member, m))
			}
		}
	}
	return err
}
