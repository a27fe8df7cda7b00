package gms

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/sim"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// TestLeaveWhileSuspectingCoordinator (simulator, fake protocol, loss up to
// 5%): in a group of four, a member L after the next in line B stops
// hearing the coordinator A (A's datagrams to L are dropped), suspects it
// and reports it to B, and then leaves gracefully while it still suspects
// A (a leaver runs no failure detection, so the suspicion stays).
//
// In even seeds A is alive: the outage ends as L leaves, B has verified A
// and keeps it. A handles the leave: L gets its LeaveRsp (Left(nil))
// well before LeaveTimeout, and the survivors end in a view of A's
// without L, A still coordinating, nobody else suspected.
//
// In odd seeds A crashes right after L suspected it: B suspects A itself,
// takes over, handles the leave the same way, and the survivors end in a
// view of B's without A and L.
func TestLeaveWhileSuspectingCoordinator(t *testing.T) {
	for seed := range uint64(seeds(40, 8)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newHarness(t, seed, lossyNet(seed, 0.05))
			all := h.joinFour()
			vs := byView(all[0].g.View(), all)
			r := rand.New(rand.NewPCG(seed, 31))
			crash := seed%2 == 1
			a, b := vs[0], vs[1]
			l := vs[2+r.IntN(2)]
			am, lm := a.self(), l.self()
			var surv []*node
			for _, n := range all {
				if n != l && (n != a || !crash) {
					surv = append(surv, n)
				}
			}
			blocked := false
			h.drop = func(from, to digest.Member, _ []byte) bool {
				return blocked && from == a.Member() && to == l.Member()
			}
			rsps := 0
			h.s.AddTap(func(ev sim.TapEvent) {
				if ev.Kind == sim.TapDeliver && ev.To == l.Member() {
					if m := membershipMsg(ev.Data); m != nil && m.typ == typeLeave && m.kind == 1 {
						rsps++
					}
				}
			})
			leftAt := time.Duration(-1)
			h.s.AddCheck(func(now time.Duration) error {
				if leftAt < 0 && len(l.left) > 0 {
					leftAt = now
				}
				return nil
			})
			start := h.s.Now() + time.Duration(r.IntN(100))*time.Millisecond
			h.s.Schedule(start, func(time.Duration) { blocked = true })
			h.runUntil(func() bool { return len(l.susp) > 0 }, start+2*time.Second, "L suspects A")
			require.Equal(t, am, l.susp[0].m)
			// Leave in the same instant (before L's next failure-detection
			// check could withdraw the suspicion).
			var leaveAt time.Duration
			h.do(h.s.Now(), l, func(now time.Duration) {
				leaveAt = now
				if crash {
					h.s.Crash(a.Member())
				} else {
					blocked = false
				}
				require.True(t, l.g.fd.suspected[am])
				require.NoError(t, l.g.Leave(now))
			})
			h.runUntil(func() bool { return leftAt >= 0 && settled(surv...) },
				h.s.Now()+10*time.Second, "left")
			require.Equal(t, []error{nil}, l.left)
			require.Positive(t, rsps, "L got its LeaveRsp")
			// When A crashed, B detects it itself: the bound grows by the
			// probes ProbeAttempts adds to detection, (ProbeAttempts-1)×ProbeTimeout.
			var extra time.Duration
			if crash {
				extra = time.Duration(l.g.cfg.ProbeAttempts-1) * l.g.cfg.ProbeTimeout
			}
			require.Less(t, leftAt-leaveAt, l.g.cfg.LeaveTimeout/2+extra, "left at %v, asked at %v", leftAt, leaveAt)
			v := surv[0].g.View()
			require.False(t, v.Contains(lm))
			if crash {
				require.Equal(t, b.self(), v.Coord().Member)
				require.False(t, v.Contains(am))
			} else {
				require.Equal(t, am, v.Coord().Member)
				require.Empty(t, a.left)
				for _, n := range surv {
					for _, s := range n.susp {
						require.Equal(t, lm, s.m, "node %d suspected %v", n.id, s.m)
					}
				}
			}
			for _, n := range surv {
				require.Empty(t, n.left, "node %d", n.id)
			}
			h.noErrors()
		})
	}
}

// TestLeaverCutResumedByNewCoordinator (simulator, real nakack, loss up to
// 10% and 5% near the senders): in a group of four under traffic, L leaves
// gracefully; the coordinator A installs the view without L and crashes
// while L's cut is under way (as it asks for the reports, once it fixed
// the cut, or at the first acknowledgement, by the seed). The next in line
// B takes over and resumes L's cut. It must know that L left gracefully:
// the cut goes up to L's announced highest and declares nothing lost (L,
// alive, repairs what the survivors lack), and L gets its LeaveRsp well
// before LeaveTimeout instead of timing out. Every survivor delivers every
// message L sent.
func TestLeaverCutResumedByNewCoordinator(t *testing.T) {
	for seed := range uint64(seeds(40, 6)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			net := lossyNet(seed, 0.1)
			net.SharedLoss = 0.05
			h := newNakHarness(t, seed, net)
			all := h.joinFour()
			vs := byView(all[0].g.View(), all)
			r := rand.New(rand.NewPCG(seed, 37))
			a, b, l := vs[0], vs[1], vs[2+r.IntN(2)]
			lm := l.self()
			surv := others(others(all, a), l)
			when := uint8(r.IntN(3))
			crashed := false
			h.s.AddTap(func(ev sim.TapEvent) {
				m := membershipMsg(ev.Data)
				if crashed || m == nil || m.member != lm {
					return
				}
				if (when == cutReqCrash && ev.Kind == sim.TapSend && ev.From == a.Member() && m.typ == typeCutReq) ||
					(when == cutFixCrash && ev.Kind == sim.TapSend && ev.From == a.Member() && m.typ == typeCut && m.kind == 0) ||
					(when == cutAckCrash && ev.Kind == sim.TapDeliver && ev.To == a.Member() && m.typ == typeCutAck) {
					crashed = true
					h.s.Schedule(ev.At, func(time.Duration) { h.s.Crash(a.Member()) })
				}
			})
			rsps := 0
			h.s.AddTap(func(ev sim.TapEvent) {
				if m := membershipMsg(ev.Data); m != nil && ev.Kind == sim.TapDeliver && ev.To == l.Member() && m.typ == typeLeave && m.kind == 1 {
					rsps++
				}
			})
			start := h.s.Now()
			for _, n := range all {
				h.traffic(n, start, start+time.Second, 2*time.Millisecond)
			}
			leaveAt := start + time.Duration(200+r.IntN(400))*time.Millisecond
			var sent uint64
			h.do(leaveAt, l, func(now time.Duration) {
				sent = l.sent()
				require.NoError(t, l.g.Leave(now))
			})
			leftAt := time.Duration(-1)
			h.s.AddCheck(func(now time.Duration) error {
				if leftAt < 0 && len(l.left) > 0 {
					leftAt = now
				}
				return nil
			})
			h.runUntil(func() bool { return leftAt >= 0 && crashed && converged(surv...) && quiet(surv...) },
				leaveAt+10*time.Second, "left, cuts closed")
			require.Equal(t, b.self(), surv[0].g.View().Coord().Member, "B took over")
			require.Equal(t, []error{nil}, l.left)
			require.Zero(t, l.g.Stats().LeaveTimeouts, "L timed out waiting for its LeaveRsp (%s)", cutCrashNames[when])
			require.Positive(t, rsps, "L never got a LeaveRsp")
			for _, n := range surv {
				require.Empty(t, n.app.lost[lm], "node %d: L's messages reported lost (%s)", n.id, cutCrashNames[when])
				require.Equal(t, sent, n.app.state[lm].last, "node %d: not every message of L delivered", n.id)
			}
			h.noErrors()
		})
	}
}

// TestLeaverCutAfterForcedPurge (simulator, real nakack): in a group of
// four, L sends 1..n (one seqno a datagram); no copy of k..n reaches
// anyone, L force-purges its window up to n and leaves gracefully before
// anyone asked for them (no MSG_NOT_FOUND of L reaches anyone). L can
// repair nothing of k..n: its LEAVE announces its purge point with its
// highest, and the cut declares k..n lost, which every survivor reports,
// once and the same; the cut closes and L gets its LeaveRsp (a cut that
// declared nothing lost waited for repairs that never came, and L timed
// out).
func TestLeaverCutAfterForcedPurge(t *testing.T) {
	for seed := range uint64(seeds(10, 3)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h, _, l, surv, n, k, leaveAt := lostTailLeaver(t, seed, 71)
			lm := l.self()
			h.do(leaveAt, l, func(now time.Duration) {
				_, err := l.p().ForcePurge(lm, n)
				require.NoError(t, err)
				require.NoError(t, l.g.Leave(now))
			})
			h.runUntil(func() bool { return len(l.left) > 0 && converged(surv...) && quiet(surv...) },
				leaveAt+10*time.Second, "left, cut closed")
			require.Equal(t, []error{nil}, l.left)
			require.Zero(t, l.g.Stats().LeaveTimeouts, "seed %d: L timed out waiting for its LeaveRsp", seed)
			requireTailLost(t, surv, lm, k, n)
			h.noErrors()
		})
	}
}

// TestLeaverCutWhenLeaveTimesOut (simulator, real nakack): in a group of
// four, L sends 1..n (one seqno a datagram) and no copy of k..n reaches
// anyone, L's repairs included. L leaves gracefully: its LEAVE announces a
// purge point below k, so the cut counts on L to repair k..n. In even
// seeds L then force-purges its window up to n (after its LEAVE announced
// the purge point: seeds 98119, 66832 and 91139 of
// TestWholeGroupRandomised); in odd seeds it keeps them but none of its
// repairs gets through (a leaver cut off from the survivors until its
// leave times out: seed 106236). Either way L repairs nothing and gives
// up at its LeaveTimeout; the coordinator, LeaveTimeout after it learnt of
// the leave, takes L as gone and fixes the cut again, declaring k..n lost:
// every survivor reports k..n lost once and the cut closes. (Before, the
// fix kept waiting for L's repairs and the cut never closed.)
func TestLeaverCutWhenLeaveTimesOut(t *testing.T) {
	for seed := range uint64(seeds(10, 4)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h, r, l, surv, n, k, leaveAt := lostTailLeaver(t, seed, 83)
			lm := l.self()
			h.do(leaveAt, l, func(now time.Duration) {
				require.NoError(t, l.g.Leave(now))
				require.Less(t, l.g.leave.low, k, "L's LEAVE announces a purge point below k")
			})
			if seed%2 == 0 {
				h.do(leaveAt+time.Duration(1+r.IntN(50))*time.Millisecond, l, func(time.Duration) {
					_, err := l.p().ForcePurge(lm, n)
					require.NoError(t, err)
				})
			}
			h.runUntil(func() bool { return len(l.left) > 0 && settled(surv...) },
				leaveAt+l.g.cfg.LeaveTimeout+5*time.Second, "left, cut closed")
			require.Equal(t, []error{nil}, l.left)
			require.Equal(t, uint64(1), l.g.Stats().LeaveTimeouts, "L repaired nothing, so it timed out")
			var refixed uint64
			for _, s := range surv {
				refixed += s.g.Stats().LeaversTimedOut
			}
			require.Positive(t, refixed, "the cut was fixed again once L's leave timed out")
			requireTailLost(t, surv, lm, k, n)
			h.noErrors()
		})
	}
}

// TestLeaverCutAfterNotFoundMissedByOne (simulator, real nakack): in a
// group of four, L sends 1..n (one seqno a datagram); no copy of k..n
// reaches anyone and L force-purges its window up to n. Survivor A asks
// and gets L's MSG_NOT_FOUND, so it delivers k..n as lost and holds none
// of them; the MSG_NOT_FOUNDs to the other two are lost, so they still
// ask. Then L leaves gracefully. A's cut report gives k..n among what it
// cannot repair, so the cut declares them lost for the other two: every
// survivor reports k..n lost once, the cut closes and L gets its
// LeaveRsp. (When A reported only what it missed above its delivered
// point, the cut declared nothing lost, the other two waited for repairs
// nobody could send and the cut never closed.)
func TestLeaverCutAfterNotFoundMissedByOne(t *testing.T) {
	for seed := range uint64(seeds(10, 3)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h, all := joinFourBundling(t, seed, 1)
			r := rand.New(rand.NewPCG(seed, 73))
			l := all[r.IntN(4)]
			lm := l.self()
			surv := others(all, l)
			a := surv[r.IntN(3)]
			n, k := lostTail(r)
			h.dropTail(l, k, n, a.Member())
			purgeAt := h.sendOnePerMs(l, n) + time.Millisecond
			h.do(purgeAt, l, func(now time.Duration) {
				_, err := l.p().ForcePurge(lm, n)
				require.NoError(t, err)
			})
			h.runUntil(func() bool { return len(a.app.lost[lm]) > 0 }, purgeAt+5*time.Second, "A told k..n lost")
			require.Equal(t, []Range{{From: k, To: n}}, a.app.lost[lm], "A's MSG_NOT_FOUND")
			for _, s := range others(surv, a) {
				require.Empty(t, s.app.lost[lm], "node %d got a MSG_NOT_FOUND", s.id)
			}
			leaveAt := h.s.Now() + time.Millisecond
			h.do(leaveAt, l, func(now time.Duration) { require.NoError(t, l.g.Leave(now)) })
			h.runUntil(func() bool { return len(l.left) > 0 && settled(surv...) }, leaveAt+10*time.Second, "left, cut closed")
			require.Equal(t, []error{nil}, l.left)
			require.Zero(t, l.g.Stats().LeaveTimeouts, "L timed out waiting for its LeaveRsp")
			requireTailLost(t, surv, lm, k, n)
			h.noErrors()
		})
	}
}

// TestLeaverCutClosedWhileOneWasAway (simulator, real nakack): in a group
// of four, L sends 1..n (one seqno a datagram) and B, a survivor, never
// gets k..n from anyone. L leaves gracefully; once B has installed the
// view without L, B is cut off from the others. They exclude B, close L's
// cut without it (they hold everything) and L leaves. Alone, B cuts L as
// a leaver, which waits for repairs only L could send. When the partition
// heals and the sides merge, the others report L's window closed, so the
// cut of the merged view takes L as gone and declares k..n lost for B:
// every member settles in one view, B reports k..n lost once, the others
// nothing, and all have L's messages up to n. (Before, the others
// reported no window at all, the cut waited for L and never closed.)
//
// The seed picks the path: B first among the survivors in view order
// coordinates the merged view and fixes its cut again (refixCuts); B last
// reports the window it still holds to the coordinator, which either still
// keeps its closed cut and reopens it (the heal 100ms after the others
// settled) or has forgotten it and cuts L anew (the heal 3s after).
func TestLeaverCutClosedWhileOneWasAway(t *testing.T) {
	for seed := range uint64(seeds(12, 4)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h, all := joinFourBundling(t, seed, 1)
			r := rand.New(rand.NewPCG(seed, 79))
			l := all[r.IntN(4)]
			lm := l.self()
			surv := byView(all[0].g.View(), others(all, l))
			b, healAfter := surv[0], 100*time.Millisecond
			if seed%2 == 1 {
				b = surv[2]
			}
			if seed%4 >= 2 {
				healAfter = 3 * time.Second
			}
			n, k := lostTail(r)
			h.drop = func(from, to digest.Member, dg []byte) bool {
				origin, first, last, ok := dataSeqs(dg)
				return ok && to == b.Member() && origin == lm && last >= k && first <= n
			}
			leaveAt := h.sendOnePerMs(l, n) + time.Millisecond
			h.do(leaveAt, l, func(now time.Duration) { require.NoError(t, l.g.Leave(now)) })
			h.runUntil(func() bool { return !b.g.View().Contains(lm) }, leaveAt+5*time.Second, "B installed the view without L")
			h.s.Partition(h.s.Now(), 0, []digest.Member{b.Member()})
			rest := others(surv, b)
			h.runUntil(func() bool { return len(l.left) > 0 && settled(rest...) }, h.s.Now()+5*time.Second,
				"L left, the others settled without B")
			require.Equal(t, []error{nil}, l.left)
			heal := h.s.Now() + healAfter
			h.s.Heal(heal)
			h.runUntil(func() bool { return h.s.Now() > heal && settled(surv...) }, heal+20*time.Second, "merged, cut closed")
			for _, s := range surv {
				want := []Range(nil)
				if s == b {
					want = []Range{{From: k, To: n}}
				}
				require.Equal(t, want, s.app.lost[lm], "node %d", s.id)
				require.Equal(t, n, s.app.state[lm].last, "node %d", s.id)
			}
			h.noErrors()
		})
	}
}

// lostTailLeaver sets up the purged-leaver scenario two tests share: a
// group of four, leaver l drawn with r (PCG stream), l sends 1..n one a
// millisecond, and no copy of k..n (nor l's MSG_NOT_FOUNDs and
// CHALLENGEs) reaches anyone. leaveAt is a millisecond after l's last
// send; surv are the other three.
func lostTailLeaver(t *testing.T, seed, stream uint64) (h *harness, r *rand.Rand, l *node, surv []*node, n, k uint64, leaveAt time.Duration) {
	h, all := joinFourBundling(t, seed, 1)
	r = rand.New(rand.NewPCG(seed, stream))
	l = all[r.IntN(4)]
	surv = others(all, l)
	n, k = lostTail(r)
	h.dropTail(l, k, n, digest.Member{})
	return h, r, l, surv, n, k, h.sendOnePerMs(l, n) + time.Millisecond
}

// lostTail draws from r the last seqno n a leaver sends (20..39) and the
// first k of the tail k..n that reaches nobody (up to 9 below n).
func lostTail(r *rand.Rand) (n, k uint64) {
	n = uint64(20 + r.IntN(20))
	return n, n - uint64(r.IntN(10))
}

// dropTail drops every copy of l's messages k..n and l's MSG_NOT_FOUNDs
// and CHALLENGEs, except those to keep (none if keep is zero).
func (h *harness) dropTail(l *node, k, n uint64, keep digest.Member) {
	lm := l.self()
	h.drop = func(from, to digest.Member, dg []byte) bool {
		if origin, first, last, ok := dataSeqs(dg); ok {
			return origin == lm && last >= k && first <= n
		}
		typ := wire.Type(dg[2])
		return from == l.Member() && (keep.IsZero() || to != keep) && (typ == wire.TypeMsgNotFound || typ == wire.TypeChallenge)
	}
}

// requireTailLost checks that each of surv reported k..n of lm lost, once,
// and has lm's messages up to n.
func requireTailLost(t *testing.T, surv []*node, lm digest.Member, k, n uint64) {
	t.Helper()
	for _, s := range surv {
		require.Equal(t, []Range{{From: k, To: n}}, s.app.lost[lm], "node %d", s.id)
		require.Equal(t, n, s.app.state[lm].last, "node %d", s.id)
	}
}

// TestCoordinatorAndNextInLineLeaveTogether (simulator, fake protocol, loss
// up to 5%): in a group of five, the first two or three members in view
// order (the coordinator and those next in line) leave gracefully within
// 20ms of each other, in an order the seed picks, as members that finish a
// run together do. A next in line that is itself leaving ignores the
// coordinator's LEAVE, so the first member that is not leaving must take
// over and handle every leave it heard: the survivors end in a view of
// exactly themselves, every cut closed, well before LeaveTimeout and
// without suspecting anyone (nobody waits for failure detection to drop
// the leavers), and every leaver leaves with Left(nil). A survivor that
// missed the close of a cut whose coordinator then left reports it to the
// new coordinator within a few ViewAckTimeouts, not ViewChangeTimeout.
// Not checked: that no leaver times out. One whose cut closed under a
// coordinator that then left, its LeaveRsp lost, resends LEAVE to a
// coordinator that has no cut for it and times out (LeaveTimeout, still
// Left(nil)).
func TestCoordinatorAndNextInLineLeaveTogether(t *testing.T) {
	for seed := range uint64(seeds(40, 8)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newHarness(t, seed, lossyNet(seed, 0.05))
			all := h.joinFive()
			vs := byView(all[0].g.View(), all)
			r := rand.New(rand.NewPCG(seed, 41))
			leavers := vs[:2+r.IntN(2)]
			surv := vs[len(leavers):]
			last := h.leaveTogether(r, leavers)
			h.runUntil(func() bool { return settled(surv...) }, last+10*time.Second, "survivors settled")
			require.Less(t, h.s.Now(), last+leavers[0].g.cfg.LeaveTimeout/2, "the survivors settled late\n%s", h.dump())
			h.runUntil(func() bool { return allLeft(leavers) }, last+10*time.Second, "leavers left")
			for _, l := range leavers {
				require.Equal(t, []error{nil}, l.left, "node %d", l.id)
			}
			for _, n := range surv {
				require.Empty(t, n.susp, "node %d suspected", n.id)
				require.Empty(t, n.left, "node %d", n.id)
			}
			require.Equal(t, surv[0].self(), surv[0].g.View().Coord().Member)
			h.noErrors()
		})
	}
}

// TestWholeGroupLeaves (simulator, fake protocol, loss up to 5%): all five
// members of a group leave within 20ms of each other, in an order the seed
// picks. No member stays to cut the leavers and send LeaveRsp; a leaver
// whose every other member has announced its leave ends its leave at once
// (leaveWithTheRest, LEAVE sent once more), and the last member alone in
// its view still multicasts LEAVE and releases the leavers whose cuts it
// runs. Every member leaves with Left(nil), and at most one of the five
// waits out LeaveTimeout (a LEAVE lost at the very end).
func TestWholeGroupLeaves(t *testing.T) {
	for seed := range uint64(seeds(40, 8)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newHarness(t, seed, lossyNet(seed, 0.05))
			all := h.joinFive()
			r := rand.New(rand.NewPCG(seed, 43))
			last := h.leaveTogether(r, all)
			h.runUntil(func() bool { return allLeft(all) }, last+10*time.Second, "every member left")
			var timedOut []uint64
			for _, n := range all {
				require.Equal(t, []error{nil}, n.left, "node %d", n.id)
				if n.g.Stats().LeaveTimeouts > 0 {
					timedOut = append(timedOut, n.id)
				}
			}
			require.LessOrEqual(t, len(timedOut), 1, "nodes %v waited out LeaveTimeout", timedOut)
			h.noErrors()
		})
	}
}

// leaveTogether makes each of ns leave gracefully at a time drawn from r
// within 20ms from now, and returns the last of those times.
func (h *harness) leaveTogether(r *rand.Rand, ns []*node) time.Duration {
	start := h.s.Now() + time.Millisecond
	last := start
	for _, n := range ns {
		at := start + time.Duration(r.IntN(20))*time.Millisecond
		last = max(last, at)
		h.do(at, n, func(now time.Duration) { require.NoError(h.t, n.g.Leave(now)) })
	}
	return last
}

// allLeft: every node in ns has left (Listener.Left).
func allLeft(ns []*node) bool {
	for _, n := range ns {
		if len(n.left) == 0 {
			return false
		}
	}
	return true
}
