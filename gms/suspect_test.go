package gms

import (
	"fmt"
	"math/rand/v2"
	"slices"
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

// TestProbeAttemptsConfig: ProbeAttempts defaults to 3, keeps a positive
// value and refuses a negative one.
func TestProbeAttemptsConfig(t *testing.T) {
	base := func(attempts int) Config {
		return Config{Group: 7, ID: 1, Addr: "1", ProbeAttempts: attempts, Logger: discardLogger,
			NewProtocol: func(self digest.Member, now time.Duration) (Protocol, error) {
				return newFakeProto(self, newFakeApp(), now), nil
			}}
	}
	for _, tc := range []struct{ set, want int }{{0, 3}, {1, 1}, {5, 5}} {
		g, err := New(base(tc.set))
		require.NoError(t, err)
		require.Equal(t, tc.want, g.cfg.ProbeAttempts, "ProbeAttempts %d", tc.set)
	}
	_, err := New(base(-1))
	require.ErrorContains(t, err, "ProbeAttempts")
}

// TestLostProbeNoSuspicion (simulator, fake protocol, no loss but the
// drop hook): in a group of four, R stops hearing m (every datagram from
// m to R is dropped but m's probe answers) and probes it; the first probe
// R sends m, or m's first answer, or both the first probe and the answer
// to the second, are dropped too, so only a later probe is answered.
// With the default ProbeAttempts (3) R never suspects m: the answer ends the
// probing, and while the outage lasts (2s) R probes m again after each
// SuspectTimeout of silence, which the (no longer dropped) answers end.
// Nobody suspects anyone, no view change. With ProbeAttempts 1 (one
// unanswered probe suspects, the behaviour before ProbeAttempts) the same
// outage makes R suspect m once its first probe went unanswered, and so
// with ProbeAttempts 2 when the first two went unanswered.
func TestLostProbeNoSuspicion(t *testing.T) {
	for _, tc := range []struct {
		name     string
		probes   []int // 1-based probes R→m dropped (the first probing)
		answers  []int // 1-based answers m→R dropped
		attempts int   // 0: the default 3
		suspect  bool
		sent     int // probes R sends m before the first answer arrives, or before suspecting
	}{
		{name: "first probe lost", probes: []int{1}, sent: 2},
		{name: "first answer lost", answers: []int{1}, sent: 2},
		{name: "probe and answer lost", probes: []int{1}, answers: []int{1}, sent: 3},
		{name: "first probe lost/attempts=1", probes: []int{1}, attempts: 1, suspect: true, sent: 1},
		{name: "first answer lost/attempts=1", answers: []int{1}, attempts: 1, suspect: true, sent: 1},
		{name: "probe and answer lost/attempts=2", probes: []int{1}, answers: []int{1}, attempts: 2, suspect: true, sent: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(seeds(20, 5)) {
				t.Run(fmt.Sprint(seed), func(t *testing.T) {
					lostProbe(t, seed, tc.probes, tc.answers, tc.attempts, tc.suspect, tc.sent)
				})
			}
		})
	}
}

func lostProbe(t *testing.T, seed uint64, probes, answers []int, attempts int, suspect bool, sent int) {
	h := newHarness(t, seed, lossyNet(seed, 0))
	h.tweak = func(c *Config) { c.ProbeAttempts = attempts }
	all := h.joinFour()
	vs := byView(all[0].g.View(), all)
	r := rand.New(rand.NewPCG(seed, 23))
	// m and R: two members other than the coordinator (R reports its
	// suspicion to the coordinator, which excludes m).
	p := r.Perm(3)
	sus, rep := vs[1+p[0]], vs[1+p[1]]
	sm := sus.self()
	start := h.s.Now()
	end := start + 2*time.Second
	blocked := true
	// The 1-based ordinals of R's probes and of m's answers, by nonce (the
	// network may duplicate a datagram: both copies are dropped or not).
	probeNo, answerNo := map[uint64]int{}, map[uint64]int{}
	ordinal := func(seen map[uint64]int, id uint64) int {
		if _, ok := seen[id]; !ok {
			seen[id] = len(seen) + 1
		}
		return seen[id]
	}
	var probeAt []time.Duration // R's probes of m, while blocked
	var answeredAt time.Duration
	h.drop = func(from, to digest.Member, b []byte) bool {
		if !blocked {
			return false
		}
		switch {
		case from == rep.Member() && to == sus.Member():
			if m := membershipMsg(b); m != nil && m.typ == typeProbe && m.kind == 0 {
				return containsInt(probes, ordinal(probeNo, m.id))
			}
		case from == sus.Member() && to == rep.Member():
			if m := membershipMsg(b); m != nil && m.typ == typeProbe && m.kind == 1 {
				if containsInt(answers, ordinal(answerNo, m.id)) {
					return true
				}
				if answeredAt == 0 {
					answeredAt = h.s.Now()
				}
				return false
			}
			return true
		}
		return false
	}
	h.s.AddTap(func(ev sim.TapEvent) {
		if ev.Kind == sim.TapSend && ev.From == rep.Member() && ev.To == sus.Member() && blocked {
			if m := membershipMsg(ev.Data); m != nil && m.typ == typeProbe && m.kind == 0 {
				probeAt = append(probeAt, ev.At)
			}
		}
	})
	nviews := make([]int, len(all))
	for i, n := range all {
		nviews[i] = len(n.views)
	}
	cfg := rep.g.cfg
	h.s.Schedule(end, func(time.Duration) { blocked = false })
	if suspect {
		h.runUntil(func() bool { return len(rep.susp) > 0 }, end, "suspected")
		require.Equal(t, sm, rep.susp[0].m, "seed %d", seed)
		require.Len(t, probeAt, sent, "seed %d: probes sent before suspecting", seed)
		// ProbeAttempts probes, ProbeTimeout apart (each deadline noticed
		// at a check, at most one fdInterval late), and the suspicion at
		// the last one's deadline.
		for i := 1; i < len(probeAt); i++ {
			gap := probeAt[i] - probeAt[i-1]
			require.GreaterOrEqual(t, gap, cfg.ProbeTimeout, "seed %d: probes %v", seed, probeAt)
			require.LessOrEqual(t, gap, cfg.ProbeTimeout+rep.g.fdInterval(), "seed %d: probes %v", seed, probeAt)
		}
		h.runUntil(func() bool { return settled(without(all, sus)...) }, h.s.Now()+5*time.Second, "m excluded")
		h.noErrors()
		return
	}
	h.run(end + time.Second)
	require.NotZero(t, answeredAt, "seed %d: no probe answered", seed)
	first := 0
	for _, at := range probeAt {
		if at < answeredAt {
			first++
		}
	}
	require.Equal(t, sent, first, "seed %d: probes %v, first answer reached R at %v", seed, probeAt, answeredAt)
	// The outage of 2s made R probe m again after the answer (the
	// probing restarts after each SuspectTimeout of silence).
	require.Greater(t, len(probeAt), sent, "seed %d: probes %v", seed, probeAt)
	for i, n := range all {
		require.Empty(t, n.susp, "seed %d node %d: suspected", seed, n.id)
		require.Len(t, n.views, nviews[i], "seed %d node %d: view change", seed, n.id)
		require.Zero(t, n.g.Stats().Suspicions, "seed %d node %d", seed, n.id)
	}
	require.True(t, settled(all...), "seed %d", seed)
	h.noErrors()
}

func containsInt(l []int, x int) bool {
	for _, y := range l {
		if y == x {
			return true
		}
	}
	return false
}

// TestCrashSuspectedAfterProbes (simulator, fake protocol, no loss): a
// member of four (the coordinator in some seeds) crashes; a survivor
// suspects it no sooner than SuspectTimeout + ProbeAttempts×ProbeTimeout
// after its last heartbeat could have been sent (crash − HeartbeatInterval)
// and no later than SuspectTimeout + ProbeAttempts×ProbeTimeout after the
// crash plus ProbeAttempts+1 failure-detection intervals (each step is
// noticed at the next check); the survivors then install a view without
// it. For ProbeAttempts 1, 3 (the default) and 5.
func TestCrashSuspectedAfterProbes(t *testing.T) {
	for _, attempts := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("attempts=%d", attempts), func(t *testing.T) {
			for seed := range uint64(seeds(30, 6)) {
				t.Run(fmt.Sprint(seed), func(t *testing.T) {
					crashSuspected(t, seed, attempts)
				})
			}
		})
	}
}

func crashSuspected(t *testing.T, seed uint64, attempts int) {
	h := newHarness(t, seed, lossyNet(seed, 0))
	h.tweak = func(c *Config) { c.ProbeAttempts = attempts }
	all := h.joinFour()
	r := rand.New(rand.NewPCG(seed, 29))
	victim := all[r.IntN(len(all))]
	vm := victim.self()
	crashAt := h.s.Now() + time.Duration(r.IntN(100))*time.Millisecond
	h.s.Schedule(crashAt, func(time.Duration) { h.s.Crash(victim.Member()) })
	surv := without(all, victim)
	var suspAt time.Duration
	h.s.AddCheck(func(now time.Duration) error {
		for _, n := range surv {
			if len(n.susp) > 0 && suspAt == 0 {
				suspAt = now
			}
		}
		return nil
	})
	cfg := surv[0].g.cfg
	probing := cfg.SuspectTimeout + time.Duration(attempts)*cfg.ProbeTimeout
	latest := crashAt + probing + time.Duration(attempts+1)*surv[0].g.fdInterval()
	h.runUntil(func() bool { return suspAt != 0 }, latest, "suspected")
	require.GreaterOrEqual(t, suspAt, crashAt-cfg.HeartbeatInterval+probing, "seed %d: suspected at %v, crash at %v", seed, suspAt, crashAt)
	t.Logf("seed %d: crash at %v, suspected %v later (SuspectTimeout + ProbeAttempts×ProbeTimeout = %v)", seed, crashAt, suspAt-crashAt, probing)
	for _, n := range surv {
		for _, s := range n.susp {
			require.Equal(t, vm, s.m, "seed %d node %d: suspected a live member", seed, n.id)
		}
	}
	h.runUntil(func() bool { return settled(surv...) }, suspAt+time.Second, "crashed member excluded")
	require.False(t, surv[0].g.View().Contains(vm))
	h.noErrors()
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

// TestCutReporterSuspicionVerified (simulator, fake protocol, no loss): D
// stops hearing B and C, and for a while A (the coordinator) stops hearing
// D, as in a partition that heals just before D's probes of B and C run
// out. D suspects B and C and reports it; A, which heard them throughout
// and hears D again only since the cut, probes them itself instead of
// excluding them: they answer, D hears them again once the cut heals, and
// nobody is excluded.
func TestCutReporterSuspicionVerified(t *testing.T) {
	for seed := range uint64(seeds(20, 5)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newHarness(t, seed, sim.NetConfig{})
			all := h.joinFour()
			v := all[0].g.View()
			vs := byView(v, all)
			a, b, c, d := vs[0], vs[1], vs[2], vs[3]
			st, pt := a.g.cfg.SuspectTimeout, a.g.cfg.ProbeTimeout
			t0 := h.s.Now()
			h.drop = func(from, to digest.Member, _ []byte) bool {
				now := h.s.Now()
				if to == d.Member() && (from == b.Member() || from == c.Member()) {
					return now < t0+st+6*pt // D's probes of B and C run out first
				}
				return from == d.Member() && to == a.Member() && now >= t0+pt && now < t0+st+2*pt
			}
			h.runUntil(func() bool { return len(d.susp) >= 2 }, t0+st+6*pt, "D suspects B and C")
			h.run(t0 + 4*st)
			require.True(t, settled(all...), "settled")
			for _, n := range all {
				require.Equal(t, v.Members, n.g.View().Members, "node %d: nobody excluded", n.id)
				require.Empty(t, n.left, "node %d", n.id)
			}
			require.Empty(t, a.susp, "A suspected nobody")
			h.noErrors()
		})
	}
}
