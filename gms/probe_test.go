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
