package gms

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nakcast/nakcast/sim"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// TestStateTransferUnderLoss: a member joins during traffic with loss and
// fetches the state (a replicated fold of every sender's messages) in
// small chunks; its installed state plus what it delivers afterwards equals
// the provider's state plus what the provider delivers afterwards: once
// traffic stops every member's application state is the same.
func TestStateTransferUnderLoss(t *testing.T) {
	for seed := range uint64(seeds(200, 12)) {
		h := newNakHarness(t, seed, lossyNet(seed, 0.15))
		h.tweak = func(c *Config) { c.StateChunk = 64; c.StateWindow = 3 }
		a, b, c, d := h.add(1), h.add(2), h.add(3), h.add(4)
		all := []*node{a, b, c, d}
		r := rand.New(rand.NewPCG(seed, 11))
		h.join(0, a)
		h.join(60*time.Millisecond, b, c)
		stop := 1500 * time.Millisecond
		for _, n := range []*node{a, b, c} {
			h.traffic(n, 200*time.Millisecond, stop, time.Duration(1+r.IntN(3))*time.Millisecond)
		}
		h.traffic(d, 200*time.Millisecond, stop, 5*time.Millisecond)
		h.join(400*time.Millisecond+time.Duration(r.IntN(300))*time.Millisecond, d)
		h.runUntil(func() bool { return converged(all...) }, 10*time.Second, "joined")
		h.do(h.s.Now(), d, func(now time.Duration) { require.NoError(t, d.g.RequestState(now)) })
		h.runUntil(func() bool { return len(d.states) > 0 }, h.s.Now()+20*time.Second, "state installed")
		require.NoError(t, d.states[0], "seed %d", seed)
		h.run(max(h.s.Now(), stop+100*time.Millisecond))
		h.s.SetNet(sim.NetConfig{})
		h.runUntil(func() bool { return allDelivered(all...) && quiet(all...) }, h.s.Now()+20*time.Second, "delivered")
		var prov *node
		for _, n := range all {
			if n.self() == d.g.done.provider.Member {
				prov = n
			}
		}
		require.NotNil(t, prov)
		want, _ := prov.app.State()
		got, _ := d.app.State()
		require.Equal(t, want, got, "seed %d: requester's state differs from the provider's", seed)
		for _, n := range all {
			require.Empty(t, n.app.lost)
		}
		h.noNotFound()
		h.noErrors()
		if t.Failed() {
			return
		}
	}
}

// TestStateProviderCrash: a member fetches the state while everyone sends
// under loss; the provider (the coordinator, asked first) crashes while it
// streams the state. The requester gives up on it after StateTimeout,
// retries another member and converges: its installed state plus what it
// delivers after equals the new provider's state plus what that one
// delivers after.
func TestStateProviderCrash(t *testing.T) {
	for seed := range uint64(seeds(30, 5)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newNakHarness(t, seed, lossyNet(seed, 0.1))
			h.tweak = func(c *Config) { c.StateChunk = 16; c.StateWindow = 2; c.StateTimeout = time.Second }
			a, b, c, d := h.add(1), h.add(2), h.add(3), h.add(4)
			all := []*node{a, b, c, d}
			h.join(0, a)
			h.join(60*time.Millisecond, b, c, d)
			h.runUntil(func() bool { return converged(all...) && quiet(all...) }, 5*time.Second, "joined")
			start := h.s.Now()
			stop := start + 1500*time.Millisecond
			for _, n := range all {
				h.traffic(n, start, stop, 2*time.Millisecond)
			}
			chunks, crashed := 0, false
			r := rand.New(rand.NewPCG(seed, 17))
			crashAt := 1 + r.IntN(2) // crash within the first window (of ~9 chunks)
			h.s.AddTap(func(ev sim.TapEvent) {
				if crashed || ev.Kind != sim.TapSend || ev.From != a.Member() || len(ev.Data) < 3 || !IsMembership(wire.Type(ev.Data[2])) {
					return
				}
				if m, err := decode(ev.Data, 7); err == nil && m.typ == typeStateChunk {
					if chunks++; chunks == crashAt {
						crashed = true
						h.s.Schedule(ev.At, func(time.Duration) { h.s.Crash(a.Member()) })
					}
				}
			})
			h.do(start+200*time.Millisecond, d, func(now time.Duration) { require.NoError(t, d.g.RequestState(now)) })
			surv := []*node{b, c, d}
			h.runUntil(func() bool { return len(d.states) > 0 }, start+20*time.Second, "state installed")
			require.True(t, crashed, "the provider never streamed")
			require.NoError(t, d.states[0])
			require.Len(t, d.states, 1)
			require.NotZero(t, d.g.Stats().StateAborted, "the crashed provider was not abandoned")
			require.NotEqual(t, a.self(), d.g.done.provider.Member)
			h.run(max(h.s.Now(), stop+100*time.Millisecond))
			h.s.SetNet(sim.NetConfig{})
			h.runUntil(func() bool { return converged(surv...) && quiet(surv...) && allDelivered(surv...) }, h.s.Now()+20*time.Second, "delivered")
			var prov *node
			for _, n := range surv {
				if n.self() == d.g.done.provider.Member {
					prov = n
				}
			}
			require.NotNil(t, prov)
			want, _ := prov.app.State()
			got, _ := d.app.State()
			require.Equal(t, want, got, "requester's state differs from the provider's")
			for _, n := range surv {
				for _, s := range surv {
					require.Empty(t, n.app.lost[s.self()])
				}
			}
			h.noNotFound()
			h.noErrors()
		})
	}
}

// TestStateRequestWhileServing (heavy whole-group seed 29607): A serves B
// a state, and asks B for one before B has installed A's; B, fetching its
// own, does not serve A until it has installed A's, and A fetches only
// once its transfer to B has ended. Both end with one application state
// (A's, B's own since its join being partial), where A used to install
// the state B had before B replaced it with A's: the two swapped states.
func TestStateRequestWhileServing(t *testing.T) {
	for seed := range uint64(seeds(20, 4)) {
		statePair(t, seed, func(c *Config) { c.StateChunk = 8; c.StateWindow = 1 }, func(h *harness, a, b *node) time.Duration {
			asked := false
			h.s.AddTap(func(ev sim.TapEvent) { // a asks as soon as it streams b's state
				if asked || ev.Kind != sim.TapSend || ev.From != a.Member() || len(ev.Data) < 3 || !IsMembership(wire.Type(ev.Data[2])) {
					return
				}
				if m, err := decode(ev.Data, 7); err == nil && m.typ == typeStateChunk {
					asked = true
					h.do(ev.At, a, func(now time.Duration) {
						require.NotEmpty(t, a.g.prov)
						require.NoError(t, a.g.RequestState(now))
					})
				}
			})
			h.do(h.s.Now()+50*time.Millisecond, b, func(now time.Duration) { require.NoError(t, b.g.RequestState(now)) })
			return 20 * time.Second
		})
		if t.Failed() {
			return
		}
	}
}

// TestStateRequestsCrossing: two members ask each other for the state at
// once. Neither serves while it fetches, so the lower one yields: it
// abandons its attempt, serves the other, and then fetches that one's
// state. Both succeed, well within StateTimeout, with one application
// state.
func TestStateRequestsCrossing(t *testing.T) {
	for seed := range uint64(seeds(20, 4)) {
		statePair(t, seed, nil, func(h *harness, a, b *node) time.Duration {
			at := h.s.Now() + 50*time.Millisecond
			h.do(at, a, func(now time.Duration) { require.NoError(t, a.g.RequestState(now)) })
			h.do(at, b, func(now time.Duration) { require.NoError(t, b.g.RequestState(now)) })
			return time.Second + 50*time.Millisecond
		})
		if t.Failed() {
			return
		}
	}
}

// statePair runs two members sending under 10% loss (b joins at 300ms),
// has ask make both request a state once they have converged, and
// requires that each installs one from the other within the time ask
// returns, and that both end, once everything is delivered, with the same
// application state.
func statePair(t *testing.T, seed uint64, tweak func(*Config), ask func(h *harness, a, b *node) time.Duration) {
	t.Helper()
	h := newNakHarness(t, seed, lossyNet(seed, 0.1))
	if tweak != nil {
		h.tweak = tweak
	}
	a, b := h.add(1), h.add(2)
	all := []*node{a, b}
	h.join(0, a)
	stop := 1200 * time.Millisecond
	h.traffic(a, 50*time.Millisecond, stop, 2*time.Millisecond)
	h.traffic(b, 50*time.Millisecond, stop, 3*time.Millisecond)
	h.join(300*time.Millisecond, b) // b's state of a starts at its join
	h.runUntil(func() bool { return converged(all...) }, 5*time.Second, "joined")
	within := ask(h, a, b)
	h.runUntil(func() bool { return len(a.states) > 0 && len(b.states) > 0 }, h.s.Now()+within, "states installed")
	require.NoError(t, a.states[0], "seed %d", seed)
	require.NoError(t, b.states[0], "seed %d", seed)
	require.Equal(t, a.self(), b.g.done.provider.Member, "seed %d", seed)
	require.Equal(t, b.self(), a.g.done.provider.Member, "seed %d", seed)
	h.run(max(h.s.Now(), stop+100*time.Millisecond))
	h.s.SetNet(sim.NetConfig{})
	h.runUntil(func() bool { return allDelivered(all...) && quiet(all...) }, h.s.Now()+20*time.Second, "delivered")
	sa, _ := a.app.State()
	sb, _ := b.app.State()
	require.Equal(t, sa, sb, "seed %d: a's and b's application states differ", seed)
	h.noNotFound()
	h.noErrors()
}
