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

// When a survivor gets the held datagrams of the crashed sender
// (TestDelayedDatagramOfCrashedSender).
const (
	releaseAtReport = iota // right after it reported its window for the cut
	releaseAtFix           // right after it applied the cut's fix
	releaseAtView          // right after the view that excludes the sender reaches it
	releaseNever
	releaseKinds
)

// TestDelayedDatagramOfCrashedSender: a sender's datagrams sent during a
// few milliseconds before it crashes are held in the network (a link
// latency of an hour), one sent after them arrives, and it crashes before
// anyone could request the gap: no survivor holds the held seqnos, so the
// coordinator declares them lost. Each survivor then gets the held
// datagrams at a moment drawn from the seed: right after reporting its
// window for the cut (before the fix reaches it: the case that made
// prefixes differ), right after applying the fix, right after the view
// that excluded the sender, or never. Every survivor must end with the
// same prefix of the crashed sender's messages (same fold: delivered or
// reported lost, in order); none delivers a seqno another reports lost.
// Seeds replay (go test -run TestDelayedDatagramOfCrashedSender).
func TestDelayedDatagramOfCrashedSender(t *testing.T) {
	lostSeen, atReport, refused := 0, 0, uint64(0)
	for seed := range uint64(seeds(60, 8)) {
		h := newNakHarness(t, seed, sim.NetConfig{Jitter: 300 * time.Microsecond})
		all := h.joinFour()
		r := rand.New(rand.NewPCG(seed, 11))
		victim := all[1+r.IntN(3)]
		vm, vid := victim.self(), victim.Member()
		surv := others(all, victim)
		start := h.s.Now()
		h.traffic(victim, start, start+time.Second, time.Millisecond)
		// Hold the victim's datagrams sent in [holdAt, releaseAt); crash
		// half a millisecond after the next one (before any NakDelay).
		holdAt := start + time.Duration(50+r.IntN(200))*time.Millisecond + 500*time.Microsecond
		openAt := holdAt + time.Duration(1+r.IntN(4))*time.Millisecond
		crashAt := openAt + time.Millisecond
		h.s.Schedule(holdAt, func(time.Duration) {
			for _, n := range surv {
				require.NoError(t, h.s.SetLink(vid, n.Member(), sim.Link{Latency: time.Hour}))
			}
		})
		h.s.Schedule(openAt, func(time.Duration) {
			for _, n := range surv {
				require.NoError(t, h.s.SetLink(vid, n.Member(), sim.Link{Jitter: 300 * time.Microsecond}))
			}
		})
		h.s.Schedule(crashAt, func(time.Duration) { h.s.Crash(vid) })
		var held [][]byte
		when := map[uint64]int{}
		for _, n := range surv {
			when[n.id] = r.IntN(releaseKinds)
		}
		released := map[uint64]bool{}
		release := func(n *node, at time.Duration) {
			if released[n.id] || len(held) == 0 {
				return
			}
			released[n.id] = true
			h.do(at, n, func(now time.Duration) {
				for _, dg := range held {
					n.Receive(vid, dg, now)
				}
			})
		}
		h.s.AddTap(func(ev sim.TapEvent) {
			if len(ev.Data) < 3 {
				return
			}
			typ := wire.Type(ev.Data[2])
			if ev.Kind == sim.TapSend && ev.From == vid && ev.At >= holdAt && ev.At < openAt &&
				(typ == wire.TypeData || typ == wire.TypeFrag) {
				held = append(held, slices.Clone(ev.Data))
				return
			}
			if !IsMembership(typ) || ev.At < crashAt {
				return
			}
			m, err := decode(ev.Data, 7)
			if err != nil || (m.member != vm && m.typ != typeView) {
				return
			}
			for _, n := range surv {
				switch {
				case when[n.id] == releaseAtReport && ev.Kind == sim.TapSend && ev.From == n.Member() &&
					(m.typ == typeCutReport || (m.typ == typeCutReq && n.g.IsCoordinator())):
					release(n, ev.At) // the coordinator's own report is taken as it sends CUT_REQ
				case when[n.id] == releaseAtFix && m.typ == typeCut && m.kind == 0 &&
					((ev.Kind == sim.TapDeliver && ev.To == n.Member()) || (ev.Kind == sim.TapSend && ev.From == n.Member())):
					release(n, ev.At)
				case when[n.id] == releaseAtView && m.typ == typeView && ev.Kind == sim.TapDeliver && ev.To == n.Member():
					release(n, ev.At)
				}
			}
		})
		h.runUntil(func() bool { return h.s.Now() > crashAt && converged(surv...) && quiet(surv...) },
			crashAt+20*time.Second, "cut closed")
		require.NotEmpty(t, held, "seed %d: nothing held", seed)
		var last *senderFold
		for _, n := range surv {
			_, open := n.p().WindowState(vm)
			require.False(t, open, "seed %d: window still open at %d", seed, n.id)
			st := n.app.state[vm]
			require.NotNil(t, st, "seed %d", seed)
			if last != nil {
				require.Equal(t, *last, *st, "seed %d (release %v): survivors differ on the crashed sender's prefix\n%v",
					seed, when, lostOf(surv, vm))
			}
			last = st
			if len(n.app.lost[vm]) > 0 {
				lostSeen++
				if released[n.id] && when[n.id] == releaseAtReport {
					atReport++
				}
			}
			refused += n.p().Stats().Drops.Departed
		}
		h.noNotFound()
		h.noErrors()
		if t.Failed() {
			return
		}
	}
	t.Logf("survivors with lost ranges: %d, of them given the held datagrams right after their report: %d; refused: %d",
		lostSeen, atReport, refused)
	require.NotZero(t, atReport, "no seed delivered the held datagrams between a report and the fix after a loss")
}

// lostOf lists what each node reported lost of sender, for failure messages.
func lostOf(ns []*node, sender digest.Member) map[uint64][]Range {
	out := map[uint64][]Range{}
	for _, n := range ns {
		out[n.id] = n.app.lost[sender]
	}
	return out
}

// dataSeqs returns the origin and the seqnos a DATA or FRAG datagram
// carries (ok false for any other datagram).
func dataSeqs(b []byte) (origin digest.Member, first, last uint64, ok bool) {
	h, body, err := wire.DecodeHeader(b, 7)
	if err != nil {
		return digest.Member{}, 0, 0, false
	}
	switch h.Type {
	case wire.TypeData:
		d, err := wire.DecodeData(h, body)
		if err != nil {
			return digest.Member{}, 0, 0, false
		}
		return d.Origin, d.First, d.Last(), true
	case wire.TypeFrag:
		f, err := wire.DecodeFrag(h, body)
		if err != nil {
			return digest.Member{}, 0, 0, false
		}
		return f.Origin, f.Seq, f.Seq, true
	}
	return digest.Member{}, 0, 0, false
}

// TestCutRefixedWhenItsHolderGoes (simulator, real nakack): D crashes
// while B alone holds D's seqno x (every copy of it to A and C is
// dropped), so the cut A fixes declares nothing lost: A and C are to
// fetch x from B. B crashes as the fix goes out, before either got x. The
// fix can never complete: when the view that excludes B is installed, A
// collects the survivors' reports again and fixes the cut anew, declaring
// x lost, and A and C end with the same prefix of D (x reported lost),
// their windows closed.
func TestCutRefixedWhenItsHolderGoes(t *testing.T) {
	for seed := range uint64(seeds(20, 4)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newNakHarness(t, seed, sim.NetConfig{Jitter: 200 * time.Microsecond})
			all := h.joinFour()
			vs := byView(all[0].g.View(), all)
			a, b, c, d := vs[0], vs[1], vs[2], vs[3]
			dm := d.self()
			r := rand.New(rand.NewPCG(seed, 41))
			x := uint64(20 + r.IntN(30))
			h.drop = func(from, to digest.Member, dg []byte) bool {
				if to != a.Member() && to != c.Member() {
					return false
				}
				o, first, last, ok := dataSeqs(dg)
				return ok && o == dm && first <= x && x <= last
			}
			start := h.s.Now()
			h.traffic(d, start, start+time.Second, 2*time.Millisecond)
			h.runUntil(func() bool { return d.sent() > x+10 }, start+time.Second, "x sent")
			h.s.Crash(d.Member())
			crashed := false
			h.s.AddTap(func(ev sim.TapEvent) {
				m := membershipMsg(ev.Data)
				if !crashed && m != nil && ev.Kind == sim.TapSend && ev.From == a.Member() && m.typ == typeCut && m.kind == 0 && m.member == dm {
					crashed = true
					h.s.Schedule(ev.At, func(time.Duration) { h.s.Crash(b.Member()) })
				}
			})
			h.runUntil(func() bool { return crashed && converged(a, c) && quiet(a, c) }, h.s.Now()+10*time.Second, "cuts closed")
			for _, n := range []*node{a, c} {
				_, open := n.p().WindowState(dm)
				require.False(t, open, "node %d", n.id)
				require.Equal(t, []Range{{From: x, To: x}}, n.app.lost[dm], "node %d: x reported lost", n.id)
			}
			require.Equal(t, *a.app.state[dm], *c.app.state[dm], "same prefix of D")
			h.noErrors()
		})
	}
}
