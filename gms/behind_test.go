package gms

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/sim"
	"github.com/stretchr/testify/require"
)

// TestMemberLeftBehindGetsView (simulator, fake protocol, loss up to 5%,
// every member sending): in a group of four a view change happens (even
// seeds: a fifth member joins; odd seeds: a member other than the
// coordinator and M crashes) and M, a member the new view keeps, never
// receives it: every VIEW datagram to M is dropped while the view change
// is under way, so the coordinator gives up waiting for M's
// acknowledgement (ViewChangeTimeout) and counts M as a member while M
// stays in its old view, heartbeating (nobody suspects it). Then the
// first k VIEW datagrams the coordinator resends to M are dropped too (k
// drawn from 0..3).
//
// The coordinator answers M's heartbeats, which name the old view, with
// its view: M installs it within k+1 heartbeat intervals plus a margin for
// random loss, and the group ends in one view with nothing pending (the
// crashed member's cut, which needs M's report, closes); stability, which
// stopped while M's STABLE named the old view, resumes (the coordinator
// purges its own messages again); nobody is excluded or leaves.
func TestMemberLeftBehindGetsView(t *testing.T) {
	for seed := range uint64(seeds(40, 8)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newHarness(t, seed, lossyNet(seed, 0.05))
			all := h.joinFour()
			vs := byView(all[0].g.View(), all)
			r := rand.New(rand.NewPCG(seed, 43))
			a := vs[0]
			p := r.Perm(3)
			m, x := vs[1+p[0]], vs[1+p[1]]
			mm := m.self()
			start := h.s.Now()
			for _, n := range all {
				h.traffic(n, start, start+time.Hour, 5*time.Millisecond)
			}
			join := seed%2 == 0
			final := all
			at := start + time.Duration(50+r.IntN(200))*time.Millisecond
			if join {
				j := h.add(5)
				h.join(at, j)
				h.traffic(j, at, at+time.Hour, 5*time.Millisecond)
				final = append(final, j)
			} else {
				h.s.Schedule(at, func(time.Duration) { h.s.Crash(x.Member()) })
				final = without(all, x)
			}
			old := m.g.View().ID
			k := r.IntN(4)
			vcSeen, vcDone := false, time.Duration(-1)
			resends := 0
			h.drop = func(from, to digest.Member, b []byte) bool {
				if to != m.Member() {
					return false
				}
				msg := membershipMsg(b)
				if msg == nil || msg.typ != typeView || msg.kind != 0 {
					return false
				}
				if vcDone < 0 {
					return true
				}
				resends++
				return resends <= k
			}
			h.s.AddCheck(func(now time.Duration) error {
				if !vcSeen && a.g.coord.vc != nil {
					vcSeen = true
				}
				if vcSeen && vcDone < 0 && a.g.coord.vc == nil {
					vcDone = now
				}
				return nil
			})
			h.runUntil(func() bool { return vcDone >= 0 }, at+10*time.Second, "view change given up")
			require.Equal(t, uint64(1), a.g.Stats().ViewChangeAborts, "M never acknowledged")
			require.Equal(t, old, m.g.View().ID, "M is left in its old view")
			require.True(t, a.g.View().Contains(mm))
			low := a.fp.wins[a.self()].low
			h.runUntil(func() bool { return m.g.View().ID == a.g.View().ID }, vcDone+10*time.Second, "M installed the view")
			hb := a.g.cfg.HeartbeatInterval
			require.LessOrEqual(t, h.s.Now()-vcDone, time.Duration(k+1)*hb+5*hb,
				"view change given up at %v, M caught up at %v (%d resends dropped)", vcDone, h.s.Now(), k)
			require.NotZero(t, a.g.Stats().ViewsResent) // datagrams dropped, duplicates included
			h.runUntil(func() bool { return settled(final...) }, h.s.Now()+10*time.Second, "one view")
			h.runUntil(func() bool { return a.fp.wins[a.self()].low > low }, h.s.Now()+5*time.Second, "purging resumed")
			for _, n := range final {
				require.Empty(t, n.left, "node %d", n.id)
				require.Zero(t, n.g.Stats().BehindExcluded, "node %d", n.id)
			}
			require.Equal(t, mm, m.self())
			h.noErrors()
		})
	}
}

// TestMemberMissingMergeViewExcluded (simulator, fake protocol, no random
// loss): {A,B} and {C,D} are partitioned and heal; A leads the merge and
// D never receives the merge view (every merge VIEW to that incarnation of
// D is dropped), so it stays in C's old view while A's merge view counts
// it. A regular view cannot bring D forward (it lacks the merge digest):
// once the merge is over (MergeTimeout) A excludes D, D learns it (from
// C's exclusion notice: A is not in D's view) and rejoins as a new
// incarnation, and all four end in one view with nothing pending. Nobody
// else leaves.
func TestMemberMissingMergeViewExcluded(t *testing.T) {
	for seed := range uint64(seeds(10, 3)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newHarness(t, seed, sim.NetConfig{Jitter: 300 * time.Microsecond})
			all := h.joinFour()
			a, b, c, d, heal := h.splitPairs(all)
			dm := d.self()
			cv := d.g.View().ID
			d.rejoin = true
			h.drop = func(from, to digest.Member, bs []byte) bool {
				m := membershipMsg(bs)
				return to == d.Member() && d.self() == dm && m != nil && m.typ == typeView && m.kind == 1
			}
			h.runUntil(func() bool { return c.g.View().Contains(a.self()) }, heal+5*time.Second, "merged")
			require.Equal(t, cv, d.g.View().ID)
			h.runUntil(func() bool { return len(d.left) > 0 }, h.s.Now()+10*time.Second, "D excluded")
			require.Equal(t, []error{ErrExcluded}, d.left)
			require.Equal(t, uint64(1), a.g.Stats().BehindExcluded)
			h.runUntil(func() bool { return d.self() != dm && settled(all...) },
				h.s.Now()+10*time.Second, "one view")
			require.Equal(t, a.self(), a.g.View().Coord().Member)
			for _, n := range []*node{a, b, c} {
				require.Empty(t, n.left, "node %d", n.id)
			}
			h.noErrors()
		})
	}
}
