package gms

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/stretchr/testify/require"
)

// joinPoint returns where n's window for sender m started: its delivered
// value in the first view n's nakack installed with a window for m (the
// join digest's entry).
func joinPoint(t *testing.T, n *node, m digest.Member) uint64 {
	t.Helper()
	h := n.p().History()
	require.Equal(t, uint64(h.Len()), h.Total(), "node %d: digest history rolled over", n.id)
	for _, r := range h.Records() {
		if !strings.HasPrefix(r.Reason, "view ") {
			continue
		}
		if e, ok := r.Digest.Lookup(m); ok {
			return e.Delivered
		}
	}
	t.Fatalf("node %d: no view with a window for %v", n.id, m)
	return 0
}

// TestJoinInsideFragmentedMessageReal: two members join (at the same
// instant, from the seed) a group of three while member 2 sends a small
// or fragmented message (2-5 fragments of about 8KB) every millisecond,
// on the real nakack under 0-5% loss, duplication and reordering. A
// joiner's window for member 2 starts at its join digest's point, which
// is never inside a fragmented message: a coordinator reassembling one
// reports the seqno before it, and the joiner delivers it whole (before
// nakack's digests stopped at message boundaries, 20 of the 80 join
// points fell inside one and the joiner skipped it). Every joiner must
// deliver exactly member 2's messages that begin after its join point,
// whole and in order, report nothing lost and not stall; the founders
// deliver every message. Seeds replay (go test -run
// TestJoinInsideFragmentedMessageReal).
func TestJoinInsideFragmentedMessageReal(t *testing.T) {
	before := 0 // join points just before a fragmented message
	for seed := range uint64(seeds(40, 10)) {
		h := newNakHarness(t, seed, lossyNet(seed, 0.05))
		founders := []*node{h.add(1), h.add(2), h.add(3)}
		h.join(0, founders[0])
		h.join(60*time.Millisecond, founders[1:]...)
		h.runUntil(func() bool { return converged(founders...) && quiet(founders...) }, 5*time.Second, "founded")
		joiners := []*node{h.add(4), h.add(5)}
		all := append(slices.Clone(founders), joiners...)
		snd := founders[1]
		sm := snd.self()
		r := rand.New(rand.NewPCG(seed, 21))
		sizes := rand.New(rand.NewPCG(seed, 22))
		start := h.s.Now()
		stop := start + 400*time.Millisecond
		ext := map[uint64]uint64{} // member 2's messages: first seqno -> last
		var step func(now time.Duration)
		step = func(now time.Duration) {
			if p := snd.p(); p != nil && snd.g.Status() == StatusMember {
				pl := fmt.Appendf(nil, "%v/%d/", sm, p.NextSeq())
				if sizes.IntN(3) != 0 {
					pl = append(pl, bytes.Repeat([]byte{'f'}, 8000*(1+sizes.IntN(4)))...)
				}
				if seq, err := p.Send(pl, now); err == nil {
					ext[seq] = p.NextSeq() - 1
				}
				p.Flush(now)
				snd.poll()
			}
			if now+time.Millisecond < stop {
				h.do(now+time.Millisecond, snd, step)
			}
		}
		h.do(start, snd, step)
		h.join(start+time.Duration(50+r.IntN(250))*time.Millisecond, joiners...)
		h.runUntil(func() bool {
			return h.s.Now() > stop && converged(all...) && quiet(all...) && allDelivered(all...)
		}, stop+20*time.Second, "joined and delivered")

		firsts := make([]uint64, 0, len(ext))
		for f := range ext {
			firsts = append(firsts, f)
		}
		slices.Sort(firsts)
		for _, n := range all {
			from := uint64(0)
			if slices.Contains(joiners, n) {
				from = joinPoint(t, n, sm)
				for _, f := range firsts {
					require.False(t, f <= from && from < ext[f], "seed %d: node %d: join point %d inside message %d..%d", seed, n.id, from, f, ext[f])
					if f == from+1 && ext[f] > f {
						before++
					}
				}
			}
			var want []uint64
			for _, f := range firsts {
				if f > from {
					want = append(want, f)
				}
			}
			require.Equal(t, want, n.app.delivered[sm], "seed %d: node %d (join point %d)", seed, n.id, from)
			require.Empty(t, n.app.lost[sm], "seed %d: node %d", seed, n.id)
			require.Zero(t, n.p().Stats().LostRanges, "seed %d: node %d", seed, n.id)
			// fakeApp's fold takes a fragmented message for one seqno:
			// its complaints about member 2 are checked above.
			requireComplaintsOnlyAbout(t, seed, n, sm)
		}
		h.noNotFound()
		if t.Failed() {
			return
		}
	}
	t.Logf("joiners whose join point fell just before a fragmented message: %d", before)
	require.NotZero(t, before, "no join point just before a fragmented message")
}
