package gms

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/sim"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// membershipMsg decodes a membership datagram seen by a tap (nil for the
// fake protocol's datagrams and anything undecodable).
func membershipMsg(b []byte) *msg {
	if len(b) < 3 || b[0] == fakeMagic || !IsMembership(wire.Type(b[2])) {
		return nil
	}
	m, err := decode(b, 7)
	if err != nil {
		return nil
	}
	return m
}

// byView returns the node of every member of v, in view order.
func byView[N interface{ self() digest.Member }](v View, all []N) []N {
	var ns []N
	for _, p := range v.Members {
		for _, n := range all {
			if n.self() == p.Member {
				ns = append(ns, n)
			}
		}
	}
	return ns
}

// TestUnsuspectWhenHeardAgain (simulator, fake protocol, no loss): in a
// group of four a member R stops hearing m (m's datagrams to R are
// dropped; everyone else hears m) and suspects it, and m stays in the
// view: in even seeds m is the coordinator and the next in line, whom R
// reports it to, probes it and hears the answer; in odd seeds m is
// another member and R's reports to the coordinator are dropped (a
// coordinator excludes on the first report it gets). When m's datagrams
// reach R again R withdraws the suspicion: one Unsuspected(m), within one
// failure-detection interval of the first datagram from m, in the view
// the suspicion was made in; no SUSPECT naming m after that datagram; no
// view change anywhere and nobody else suspects anyone. A second outage
// makes a second Suspected, withdrawn the same way.
func TestUnsuspectWhenHeardAgain(t *testing.T) {
	for seed := range uint64(seeds(60, 12)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newHarness(t, seed, lossyNet(seed, 0))
			all := h.joinFour()
			v := all[0].g.View()
			vs := byView(v, all)
			r := rand.New(rand.NewPCG(seed, 17))
			coordSuspect := seed%2 == 0
			var sus, rep *node
			if coordSuspect {
				sus, rep = vs[0], vs[2+r.IntN(2)]
			} else {
				p := r.Perm(3)
				sus, rep = vs[1+p[0]], vs[1+p[1]]
			}
			sm := sus.self()
			// blocked: m's datagrams to R are dropped; healed: the outage
			// of this round is over.
			blocked, healed := false, false
			h.drop = func(from, to digest.Member, b []byte) bool {
				if blocked && from == sus.Member() && to == rep.Member() {
					return true
				}
				if !coordSuspect && from == rep.Member() && to == vs[0].Member() {
					if m := membershipMsg(b); m != nil && m.typ == typeSuspect {
						return true
					}
				}
				return false
			}
			// R's reports naming m, and the first datagram from m that
			// reaches R after the outage.
			var reports []time.Duration
			heard := false
			var heardAt time.Duration
			h.s.AddTap(func(ev sim.TapEvent) {
				switch {
				case ev.Kind == sim.TapSend && ev.From == rep.Member():
					if m := membershipMsg(ev.Data); m != nil && m.typ == typeSuspect && slices.Contains(m.members, sm) {
						reports = append(reports, ev.At)
						if heard {
							h.s.Fail(fmt.Errorf("SUSPECT of %v sent after hearing from it at %v", sm, heardAt))
						}
					}
				case ev.Kind == sim.TapDeliver && ev.From == sus.Member() && ev.To == rep.Member() && healed && !heard:
					if membershipMsg(ev.Data) != nil {
						heard, heardAt = true, ev.At
					}
				}
			})
			var suspAt, unsuspAt []time.Duration
			h.s.AddCheck(func(now time.Duration) error {
				if len(rep.susp) > len(suspAt) {
					suspAt = append(suspAt, now)
				}
				if len(rep.unsusp) > len(unsuspAt) {
					unsuspAt = append(unsuspAt, now)
				}
				return nil
			})
			nviews := make([]int, len(all))
			for i, n := range all {
				nviews[i] = len(n.views)
			}
			for round := 1; round <= 2; round++ {
				reports, heard, healed = reports[:0], false, false
				start := h.s.Now() + time.Duration(r.IntN(100))*time.Millisecond
				h.s.Schedule(start, func(time.Duration) { blocked = true })
				h.runUntil(func() bool { return len(rep.susp) == round }, start+2*time.Second, "suspected")
				heal := h.s.Now() + time.Duration(r.IntN(800))*time.Millisecond
				h.s.Schedule(heal, func(time.Duration) { blocked, healed = false, true })
				h.runUntil(func() bool { return len(rep.unsusp) == round }, heal+time.Second, "unsuspected")
				require.NotEmpty(t, reports, "round %d: the suspicion was reported", round)
				require.True(t, heard, "round %d", round)
				require.GreaterOrEqual(t, heardAt, heal, "round %d", round)
				require.LessOrEqual(t, unsuspAt[round-1]-heardAt, rep.g.fdInterval(),
					"round %d: withdrawn at %v, heard at %v", round, unsuspAt[round-1], heardAt)
				// A while later: still withdrawn, m watched again, nothing
				// else happened.
				h.run(h.s.Now() + 2*time.Second)
				require.Len(t, rep.susp, round)
				require.Len(t, rep.unsusp, round)
				require.Equal(t, uint64(round), rep.g.Stats().Unsuspicions, "round %d", round)
				for i := range round {
					require.Equal(t, suspicion{sm, v}, rep.susp[i], "round %d", round)
					require.Equal(t, suspicion{sm, v}, rep.unsusp[i], "round %d", round)
					require.Less(t, suspAt[i], unsuspAt[i])
				}
				require.Empty(t, rep.g.suspects())
				require.True(t, converged(all...), "round %d\n%s", round, h.dump())
				for i, n := range all {
					require.Len(t, n.views, nviews[i], "round %d node %d: a view change", round, n.id)
					if n != rep {
						require.Empty(t, n.susp, "round %d node %d", round, n.id)
						require.Empty(t, n.unsusp, "round %d node %d", round, n.id)
					}
				}
			}
			require.Equal(t, uint64(2), rep.g.Stats().Suspicions)
			require.Equal(t, uint64(2), rep.g.Stats().Unsuspicions)
			for _, n := range all {
				if n != rep {
					require.Zero(t, n.g.Stats().Unsuspicions, "node %d", n.id)
				}
			}
			h.noErrors()
		})
	}
}

// TestNoUnsuspectAfterExclusion (simulator, fake protocol, loss up to 5%):
// a member R stops hearing m, another member than the coordinator (R may
// be the coordinator), suspects it, and the coordinator excludes m on R's
// report. m's datagrams reach R again only after R installed the view
// without m; m, excluded, rejoins as a new incarnation (if the view that
// excludes m is lost, the coordinator's exclusion notice tells m). R's
// suspicion ended with the view: no Unsuspected anywhere, one
// Suspected(m) at R.
func TestNoUnsuspectAfterExclusion(t *testing.T) {
	for seed := range uint64(seeds(60, 12)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newHarness(t, seed, lossyNet(seed, 0.05))
			all := h.joinFour()
			v := all[0].g.View()
			vs := byView(v, all)
			r := rand.New(rand.NewPCG(seed, 19))
			p := r.Perm(3)
			sus := vs[1+p[0]]
			rep := vs[(1+p[1])*r.IntN(2)] // the coordinator in some seeds
			sus.rejoin = true
			sm := sus.self()
			blocked := false
			h.drop = func(from, to digest.Member, b []byte) bool {
				return blocked && from == sus.Member() && to == rep.Member()
			}
			start := h.s.Now() + time.Duration(r.IntN(100))*time.Millisecond
			h.s.Schedule(start, func(time.Duration) { blocked = true })
			h.runUntil(func() bool { return !rep.g.View().Contains(sm) }, start+5*time.Second, "excluded at R")
			blocked = false
			h.runUntil(func() bool { return sus.self() != sm && settled(all...) },
				h.s.Now()+10*time.Second, "rejoined")
			h.run(h.s.Now() + time.Second)
			require.Equal(t, []error{ErrExcluded}, sus.left)
			require.Len(t, rep.susp, 1, "R suspected m once")
			require.Equal(t, suspicion{sm, v}, rep.susp[0])
			for _, n := range all {
				require.Empty(t, n.unsusp, "node %d", n.id)
				require.Zero(t, n.g.Stats().Unsuspicions, "node %d", n.id)
				for _, s := range n.susp {
					require.Equal(t, sm, s.m, "node %d suspected a live member", n.id)
				}
			}
			h.noErrors()
		})
	}
}

// TestCoordinatorKeepsQueuedExclusion (simulator, fake protocol, no loss):
// the coordinator suspects m while a view change (a join) waits for an
// acknowledgement that never comes (A's acks are dropped), so m's
// exclusion stays queued; m's datagrams reach the coordinator again
// before that view change times out. The exclusion wins: the coordinator
// does not withdraw the suspicion (no Unsuspected anywhere), and the view
// that follows the timed-out change excludes m.
func TestCoordinatorKeepsQueuedExclusion(t *testing.T) {
	for seed := range uint64(seeds(60, 12)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newHarness(t, seed, lossyNet(seed, 0))
			all := []*node{h.add(1), h.add(2), h.add(3), h.add(4)}
			joiner := h.add(5)
			h.formGroup(all...)
			v := all[0].g.View()
			vs := byView(v, all)
			r := rand.New(rand.NewPCG(seed, 23))
			p := r.Perm(3)
			coord, sus, a := vs[0], vs[1+p[0]], vs[1+p[1]]
			sm := sus.self()
			blocked := true
			h.drop = func(from, to digest.Member, b []byte) bool {
				if to != coord.Member() {
					return false
				}
				if blocked && from == sus.Member() {
					return true
				}
				if from == a.Member() && coord.g.Stats().ViewChangeAborts == 0 {
					m := membershipMsg(b)
					return m != nil && m.typ == typeViewAck
				}
				return false
			}
			heard := false
			var heardAt time.Duration
			h.s.AddTap(func(ev sim.TapEvent) {
				if ev.Kind == sim.TapDeliver && ev.From == sus.Member() && ev.To == coord.Member() && !blocked && !heard &&
					membershipMsg(ev.Data) != nil {
					heard, heardAt = true, ev.At
				}
			})
			exclAt := time.Duration(-1)
			h.s.AddCheck(func(now time.Duration) error {
				if exclAt < 0 && !coord.g.View().Contains(sm) {
					exclAt = now
				}
				return nil
			})
			h.join(h.s.Now(), joiner)
			h.runUntil(func() bool { return len(coord.susp) == 1 }, h.s.Now()+2*time.Second, "suspected")
			require.NotNil(t, coord.g.coord.vc, "the join's view change is still waiting")
			require.Contains(t, coord.g.coord.excl, sm, "exclusion queued")
			heal := h.s.Now() + time.Duration(r.IntN(600))*time.Millisecond
			h.s.Schedule(heal, func(time.Duration) { blocked = false })
			h.runUntil(func() bool { return exclAt >= 0 }, heal+5*time.Second, "excluded")
			require.True(t, heard)
			require.Less(t, heardAt+coord.g.fdInterval(), exclAt,
				"the coordinator heard m at %v, a check before the exclusion at %v", heardAt, exclAt)
			require.Equal(t, uint64(1), coord.g.Stats().ViewChangeAborts)
			surv := append([]*node{joiner}, without(all, sus)...)
			h.runUntil(func() bool { return settled(surv...) }, h.s.Now()+10*time.Second, "survivors")
			require.Equal(t, []error{ErrExcluded}, sus.left)
			require.Equal(t, []suspicion{{sm, coord.susp[0].view}}, coord.susp)
			require.True(t, coord.susp[0].view.Contains(sm))
			for _, n := range append(all, joiner) {
				require.Empty(t, n.unsusp, "node %d", n.id)
				require.Zero(t, n.g.Stats().Unsuspicions, "node %d", n.id)
			}
			h.noErrors()
		})
	}
}
