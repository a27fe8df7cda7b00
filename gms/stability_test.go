package gms

import (
	"fmt"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/sim"
	"github.com/stretchr/testify/require"
)

// checkPurges adds a check, run after every simulator event, that no
// member's window (own included) is ever purged past what every member of
// its view (same view id) has delivered, nor past a digest captured
// anywhere for a JoinRsp or a state transfer (Delivered) or a merge (Low)
// while that capture is held. Only raises of a window's Low count as
// purges (a window created by a join digest starts where it is given).
// It returns how many purges it saw.
func checkPurges(h *harness) *int {
	type key struct{ at, sender digest.Member }
	lows := map[key]uint64{}
	purges := new(int)
	check := func(time.Duration) error {
		for _, n := range h.nodes {
			p := n.p()
			if p == nil || !h.s.Up(n.Member()) {
				continue
			}
			for _, s := range h.nodes {
				if s.g.Protocol() == nil {
					continue
				}
				sm := s.self()
				e, ok := p.WindowState(sm)
				if !ok {
					continue
				}
				k := key{n.self(), sm}
				prev, seen := lows[k]
				lows[k] = e.Low
				if !seen || e.Low <= prev {
					continue
				}
				*purges++
				v := n.g.View()
				for _, o := range h.nodes {
					op := o.p()
					if op == nil || !h.s.Up(o.Member()) {
						continue
					}
					if o.g.View().ID == v.ID && v.Contains(o.self()) {
						if oe, ok := op.WindowState(sm); ok && e.Low > oe.Delivered {
							return fmt.Errorf("%v purged %v to %d past %v's delivered %d (view %v)", n.self(), sm, e.Low, o.self(), oe.Delivered, v)
						}
					}
					for _, c := range o.caps {
						ce, ok := c.d.Lookup(sm)
						if !ok {
							continue
						}
						bound := ce.Delivered
						if c.merge {
							bound = ce.Low
						}
						if e.Low > bound {
							return fmt.Errorf("%v purged %v to %d past %v's capture at %d", n.self(), sm, e.Low, o.self(), bound)
						}
					}
				}
			}
		}
		return nil
	}
	require.NoError(h.t, check(h.s.Now())) // the windows as they are now
	h.s.AddCheck(check)
	return purges
}

// TestStabilityNeverPurgesPastCapture is the other half of seed 002, on the
// real nakack with real STABLE/STABILITY traffic: without a forced purge
// no member ever purges a sender past what every member of its view
// delivered, nor past a digest captured for a JoinRsp while it is held
// (checked after every simulator event), so the purge of C to 45 that the
// seed describes cannot happen. "seed 002": the seed's schedule (A's digest
// lacks C while C sends 50 and D joins); D is given C where A had
// delivered it, C is purged only once D holds the view, and nothing is
// lost. "joins under traffic": joins while every member sends under loss.
func TestStabilityNeverPurgesPastCapture(t *testing.T) {
	t.Run("seed 002", func(t *testing.T) {
		x := newSeed002(t, 5)
		h, a, b, c, d, cm := x.h, x.a, x.b, x.c, x.d, x.cm
		purges := checkPurges(h)
		joinAt := h.s.Now()
		h.join(joinAt, d)
		h.traffic(c, joinAt, joinAt+600*time.Millisecond, 3*time.Millisecond)
		h.do(joinAt+400*time.Millisecond, a, func(time.Duration) { delete(a.hide, cm) })
		h.runUntil(func() bool { return converged(a, b, c, d) && quiet(a, b, c, d) }, joinAt+5*time.Second, "v3={A,B,C,D}")
		h.runUntil(func() bool { return h.s.Now() > joinAt+700*time.Millisecond && allDelivered(a, b, c, d) }, joinAt+5*time.Second, "delivered")
		h.run(h.s.Now() + 300*time.Millisecond)
		require.NotEmpty(t, x.rsps)
		for _, n := range []*node{a, b, c, d} {
			e, _ := n.p().WindowState(cm)
			require.Greater(t, e.Low, uint64(50), "stability never purged C at %d", n.id)
			require.Zero(t, n.p().Stats().LostRanges)
		}
		require.NotZero(t, *purges)
		h.noNotFound()
		h.noErrors()
	})
	t.Run("the check sees a forced purge", func(t *testing.T) {
		x := newSeed002(t, 5)
		h, c := x.h, x.c
		checkPurges(h)
		h.do(h.s.Now(), c, func(now time.Duration) {
			for i := 0; i < 10; i++ {
				_, err := c.p().Send([]byte{byte(i)}, now)
				require.NoError(t, err)
			}
			c.p().Flush(now)
			c.poll()
			_, err := c.p().ForcePurge(c.self(), 60)
			require.NoError(t, err)
		})
		require.ErrorContains(t, h.s.RunUntil(h.s.Now()+100*time.Millisecond), "purged")
	})
	for seed := range uint64(seeds(20, 4)) {
		t.Run(fmt.Sprintf("joins under traffic/seed%d", seed), func(t *testing.T) {
			h := newNakHarness(t, seed, lossyNet(seed, 0.1))
			a, b, c, d := h.add(1), h.add(2), h.add(3), h.add(4)
			all := []*node{a, b, c, d}
			purges := checkPurges(h)
			h.join(0, a)
			h.join(50*time.Millisecond, b, c)
			for _, n := range all {
				h.traffic(n, 200*time.Millisecond, 1500*time.Millisecond, 2*time.Millisecond)
			}
			h.join(600*time.Millisecond, d)
			h.runUntil(func() bool { return converged(all...) && quiet(all...) }, 5*time.Second, "joined")
			h.run(max(h.s.Now(), 1600*time.Millisecond))
			h.s.SetNet(sim.NetConfig{})
			h.runUntil(func() bool { return allDelivered(all...) }, h.s.Now()+10*time.Second, "drained")
			require.NotZero(t, *purges, "stability never ran")
			for _, n := range all {
				require.Empty(t, n.app.lost)
			}
			h.noNotFound()
			h.noErrors()
		})
	}
}
