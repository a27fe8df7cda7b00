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

// requireSuspicions checks what one surviving node reported through
// Listener.Suspected after victim crashed: every suspicion names victim,
// in a view that still contained it (the view the suspicion was made in),
// at most once, and the calls match the node's Suspicions counter; and
// that it withdrew none (unsusp: its Unsuspected calls): the suspicion
// ended with the view that excluded victim. It returns whether the node
// suspected victim.
func requireSuspicions(t *testing.T, seed, id uint64, susp, unsusp []suspicion, count uint64, victim digest.Member) bool {
	t.Helper()
	require.Empty(t, unsusp, "seed %d node %d: a suspicion of a crashed member withdrawn", seed, id)
	require.Equal(t, count, uint64(len(susp)), "seed %d node %d: one Suspected call per counted suspicion", seed, id)
	for _, s := range susp {
		require.Equal(t, victim, s.m, "seed %d node %d: suspected a live member (view %v)", seed, id, s.view)
		require.True(t, s.view.Contains(victim), "seed %d node %d: suspicion made in view %v without the suspect", seed, id, s.view)
	}
	require.LessOrEqual(t, len(susp), 1, "seed %d node %d: suspected twice: %v", seed, id, susp)
	return len(susp) == 1
}

// TestSuspectedNamesTheCrashed (simulator, fake protocol): a member of four
// (the coordinator in some seeds) crashes under loss; gms names it to the
// survivors' listeners (at least one survivor suspects it, none suspects a
// live member, each suspicion is named once, in the view it was made in,
// before the view that excludes it, and never withdrawn); a later
// graceful leave is no suspicion.
func TestSuspectedNamesTheCrashed(t *testing.T) {
	coordSeen := false
	for seed := range uint64(seeds(60, 12)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newHarness(t, seed, lossyNet(seed, 0.05))
			all := h.joinFour()
			for _, n := range all {
				require.Empty(t, n.susp, "seed %d node %d: suspicion while joining", seed, n.id)
			}
			r := rand.New(rand.NewPCG(seed, 11))
			victim := all[r.IntN(len(all))]
			vm := victim.self()
			coordSeen = coordSeen || victim == all[0]
			crashAt := h.s.Now() + time.Duration(r.IntN(100))*time.Millisecond
			h.s.Schedule(crashAt, func(time.Duration) { h.s.Crash(victim.Member()) })
			surv := without(all, victim)
			h.runUntil(func() bool { return h.s.Now() > crashAt && settled(surv...) },
				crashAt+10*time.Second, "crashed member excluded")
			suspected := 0
			for _, n := range surv {
				if requireSuspicions(t, seed, n.id, n.susp, n.unsusp, n.g.Stats().Suspicions, vm) {
					suspected++
					// Named before the view that excludes it: the view
					// recorded with the suspicion still had it, and a view
					// without it was installed afterwards.
					last := n.views[len(n.views)-1]
					require.False(t, last.Contains(vm))
				}
			}
			require.NotZero(t, suspected, "seed %d: nobody suspected the crashed member", seed)

			// A graceful leave is not a suspicion.
			leaver := surv[r.IntN(len(surv))]
			rest := without(surv, leaver)
			before := map[uint64]int{}
			for _, n := range surv {
				before[n.id] = len(n.susp)
			}
			h.do(h.s.Now(), leaver, func(now time.Duration) { require.NoError(t, leaver.g.Leave(now)) })
			h.runUntil(func() bool { return len(leaver.left) == 1 && settled(rest...) },
				h.s.Now()+10*time.Second, "left")
			require.NoError(t, leaver.left[0])
			for _, n := range surv {
				require.Len(t, n.susp, before[n.id], "seed %d node %d: a leave reported as a suspicion", seed, n.id)
				require.Empty(t, n.unsusp, "seed %d node %d", seed, n.id)
			}
			h.noErrors()
		})
	}
	require.True(t, coordSeen, "no seed crashed the coordinator")
}

// TestSuspectedRealNakack: the same on the real nakack under traffic: a
// member (the coordinator in some seeds) crashes while everyone sends;
// the survivors name it and nobody else, never withdraw it, and end in
// one view without it.
func TestSuspectedRealNakack(t *testing.T) {
	for seed := range uint64(seeds(30, 6)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newNakHarness(t, seed, lossyNet(seed, 0.05))
			all := h.joinFour()
			start := h.s.Now()
			for _, n := range all {
				h.traffic(n, start, start+600*time.Millisecond, 2*time.Millisecond)
			}
			r := rand.New(rand.NewPCG(seed, 13))
			victim := all[int(seed)%len(all)]
			vm := victim.self()
			crashAt := start + time.Duration(50+r.IntN(300))*time.Millisecond
			h.s.Schedule(crashAt, func(time.Duration) { h.s.Crash(victim.Member()) })
			var surv []*node
			for _, n := range all {
				if n != victim {
					surv = append(surv, n)
				}
			}
			h.runUntil(func() bool { return h.s.Now() > crashAt && converged(surv...) && quiet(surv...) },
				crashAt+20*time.Second, "crashed member excluded")
			suspected := 0
			for _, n := range surv {
				if requireSuspicions(t, seed, n.id, n.susp, n.unsusp, n.g.Stats().Suspicions, vm) {
					suspected++
				}
				require.False(t, n.g.View().Contains(vm))
			}
			require.NotZero(t, suspected, "seed %d: nobody suspected the crashed member", seed)
			h.noErrors()
		})
	}
}

// TestNextInLineInAnotherGroup (simulator, fake protocol, no loss): in the
// view [A B C D], B stops hearing the others (they still hear B), suspects
// them all and founds a group of its own, [B]. Meanwhile D leaves and A
// installs [A B C] (numbered like B's view: B misses it) and crashes. C
// hears B's heartbeats all along, so it suspects only A and reports to B,
// the next in line, which ignores reports for a view it does not have (and
// sends C no exclusion notice: C's view is not older than its own). C
// suspects B too once B has installed no new view within
// ViewChangeTimeout of its first report, takes over, and the groups [B]
// and [C] merge.
func TestNextInLineInAnotherGroup(t *testing.T) {
	h := newHarness(t, 1, sim.NetConfig{Jitter: 100 * time.Microsecond})
	all := []*node{h.add(1), h.add(2), h.add(3), h.add(4)}
	h.formGroup(all...)
	vs := byView(all[0].g.View(), all)
	a, b, c, d := vs[0], vs[1], vs[2], vs[3]
	block := func(what sim.Blocked) {
		for _, n := range []*node{a, c, d} {
			require.NoError(t, h.s.Block(n.Member(), b.Member(), what))
		}
	}
	t0 := h.s.Now()
	block(sim.BlockMulticast | sim.BlockUnicast)
	h.do(t0+50*time.Millisecond, d, func(now time.Duration) { require.NoError(t, d.g.Leave(now)) })
	h.runUntil(func() bool {
		return !a.g.View().Contains(d.self()) && c.g.View().Equal(a.g.View())
	}, t0+400*time.Millisecond, "[A B C] at A and C")
	h.s.Crash(a.Member())
	h.runUntil(func() bool { return settled(b) }, t0+1500*time.Millisecond, "B alone")
	block(0)
	require.Equal(t, b.g.View().ID.Counter, c.g.View().ID.Counter, "C's view numbered like B's")
	require.True(t, c.g.View().Contains(b.self()))
	h.runUntil(func() bool { return settled(b, c) }, t0+10*time.Second, "B and C in one view")
	require.Empty(t, c.left)
	require.Empty(t, b.left)
}
