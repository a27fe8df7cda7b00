package gms

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/sim"
	"github.com/stretchr/testify/require"
)

// TestMergeBeforeCutClosedReal (simulator, real nakack): a group of four,
// in view order A, B, C, D, splits into {A,B} and {C,D} after C sent
// 1..k+4, one seqno a datagram. Until a member installs the merge view,
// no copy of C's k..k+2 reaches A, B or D, none of k+3 reaches B and none
// of k+4 reaches A. So A and B cut C at k+4 declaring k..k+2 lost (nobody
// on their side holds them), and neither can close its window: each lacks
// a seqno only the other holds. On C's side D lacks k..k+2, so C keeps
// them. The partition heals and the merge view brings C back into A's and
// B's view before their cut closed: the cut is dropped with what it
// declared lost and Poll has not reported, so A and B fetch k..k+2 from C
// and deliver all of 1..k+4, reporting nothing lost, like D.
func TestMergeBeforeCutClosedReal(t *testing.T) {
	for seed := range uint64(seeds(20, 4)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h, all := joinFourBundling(t, seed, 1)
			vs := byView(all[0].g.View(), all)
			a, b, c, d := vs[0], vs[1], vs[2], vs[3]
			cm := c.self()
			k := uint64(10 + rand.New(rand.NewPCG(seed, 53)).IntN(20))
			last := k + 4
			byID := map[uint64]*node{a.id: a, b.id: b, c.id: c, d.id: d}
			splitAt := map[*node]int{} // views installed when the split began
			merged := func(n *node) bool {
				i, ok := splitAt[n]
				if !ok {
					return false
				}
				shrunk := false
				for _, v := range n.views[i:] {
					shrunk = shrunk || len(v.Members) < 4
					if shrunk && len(v.Members) == 4 {
						return true
					}
				}
				return false
			}
			h.drop = func(from, to digest.Member, dg []byte) bool {
				n := byID[to.ID]
				origin, first, lastSeq, ok := dataSeqs(dg)
				if !ok || origin != cm || n == c || merged(n) {
					return false
				}
				hits := func(s uint64) bool { return first <= s && s <= lastSeq }
				return hits(k) || hits(k+1) || hits(k+2) || (n == b && hits(k+3)) || (n == a && hits(k+4))
			}
			start := h.s.Now()
			for i := range last {
				h.do(start+time.Duration(i+1)*2*time.Millisecond, c, func(now time.Duration) {
					_, err := c.p().Send(fmt.Appendf(nil, "%v/%d", cm, i+1), now)
					require.NoError(t, err)
					c.p().Flush(now)
					c.poll()
				})
			}
			splitFrom := start + time.Duration(last+1)*2*time.Millisecond
			heal := splitFrom + 2*time.Second
			h.do(splitFrom, a, func(time.Duration) {
				for _, n := range all {
					splitAt[n] = len(n.views)
				}
			})
			h.s.Partition(splitFrom, heal, []digest.Member{a.Member(), b.Member()}, []digest.Member{c.Member(), d.Member()})
			h.run(heal)
			for _, n := range []*node{a, b} {
				mc := n.g.mcuts[cm]
				require.NotNil(t, mc, "seed %d node %d: no cut of C applied by the heal\n%s", seed, n.id, h.dump())
				require.Equal(t, last, mc.cut, "seed %d node %d", seed, n.id)
				require.Equal(t, []Range{{From: k, To: k + 2}}, mc.lost, "seed %d node %d: the cut declares k..k+2 lost", seed, n.id)
				_, open := n.p().WindowState(cm)
				require.True(t, open, "seed %d node %d: C's window closed before the merge", seed, n.id)
			}
			h.runUntil(func() bool { return converged(all...) && quiet(all...) && allDelivered(all...) },
				heal+10*time.Second, "merged, everything delivered")
			for _, n := range []*node{a, b, d} {
				require.Empty(t, n.app.lost[cm], "seed %d node %d: C's messages reported lost though C, back, holds them", seed, n.id)
				st := n.app.state[cm]
				require.NotNil(t, st, "seed %d node %d", seed, n.id)
				require.Equal(t, senderFold{last: last, hash: st.hash, count: last}, *st, "seed %d node %d", seed, n.id)
			}
			h.noNotFound()
			h.noErrors()
		})
	}
}

// joinFourBundling is joinFour on a network with 200µs of jitter, the
// members bundling at most maxBundle messages a datagram.
func joinFourBundling(t *testing.T, seed uint64, maxBundle int) (*harness, []*node) {
	h := newNakHarness(t, seed, sim.NetConfig{Jitter: 200 * time.Microsecond})
	h.ntw = func(c *nakack.Config) { c.MaxBundle = maxBundle }
	return h, h.joinFour()
}
