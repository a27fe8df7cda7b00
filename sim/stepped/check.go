package stepped

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine"
)

// Check runs the end checks of a group settled in one view of final (the
// survivors), every sender of which stopped sending:
//
//   - every member of final delivered every message each sender of final
//     sent (from where its stream of that sender starts) and was told
//     nothing of them lost;
//   - for every sender, departed ones included, the members of final that
//     have a stream of it agree on every seqno they both have (the same
//     message, or lost in both), and for a departed sender they end at the
//     same seqno (the cut);
//   - every member's EventLost events are its Handler's lost ranges, in
//     order.
func Check(final []*Node) error {
	var errs []error
	for _, n := range final {
		errs = append(errs, n.checkLive(final), n.checkLostEvents())
	}
	senders := map[digest.Member]bool{}
	var order []digest.Member
	for _, n := range final {
		for _, s := range n.app.Senders() {
			if !senders[s] {
				senders[s] = true
				order = append(order, s)
			}
		}
	}
	for _, s := range order {
		errs = append(errs, samePrefix(final, s))
	}
	return errors.Join(errs...)
}

// checkLive: n delivered everything every sender of final sent, nothing lost.
func (n *Node) checkLive(final []*Node) error {
	for _, snd := range final {
		self := snd.m.Self()
		sent := snd.sent[self]
		s := n.app.Stream(self)
		if sent == 0 {
			continue
		}
		if s == nil || s.Next != sent+1 {
			return fmt.Errorf("member %d: %v sent %d, stream %v", n.id, self, sent, s)
		}
		for _, e := range s.Entries {
			if e.Lost {
				return fmt.Errorf("member %d: %v, a live sender, lost [%d,%d]", n.id, self, e.Seq, e.To)
			}
		}
	}
	return nil
}

// lostRange is one lost-range report: an EventLost or a Handler.Lost.
type lostRange struct {
	Sender   digest.Member
	From, To uint64
}

func (a lostRange) cmp(b lostRange) int {
	if c := cmp.Compare(a.Sender.ID, b.Sender.ID); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Sender.Inc, b.Sender.Inc); c != 0 {
		return c
	}
	return cmp.Compare(a.From, b.From)
}

// checkLostEvents: n's EventLost events are its Handler's lost ranges.
func (n *Node) checkLostEvents() error {
	var ev, h []lostRange
	for _, e := range n.Events {
		if e.Kind == engine.EventLost {
			ev = append(ev, lostRange{e.Sender, e.From, e.To})
		}
	}
	for _, s := range n.app.Senders() {
		for _, e := range n.app.Stream(s).Entries {
			if e.Lost {
				h = append(h, lostRange{s, e.Seq, e.To})
			}
		}
	}
	slices.SortStableFunc(ev, lostRange.cmp)
	slices.SortStableFunc(h, lostRange.cmp)
	if !slices.Equal(ev, h) {
		return fmt.Errorf("member %d: EventLost %v, Handler.Lost %v", n.id, ev, h)
	}
	return nil
}

// samePrefix: the members of final agree on sender's seqnos where their
// streams overlap; for a departed sender they end at the same seqno.
func samePrefix(final []*Node, sender digest.Member) error {
	live := false
	var first *Node
	for _, n := range final {
		live = live || n.m.Self() == sender
	}
	for _, n := range final {
		s := n.app.Stream(sender)
		if s == nil {
			continue
		}
		if first == nil {
			first = n
			continue
		}
		f := first.app.Stream(sender)
		if !live && s.Next != f.Next {
			return fmt.Errorf("%v departed: member %d ends at %d, member %d at %d", sender, first.id, f.Next, n.id, s.Next)
		}
		for seq := max(s.Start, f.Start); seq < min(s.Next, f.Next); seq++ {
			if a, b := f.at(seq), s.at(seq); a != b {
				return fmt.Errorf("%v#%d: member %d has %+v, member %d %+v", sender, seq, first.id, a, n.id, b)
			}
		}
	}
	return nil
}

// at returns the entry covering seq, a lost range cut to seq alone.
func (s *Stream) at(seq uint64) Entry {
	i, _ := slices.BinarySearchFunc(s.Entries, seq, func(e Entry, seq uint64) int {
		switch {
		case e.To < seq:
			return -1
		case e.Seq > seq:
			return 1
		}
		return 0
	})
	e := s.Entries[i]
	if e.Lost {
		e.Seq, e.To = seq, seq
	}
	return e
}
