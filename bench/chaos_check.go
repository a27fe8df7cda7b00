package bench

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/nakcast/nakcast/digest"
)

// ChaosReport is what CheckChaos found: one line per member process and
// sender (Lines), and the problems (none when the run passed).
type ChaosReport struct {
	Lines    []string
	Problems []string
}

// CheckChaos checks the results of a chaos run (RunNetns with Chaos, or a
// plain run) sender by sender:
//
//   - members that stayed (started with the run, not killed, never
//     excluded, and whose views held the sender from their first until
//     the sender left at its end) delivered the same sequence: complete,
//     one run from seqno 1 in which every gap is a lost range the handler
//     got (and an EventLost event named), and the same counts, lost
//     ranges and order hashes at every one of them;
//   - every other member that wrote a result (a restart, a member
//     excluded and rejoined, the far side of a partition) delivered in at
//     most as many runs as the times the sender entered its view, from its
//     join point on to the stayers' last seqno, nothing out of order,
//     nothing the stayers reported lost, and the same messages as the
//     stayers in every block of SegmentSeqnos seqnos both delivered whole.
func CheckChaos(results []MemberResult) ChaosReport {
	var rep ChaosReport
	bad := func(f string, a ...any) { rep.Problems = append(rep.Problems, fmt.Sprintf(f, a...)) }
	refs := map[uint64]SenderResult{}
	for _, r := range results {
		if r.Schema == "" {
			if !r.Killed {
				bad("%s: no result", procName(r))
			}
			continue
		}
		if r.Error != "" {
			bad("%s: %s", procName(r), r.Error)
		}
		for _, s := range r.Senders {
			if !stayed(r, s.Sender) {
				continue
			}
			checkStayer(r, s, bad)
			if x, ok := refs[s.Sender]; !ok {
				refs[s.Sender] = s
			} else if x.Delivered != s.Delivered || x.Hash != s.Hash || !slices.Equal(x.Lost, s.Lost) {
				bad("sender %d: stayers differ: %d delivered (hash %s, lost %v) and, at %s, %d (hash %s, lost %v)",
					s.Index, x.Delivered, x.Hash, x.Lost, procName(r), s.Delivered, s.Hash, s.Lost)
			}
		}
	}
	for _, s := range senderIndexes(results) {
		if _, ok := refs[MemberID(results[0].RunID, s).ID]; !ok {
			bad("sender %d: %s", s, noStayer(results, s))
		}
	}
	for _, r := range results {
		if r.Schema == "" {
			if r.Killed {
				rep.Lines = append(rep.Lines, procName(r)+": killed by the schedule (no result)")
			}
			continue
		}
		for _, s := range r.Senders {
			ref, ok := refs[s.Sender]
			if !ok {
				rep.Lines = append(rep.Lines, fmt.Sprintf("%s: sender %d: not checked (no stayer); delivered %d in runs %v, %d out of order, lost %v",
					procName(r), s.Index, s.Delivered, s.Runs, s.OutOfOrder, s.Lost))
				continue
			}
			kind, compared := "stayed", 0
			if !stayed(r, s.Sender) {
				kind = fmt.Sprintf("entered its view %d times", senderEntries(r, s.Sender))
				compared = checkOther(r, s, ref, bad)
			}
			rep.Lines = append(rep.Lines, fmt.Sprintf("%s: sender %d: %s; delivered %d in runs %v, hash %s, lost %v%s",
				procName(r), s.Index, kind, s.Delivered, s.Runs, s.Hash, s.Lost, comparedNote(compared, kind)))
		}
	}
	return rep
}

// senderIndexes lists the senders of the run, from the first result.
func senderIndexes(results []MemberResult) []int {
	for _, r := range results {
		if r.Schema != "" {
			out := make([]int, len(r.Senders))
			for i, s := range r.Senders {
				out[i] = s.Index
			}
			return out
		}
	}
	return nil
}

// noStayer says why no member stayed with sender s throughout: the
// sender's own process was excluded (a false suspicion, or a partition
// about as long as the failure detection) and rejoined as a new
// incarnation, whose seqnos start again at 1; the harness follows one
// incarnation of each sender, so that stream cannot be checked.
func noStayer(results []MemberResult, s int) string {
	for _, r := range results {
		if r.Index != s || r.Restart != 0 || r.Schema == "" {
			continue
		}
		var first int64
		if len(r.Views) > 0 {
			first = r.Views[0].Ns
		}
		for _, e := range r.Events {
			if e.Kind == "left" && e.Err != "" {
				return fmt.Sprintf("excluded %.1f s after its first view (%s) and rejoined as a new incarnation, whose seqnos start again at 1: "+
					"the harness follows one incarnation of each sender, so its stream cannot be checked", float64(e.Ns-first)/1e9, e.Err)
			}
		}
	}
	return "no member stayed in the group with it throughout (nothing to compare with)"
}

func comparedNote(n int, kind string) string {
	if kind == "stayed" {
		return ""
	}
	return fmt.Sprintf("; %d blocks of %d compared with the stayers'", n, SegmentSeqnos)
}

// procName names a member process in the report.
func procName(r MemberResult) string {
	if r.Restart > 0 {
		return fmt.Sprintf("member %d (restart %d)", r.Index, r.Restart)
	}
	return fmt.Sprintf("member %d", r.Index)
}

// checkStayer checks a stayer's stream of one sender on its own.
func checkStayer(r MemberResult, s SenderResult, bad func(string, ...any)) {
	who := fmt.Sprintf("%s: sender %d", procName(r), s.Index)
	switch {
	case !s.Complete:
		bad("%s: last message not delivered (%d delivered, runs %v)", who, s.Delivered, s.Runs)
	case s.OutOfOrder != 0:
		bad("%s: %d deliveries or lost ranges out of order", who, s.OutOfOrder)
	case len(s.Runs) != 1 || s.Runs[0].From != 1:
		bad("%s: delivered in runs %v: a gap no lost range covers", who, s.Runs)
	case s.Delivered+s.LostMsgs != int64(s.Runs[0].To):
		bad("%s: %d delivered and %d lost in seqnos 1..%d", who, s.Delivered, s.LostMsgs, s.Runs[0].To)
	}
	for _, l := range s.Lost {
		if !slices.ContainsFunc(r.Events, func(e EventRecord) bool {
			return e.Kind == "lost" && e.Member == s.Sender && e.From == l.From && e.To == l.To
		}) {
			bad("%s: lost range %v without an EventLost naming it", who, l)
		}
	}
}

// checkOther checks the stream of a member that did not stay against the
// stayers' (ref); it returns how many blocks it compared.
func checkOther(r MemberResult, s, ref SenderResult, bad func(string, ...any)) int {
	who := fmt.Sprintf("%s: sender %d", procName(r), s.Index)
	if s.OutOfOrder != 0 {
		bad("%s: %d deliveries or lost ranges out of order", who, s.OutOfOrder)
	}
	if n := senderEntries(r, s.Sender); len(s.Runs) > n {
		bad("%s: delivered in %d runs %v, but the sender entered its view %d times: a gap no lost range covers", who, len(s.Runs), s.Runs, n)
	}
	var span int64
	for _, u := range s.Runs {
		span += int64(u.To - u.From + 1)
		for _, l := range ref.Lost {
			if n := uncovered(overlap(u, l), s.Lost); n > 0 {
				bad("%s: delivered %d messages of %v, which the stayers report lost", who, n, l)
			}
		}
	}
	if s.Delivered+s.LostMsgs != span {
		bad("%s: %d delivered and %d lost in runs %v", who, s.Delivered, s.LostMsgs, s.Runs)
	}
	if !s.Complete || len(s.Runs) == 0 || len(ref.Runs) == 0 || s.Runs[len(s.Runs)-1].To != ref.Runs[0].To {
		bad("%s: did not deliver to the end (runs %v, the stayers' %v, complete %v)", who, s.Runs, ref.Runs, s.Complete)
	}
	compared := 0
	for _, g := range s.Segments {
		i, ok := slices.BinarySearchFunc(ref.Segments, g.Seg, func(x SegmentHash, k uint64) int { return cmp.Compare(x.Seg, k) })
		if !ok || g.N != SegmentSeqnos || ref.Segments[i].N != SegmentSeqnos {
			continue
		}
		compared++
		if ref.Segments[i].Hash != g.Hash {
			bad("%s: seqnos %d..%d differ from the stayers' (hash %s, theirs %s)", who, g.Seg*SegmentSeqnos+1, (g.Seg+1)*SegmentSeqnos, g.Hash, ref.Segments[i].Hash)
		}
	}
	return compared
}

// overlap is a ∩ b (From > To when empty).
func overlap(a, b digest.Range) digest.Range {
	return digest.Range{From: max(a.From, b.From), To: min(a.To, b.To)}
}

// uncovered counts the seqnos of o that no range of lost (disjoint
// ranges) covers.
func uncovered(o digest.Range, lost []digest.Range) int64 {
	if o.From > o.To {
		return 0
	}
	n := int64(o.To - o.From + 1)
	for _, l := range lost {
		if x := overlap(o, l); x.From <= x.To {
			n -= int64(x.To - x.From + 1)
		}
	}
	return n
}

// stayed says r is a stayer for sender: started with the run, never
// excluded, and the sender entered its views once.
func stayed(r MemberResult, sender uint64) bool {
	if r.Restart > 0 || r.Killed || excluded(r) {
		return false
	}
	return senderEntries(r, sender) == 1
}

// excluded says the member was excluded (an EventLeft with an error).
func excluded(r MemberResult) bool {
	return slices.ContainsFunc(r.Events, func(e EventRecord) bool { return e.Kind == "left" && e.Err != "" })
}

// senderEntries counts the times sender entered r's view: views that hold
// it after one that did not (or none, or r's exclusion).
func senderEntries(r MemberResult, sender uint64) int {
	type step struct {
		ns      int64
		present bool
	}
	var steps []step
	for _, v := range r.Views {
		steps = append(steps, step{v.Ns, slices.Contains(v.Members, sender)})
	}
	for _, e := range r.Events {
		if e.Kind == "left" && e.Err != "" {
			steps = append(steps, step{e.Ns, false})
		}
	}
	slices.SortStableFunc(steps, func(a, b step) int { return cmp.Compare(a.ns, b.ns) })
	n, in := 0, false
	for _, s := range steps {
		if s.present && !in {
			n++
		}
		in = s.present
	}
	return n
}

// String is the report as printed: its lines, then the problems or the
// verdict.
func (rep ChaosReport) String() string {
	var b strings.Builder
	for _, l := range rep.Lines {
		b.WriteString(l + "\n")
	}
	if len(rep.Problems) == 0 {
		b.WriteString("chaos check passed: the members that stayed delivered the same sequence of every sender, every gap a reported lost range; the others delivered the same messages from their join points on\n")
		return b.String()
	}
	for _, p := range rep.Problems {
		b.WriteString("chaos check: " + p + "\n")
	}
	return b.String()
}
