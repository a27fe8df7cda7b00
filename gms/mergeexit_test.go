package gms

import (
	"fmt"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/sim"
	"github.com/stretchr/testify/require"
)

// Ways a coordinator stops taking part in a merge
// (TestMergeEndsWhenCoordinatorGoes).
const (
	mergeLeaderLeaves = iota
	mergeLeaderExcluded
	mergeLeaderLeavesInstalled
	mergeOtherLeaves
)

var mergeExitNames = []string{"leader leaves", "leader excluded", "leader leaves after the merge view", "other leaves"}

// TestMergeEndsWhenCoordinatorGoes (simulator, fake protocol, no random
// loss, jitter): {A,B} and {C,D} are partitioned and heal; A (smaller id)
// leads the merge and C holds its capture for it. Then one of them stops
// coordinating while the merge is under way:
//
//   - leader leaves: C's MERGE_RSP never reaches A, and A leaves;
//   - leader excluded: the same, but B stops hearing A, takes over and
//     excludes it (A learns it from B's view);
//   - leader leaves after the merge view: every member installed the merge
//     view but D's acknowledgement never reaches A (C still holds its
//     capture, as until every member acknowledged), and A leaves;
//   - other leaves: C's MERGE_RSP never reaches A, and C leaves.
//
// The remaining coordinator releases its capture (its hold, or its merge
// as leader) within two heartbeat intervals of the other's Leave (or, when
// excluded, of its exclusion), not at its merge deadline (2×MergeTimeout
// for C, MergeTimeout for A); the members left end in one view with nothing
// pending.
func TestMergeEndsWhenCoordinatorGoes(t *testing.T) {
	for _, how := range []int{mergeLeaderLeaves, mergeLeaderExcluded, mergeLeaderLeavesInstalled, mergeOtherLeaves} {
		for seed := range uint64(seeds(10, 3)) {
			t.Run(fmt.Sprintf("%s/seed%d", mergeExitNames[how], seed), func(t *testing.T) {
				h := newHarness(t, seed, sim.NetConfig{Jitter: 300 * time.Microsecond})
				all := h.joinFour()
				// A (node 1, the smallest id) and C coordinate the two sides.
				a, b, c, d, heal := h.splitPairs(all)
				require.Equal(t, a.self(), a.g.View().Coord().Member)
				require.Equal(t, c.self(), c.g.View().Coord().Member)
				muted := false // A's datagrams to B are dropped
				h.drop = func(from, to digest.Member, bs []byte) bool {
					if muted && from == a.Member() && to == b.Member() {
						return true
					}
					m := membershipMsg(bs)
					if m == nil {
						return false
					}
					if how == mergeLeaderLeavesInstalled {
						return m.typ == typeViewAck && from == d.Member() && to == a.Member()
					}
					return m.typ == typeMergeRsp && m.kind == 0 && from == c.Member() && to == a.Member()
				}
				// ready: C holds its capture for A's merge (and, after the
				// merge view, every member installed it and got what it
				// lacked of the other side's messages: the fake protocol
				// learns what A purged only from A's MSG_NOT_FOUND, not
				// from the merge digest's Low as nakack does, and a leaver
				// cut by the next view no longer answers).
				ready := func() bool {
					if c.g.hold == nil || a.g.merge == nil {
						return false
					}
					if how != mergeLeaderLeavesInstalled {
						return true
					}
					mv := a.g.merge.view
					return a.g.merge.installed && b.g.View().Equal(mv) && c.g.View().Equal(mv) && d.g.View().Equal(mv) &&
						drained(all...)
				}
				h.runUntil(ready, heal+5*time.Second, "merge under way")
				hb := a.g.cfg.HeartbeatInterval
				goneAt := time.Duration(-1)
				var gone, stays *node
				switch how {
				case mergeLeaderLeaves, mergeLeaderLeavesInstalled:
					gone, stays = a, c
					h.do(h.s.Now(), a, func(now time.Duration) {
						require.NoError(t, a.g.Leave(now))
						goneAt = now
					})
				case mergeLeaderExcluded:
					gone, stays = a, c
					muted = true
					h.runUntil(func() bool { return len(a.left) > 0 }, h.s.Now()+a.g.cfg.MergeTimeout, "A excluded")
					require.Equal(t, []error{ErrExcluded}, a.left)
					goneAt = h.s.Now()
				case mergeOtherLeaves:
					gone, stays = c, a
					h.do(h.s.Now(), c, func(now time.Duration) {
						require.NoError(t, c.g.Leave(now))
						goneAt = now
					})
				}
				released := func() bool {
					if goneAt < 0 {
						return false
					}
					if stays == c {
						return c.g.hold == nil && len(c.fp.captures) == 0
					}
					return a.g.merge == nil && len(a.fp.captures) == 0
				}
				h.runUntil(released, h.s.Now()+3*a.g.cfg.MergeTimeout, "capture released")
				require.LessOrEqual(t, h.s.Now()-goneAt, 2*hb, "released %v after %v went", h.s.Now()-goneAt, gone.id)
				rest := without(all, gone)
				h.runUntil(func() bool { return settled(rest...) }, h.s.Now()+20*time.Second, "one view")
				h.runUntil(func() bool { return len(gone.left) > 0 }, h.s.Now()+gone.g.cfg.LeaveTimeout, "gone left")
				h.noErrors()
			})
		}
	}
}
