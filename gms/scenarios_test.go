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

func seeds(full, race int) int {
	if raceEnabled || testing.Short() {
		return race
	}
	return full
}

// lossyNet draws a network with 0-maxLoss independent loss, some
// duplication and reordering, from the seed.
func lossyNet(seed uint64, maxLoss float64) sim.NetConfig {
	r := rand.New(rand.NewPCG(seed, 99))
	return sim.NetConfig{
		Loss: r.Float64() * maxLoss, Duplicate: r.Float64() * 0.05, Reorder: r.Float64() * 0.1,
		Jitter: 300 * time.Microsecond,
	}
}

// TestJoinRspRejectsDigestMismatch: the joiner refuses a JoinRsp whose view
// does not name it or is malformed, or whose digest misses a member, has an
// extra one or gives the joiner a non-zero entry; it accepts a valid one.
func TestJoinRspRejectsDigestMismatch(t *testing.T) {
	coord, other, extra := digest.Member{ID: 1, Inc: 1}, digest.Member{ID: 2, Inc: 1}, digest.Member{ID: 9, Inc: 1}
	self := digest.Member{ID: 3, Inc: 1}
	view := View{ID: digest.ViewID{Coord: coord, Counter: 5}, Members: []Peer{{coord, "1"}, {other, "2"}, {self, "3"}}}
	entries := []digest.Entry{{Member: coord, Delivered: 10, Received: 10}, {Member: other, Low: 2, Delivered: 7, Received: 8}, {Member: self}}
	good := digest.New(entries)
	for _, tc := range []struct {
		name string
		v    View
		d    digest.Digest
		to   digest.Member
		noD  bool
		ok   bool
	}{
		{name: "valid", v: view, d: good, to: self, ok: true},
		{name: "digest misses a member", v: view, d: digest.New(entries[:2]), to: self},
		{name: "digest misses the joiner's peer", v: view, d: digest.New([]digest.Entry{entries[0], entries[2]}), to: self},
		{name: "digest has an extra member", v: view, d: digest.New(append(append([]digest.Entry{}, entries...), digest.Entry{Member: extra})), to: self},
		{name: "joiner's own entry not 0", v: view, d: digest.New([]digest.Entry{entries[0], entries[1], {Member: self, Delivered: 4, Received: 4}}), to: self},
		{name: "view without the joiner", v: View{ID: view.ID, Members: view.Members[:2]}, d: digest.New(entries[:2]), to: self},
		{name: "coordinator not first", v: View{ID: view.ID, Members: []Peer{view.Members[1], view.Members[0], view.Members[2]}}, d: good, to: self},
		{name: "no digest", v: view, noD: true, to: self},
		{name: "other incarnation", v: view, d: good, to: digest.Member{ID: 3, Inc: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var installed digest.Digest
			app := newFakeApp()
			g, err := New(Config{Group: 7, ID: 3, Addr: "3", Logger: discardLogger,
				NewProtocol: func(m digest.Member, now time.Duration) (Protocol, error) {
					p := newFakeProto(m, app, now)
					return recordingProto{p, &installed}, nil
				}})
			require.NoError(t, err)
			require.NoError(t, g.Join(0))
			g.join.discovering = false
			g.join.coord = Peer{coord, "1"}
			g.sendJoinReq(0)
			require.Equal(t, self, g.Self().Member)
			m := &msg{typ: typeJoinRsp, view: tc.v.ID, member: tc.to}
			m.withView(tc.v)
			if !tc.noD {
				m.withDigest(tc.d)
			}
			b, err := m.encode(7, coord)
			require.NoError(t, err)
			require.NoError(t, g.Receive(b, time.Millisecond))
			if tc.ok {
				require.Equal(t, StatusMember, g.Status())
				require.True(t, installed.Equal(good))
				require.Zero(t, g.Stats().JoinRspRejected)
				return
			}
			require.Equal(t, StatusJoining, g.Status())
			require.Equal(t, uint64(1), g.Stats().JoinRspRejected)
			require.Nil(t, g.Protocol())
		})
	}
}

type recordingProto struct {
	*fakeProto
	installed *digest.Digest
}

func (r recordingProto) InstallView(v View, d digest.Digest, now time.Duration) {
	*r.installed = d
	r.fakeProto.InstallView(v, d, now)
}

// The scenarios of issue 4 below run on the simulator with the real nakack
// (node, NakackProtocol) under every member.

// TestCoordinatorCrashDuringJoin: the coordinator crashes while a join is
// in progress (when the JOIN_REQ reaches it, right after it sent the
// JoinRsp, or right after it multicast the view) while the others send; the
// next member takes over, the joiner ends in the survivors' view, every
// survivor delivers everything the survivors sent (the joiner from its join
// digest on) and nothing is reported lost or answered MSG_NOT_FOUND.
func TestCoordinatorCrashDuringJoin(t *testing.T) {
	for _, when := range []uint8{typeJoinReqCrash, typeJoinRspCrash, typeViewCrash} {
		for seed := range uint64(seeds(20, 4)) {
			t.Run(fmt.Sprintf("%s/seed%d", crashNames[when], seed), func(t *testing.T) {
				h := newNakHarness(t, seed, lossyNet(seed, 0.05))
				a, b, c, d := h.add(1), h.add(2), h.add(3), h.add(4)
				for _, n := range []*node{a, b, c, d} {
					n.rejoin = true
				}
				h.join(0, a)
				h.join(60*time.Millisecond, b, c)
				h.runUntil(func() bool { return converged(a, b, c) && quiet(a, b, c) }, 5*time.Second, "v={A,B,C}")
				orig := a.g.View()
				crashed := false
				h.s.AddTap(func(ev sim.TapEvent) {
					if crashed || len(ev.Data) < 3 || !IsMembership(wire.Type(ev.Data[2])) {
						return
					}
					m, err := decode(ev.Data, 7)
					if err != nil {
						return
					}
					hit := (when == typeJoinReqCrash && ev.Kind == sim.TapDeliver && ev.To == a.Member() && m.typ == typeJoinReq) ||
						(when == typeJoinRspCrash && ev.Kind == sim.TapSend && ev.From == a.Member() && m.typ == typeJoinRsp) ||
						(when == typeViewCrash && ev.Kind == sim.TapSend && ev.From == a.Member() && m.typ == typeView)
					if hit {
						crashed = true
						h.s.Schedule(ev.At, func(time.Duration) { h.s.Crash(a.Member()) })
					}
				})
				stop := h.s.Now() + 500*time.Millisecond
				for _, n := range []*node{b, c} {
					h.traffic(n, h.s.Now(), stop, 3*time.Millisecond)
				}
				h.join(h.s.Now()+10*time.Millisecond, d)
				h.runUntil(func() bool { return crashed && converged(b, c, d) && quiet(b, c, d) }, h.s.Now()+20*time.Second, "survivors' view")
				require.Equal(t, orig.Members[1].Member, b.g.View().Coord().Member, "the next member took over")
				h.run(max(h.s.Now(), stop))
				h.s.SetNet(sim.NetConfig{})
				h.runUntil(func() bool { return allDelivered(b, c, d) }, h.s.Now()+10*time.Second, "all delivered")
				for _, n := range []*node{b, c, d} {
					_, ok := n.p().WindowState(a.self())
					require.False(t, ok, "crashed coordinator's window closed at %d", n.id)
					require.Empty(t, n.app.lost, "node %d", n.id)
				}
				h.noNotFound()
				h.noErrors()
			})
		}
	}
}

const (
	typeJoinReqCrash uint8 = iota
	typeJoinRspCrash
	typeViewCrash
)

var crashNames = []string{"on JoinReq", "after JoinRsp", "after View"}

// TestSenderCrashSamePrefix: a member crashes while every member sends
// under loss; the coordinator fixes the cut (ranges no survivor holds are
// declared lost: nakack Gaps), survivors complete the rest from each other,
// and every survivor ends with the same prefix of the crashed sender's
// messages (same fold: delivered or reported lost, in order), then closes
// its window.
func TestSenderCrashSamePrefix(t *testing.T) {
	lostSeen := 0
	// Seed 928: a joiner's late JOIN_REQ retry replaced it right after it
	// joined (gms onJoinReq).
	for _, seed := range seedList(t, 200, 16, 928) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newNakHarness(t, seed, lossyNet(seed, 0.2))
			// The founder founds after one discovery round, as when these
			// seeds were chosen: with three rounds (the default) the first 200
			// seeds no longer make a cut with lost ranges (6 of 800 do).
			h.tweak = func(c *Config) { c.DiscoveryRounds = 1 }
			all := h.joinFour()
			start := h.s.Now()
			stop := start + 800*time.Millisecond
			for _, n := range all {
				h.traffic(n, start, stop, time.Millisecond)
			}
			r := rand.New(rand.NewPCG(seed, 7))
			crashAt := start + time.Duration(100+r.IntN(500))*time.Millisecond
			victim := all[1+r.IntN(3)]
			vm := victim.self()
			h.s.Schedule(crashAt, func(time.Duration) { h.s.Crash(victim.Member()) })
			surv := others(all, victim)
			h.runUntil(func() bool { return h.s.Now() > crashAt && converged(surv...) && quiet(surv...) }, crashAt+20*time.Second, "cut closed")
			var last *senderFold
			for _, n := range surv {
				_, open := n.p().WindowState(vm)
				require.False(t, open, "seed %d: window still open at %d", seed, n.id)
				st := n.app.state[vm]
				require.NotNil(t, st, "seed %d", seed)
				if last != nil {
					require.Equal(t, *last, *st, "seed %d: survivors differ on the crashed sender's prefix", seed)
				}
				last = st
				if len(n.app.lost[vm]) > 0 {
					lostSeen++
				}
			}
			h.run(max(h.s.Now(), stop))
			h.s.SetNet(sim.NetConfig{})
			h.runUntil(func() bool { return allDelivered(surv...) }, h.s.Now()+10*time.Second, "drained")
			for _, n := range surv {
				for _, s := range surv {
					require.Empty(t, n.app.lost[s.self()], "seed %d: a survivor's message reported lost", seed)
				}
			}
			h.noNotFound()
			h.noErrors()
		})
	}
	t.Logf("survivors with lost ranges of the crashed sender: %d", lostSeen)
	if seeds(1, 0) == 1 && defaultSeeds() {
		require.NotZero(t, lostSeen, "no seed made the coordinator declare a range lost (cut gaps path untested)")
	}
}

// TestPartitionMerge: {A,B} | {C,D} under traffic, then the partition
// heals: the coordinators merge into one view; every message is delivered
// exactly once or reported lost (FIFO folds), every member ends with every
// message's fate known, and a range is reported lost only at a member of the
// other side and only at or below the Low the merge digest gives for its
// sender (what the sender's side had purged).
func TestPartitionMerge(t *testing.T) {
	lostSeen := 0
	for seed := range uint64(seeds(100, 8)) {
		h := newNakHarness(t, seed, sim.NetConfig{Jitter: 200 * time.Microsecond})
		a, b, c, d := h.add(1), h.add(2), h.add(3), h.add(4)
		all := []*node{a, b, c, d}
		var merges []digest.Digest
		h.s.AddTap(func(ev sim.TapEvent) {
			if ev.Kind != sim.TapSend || len(ev.Data) < 3 || !IsMembership(wire.Type(ev.Data[2])) {
				return
			}
			if m, err := decode(ev.Data, 7); err == nil && m.typ == typeView && m.kind == 1 {
				merges = append(merges, m.dig)
			}
		})
		h.join(0, a)
		h.join(60*time.Millisecond, b, c, d)
		h.runUntil(func() bool { return converged(all...) && quiet(all...) }, 5*time.Second, "joined")
		start := h.s.Now()
		stop := start + 3*time.Second
		for _, n := range all {
			h.traffic(n, start, stop, 2*time.Millisecond)
		}
		heal := start + 1500*time.Millisecond
		h.s.Partition(start+300*time.Millisecond, heal,
			[]digest.Member{a.Member(), b.Member()}, []digest.Member{c.Member(), d.Member()})
		ok, err := h.s.RunWhile(func() bool { return !(converged(a, b) && converged(c, d) && quiet(a, b) && quiet(c, d)) },
			10*time.Millisecond, heal)
		require.NoError(t, err)
		require.True(t, ok, "seed %d: two views with closed cuts: %s", seed, h.dump())
		h.runUntil(func() bool { return h.s.Now() > heal && converged(all...) && quiet(all...) },
			start+20*time.Second, "merged view")
		h.run(max(h.s.Now(), stop))
		h.runUntil(func() bool { return allDelivered(all...) }, h.s.Now()+10*time.Second, "all delivered")
		require.NotZero(t, a.g.Stats().Merges+c.g.Stats().Merges, "seed %d", seed)
		require.NotEmpty(t, merges)
		side := func(m digest.Member) int {
			if m.ID <= 2 {
				return 0
			}
			return 1
		}
		for _, n := range all {
			for s, rs := range n.app.lost {
				require.NotEqual(t, side(n.self()), side(s), "seed %d: %d reports its own side's %v lost", seed, n.id, s)
				var low uint64
				for _, md := range merges {
					if e, ok := md.Lookup(s); ok {
						low = max(low, e.Low)
					}
				}
				for _, r := range rs {
					require.LessOrEqual(t, r.To, low, "seed %d: %d reports %v of %v lost above the purge point the merge gave", seed, n.id, r, s)
				}
				lostSeen++
			}
			require.Equal(t, n.sent(), n.app.state[n.self()].last, "seed %d", seed)
		}
		h.noNotFound()
		h.noErrors()
		if t.Failed() {
			return
		}
	}
	t.Logf("(member, sender) pairs with ranges reported lost after a merge: %d", lostSeen)
	require.NotZero(t, lostSeen, "no merge had anything purged to report (merge lost path untested)")
}

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

// TestRejoinNewIncarnation: a member leaves gracefully and rejoins: the new
// incarnation delivers every message from its JoinRsp digest on and none its
// earlier incarnation delivered; its own seqnos restart at 1 and the others
// keep them apart from the old ones (the old incarnation's window is
// closed after delivering all it sent).
func TestRejoinNewIncarnation(t *testing.T) {
	// Seed 71: a leaver's request after the view that dropped it drew
	// MSG_NOT_FOUND (nakack 3099734).
	for _, seed := range seedList(t, 20, 4, 71) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newNakHarness(t, seed, lossyNet(seed, 0.05))
			a, b, c := h.add(1), h.add(2), h.add(3)
			var rsps []sentJoinRsp
			h.s.AddTap(func(ev sim.TapEvent) {
				if ev.Kind != sim.TapSend || len(ev.Data) < 3 || !IsMembership(wire.Type(ev.Data[2])) {
					return
				}
				if m, err := decode(ev.Data, 7); err == nil && m.typ == typeJoinRsp && m.kind == 0 {
					rsps = append(rsps, sentJoinRsp{at: ev.At, from: m.sender, to: m.member, v: m.v, dig: m.dig})
				}
			})
			h.join(0, a)
			h.join(60*time.Millisecond, b, c)
			h.runUntil(func() bool { return converged(a, b, c) && quiet(a, b, c) }, 5*time.Second, "joined")
			start := h.s.Now()
			stop := start + 1500*time.Millisecond
			for _, n := range []*node{a, b, c} {
				h.traffic(n, start, stop, 2*time.Millisecond)
			}
			old := b.self()
			var oldApp *fakeApp
			var oldSeq uint64
			h.do(start+400*time.Millisecond, b, func(now time.Duration) {
				oldApp, oldSeq = b.app, b.sent()
				require.NoError(t, b.g.Leave(now))
			})
			h.runUntil(func() bool { return len(b.left) == 1 && converged(a, c) && quiet(a, c) }, start+5*time.Second, "left")
			require.NoError(t, b.left[0])
			for _, n := range []*node{a, c} {
				_, open := n.p().WindowState(old)
				require.False(t, open, "old incarnation's window closed")
				require.Equal(t, oldSeq, n.app.state[old].last, "every message of the leaver delivered")
				require.Empty(t, n.app.lost[old])
			}
			h.join(h.s.Now()+50*time.Millisecond, b)
			h.runUntil(func() bool { return converged(a, b, c) && quiet(a, b, c) }, h.s.Now()+5*time.Second, "rejoined")
			nb := b.self()
			require.Equal(t, old.ID, nb.ID)
			require.Greater(t, nb.Inc, old.Inc)
			h.run(stop + 100*time.Millisecond)
			h.s.SetNet(sim.NetConfig{})
			h.runUntil(func() bool { return allDelivered(a, b, c) }, h.s.Now()+10*time.Second, "delivered")
			var jd digest.Digest
			for _, r := range rsps {
				if r.to == nb {
					jd = r.dig
				}
			}
			require.NotZero(t, jd.Len())
			for _, s := range []*node{a, c} {
				sm := s.self()
				e, _ := jd.Lookup(sm)
				got := b.app.delivered[sm]
				require.NotEmpty(t, got)
				require.Equal(t, e.Delivered+1, got[0], "new incarnation starts right after its JoinRsp digest")
				require.Greater(t, got[0], oldApp.state[sm].last, "nothing its earlier incarnation delivered")
			}
			require.Equal(t, uint64(1), a.app.delivered[nb][0], "own seqnos restart at 1")
			require.Equal(t, b.sent(), a.app.state[nb].last)
			require.Equal(t, oldSeq, a.app.state[old].last, "old incarnation's messages untouched")
			h.noNotFound()
			h.noErrors()
		})
	}
}

const (
	cutReqCrash uint8 = iota
	cutFixCrash
	cutAckCrash
)

var cutCrashNames = []string{"on CutReq", "after cut fixed", "on first CutAck"}

// TestCoordinatorCrashDuringCut: a member crashes while everyone sends
// under loss; the coordinator crashes while that member's cut is open
// (right after asking for reports, right after fixing the cut, or when the
// first acknowledgement reaches it). The next member takes over, resumes
// the open cut (and fixes the old coordinator's): every survivor ends with
// the same prefix of both crashed senders (same fold), both windows close,
// and the survivors' own messages are all delivered, none lost.
func TestCoordinatorCrashDuringCut(t *testing.T) {
	for _, when := range []uint8{cutReqCrash, cutFixCrash, cutAckCrash} {
		for seed := range uint64(seeds(30, 5)) {
			t.Run(fmt.Sprintf("%s/seed%d", cutCrashNames[when], seed), func(t *testing.T) {
				h := newNakHarness(t, seed, lossyNet(seed, 0.1))
				a, b, c, d, e := h.add(1), h.add(2), h.add(3), h.add(4), h.add(5)
				all := []*node{a, b, c, d, e}
				h.join(0, a)
				h.join(60*time.Millisecond, b, c, d, e)
				h.runUntil(func() bool { return converged(all...) && quiet(all...) }, 5*time.Second, "joined")
				r := rand.New(rand.NewPCG(seed, 13))
				victim := []*node{c, d, e}[r.IntN(3)]
				vm, am := victim.self(), a.self()
				crashed := false
				h.s.AddTap(func(ev sim.TapEvent) {
					if crashed || len(ev.Data) < 3 || !IsMembership(wire.Type(ev.Data[2])) {
						return
					}
					m, err := decode(ev.Data, 7)
					if err != nil || m.member != vm {
						return
					}
					hit := (when == cutReqCrash && ev.Kind == sim.TapSend && ev.From == a.Member() && m.typ == typeCutReq) ||
						(when == cutFixCrash && ev.Kind == sim.TapSend && ev.From == a.Member() && m.typ == typeCut && m.kind == 0) ||
						(when == cutAckCrash && ev.Kind == sim.TapDeliver && ev.To == a.Member() && m.typ == typeCutAck)
					if hit {
						crashed = true
						h.s.Schedule(ev.At, func(time.Duration) { h.s.Crash(a.Member()) })
					}
				})
				start := h.s.Now()
				stop := start + 2500*time.Millisecond
				for _, n := range all {
					h.traffic(n, start, stop, 2*time.Millisecond)
				}
				h.s.Schedule(start+time.Duration(100+r.IntN(300))*time.Millisecond, func(time.Duration) { h.s.Crash(victim.Member()) })
				var surv []*node
				for _, n := range all[1:] {
					if n != victim {
						surv = append(surv, n)
					}
				}
				var next digest.Member
				for _, p := range a.g.View().Members[1:] {
					if p.Member != vm {
						next = p.Member
						break
					}
				}
				h.runUntil(func() bool { return crashed && converged(surv...) && quiet(surv...) }, start+20*time.Second, "cuts closed")
				require.Equal(t, next, b.g.View().Coord().Member, "the next member took over")
				for _, n := range surv {
					if n.self() == next {
						require.Equal(t, uint64(1), n.g.Stats().CutsResumed, "the new coordinator resumed the open cut")
					}
				}
				for _, gone := range []digest.Member{vm, am} {
					var last *senderFold
					for _, n := range surv {
						_, open := n.p().WindowState(gone)
						require.False(t, open, "window of %v still open at %d", gone, n.id)
						st := n.app.state[gone]
						require.NotNil(t, st)
						if last != nil {
							require.Equal(t, *last, *st, "survivors differ on %v's prefix", gone)
						}
						last = st
					}
				}
				h.run(max(h.s.Now(), stop))
				h.s.SetNet(sim.NetConfig{})
				h.runUntil(func() bool { return allDelivered(surv...) }, h.s.Now()+10*time.Second, "drained")
				for _, n := range surv {
					for _, s := range surv {
						require.Empty(t, n.app.lost[s.self()], "a survivor's message reported lost")
					}
				}
				h.noNotFound()
				h.noErrors()
			})
		}
	}
}

// TestMergeUnseenMember: {A,B} | {C,D} under traffic; E joins the {C,D}
// side during the partition and sends, so A and B never saw E (and E never
// saw what A and B sent before the merge). After the heal the merge view
// holds all five; each side's windows for the members it never saw start
// at 1: every message is delivered once or reported lost, nothing is
// skipped silently (the first seqno is accounted for), and a range is
// reported lost only by the other side and only at or below the Low the
// merge digest gives for its sender.
func TestMergeUnseenMember(t *testing.T) {
	lostSeen := 0
	for seed := range uint64(seeds(20, 4)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newNakHarness(t, seed, sim.NetConfig{Jitter: 200 * time.Microsecond})
			a, b, c, d, e := h.add(1), h.add(2), h.add(3), h.add(4), h.add(5)
			all := []*node{a, b, c, d, e}
			var merges []digest.Digest
			h.s.AddTap(func(ev sim.TapEvent) {
				if ev.Kind != sim.TapSend || len(ev.Data) < 3 || !IsMembership(wire.Type(ev.Data[2])) {
					return
				}
				if m, err := decode(ev.Data, 7); err == nil && m.typ == typeView && m.kind == 1 {
					merges = append(merges, m.dig)
				}
			})
			h.join(0, a)
			h.join(60*time.Millisecond, b, c, d)
			h.runUntil(func() bool { return converged(a, b, c, d) && quiet(a, b, c, d) }, 5*time.Second, "joined")
			start := h.s.Now()
			stop := start + 3*time.Second
			for _, n := range all {
				h.traffic(n, start, stop, 2*time.Millisecond)
			}
			heal := start + 2*time.Second
			h.s.Partition(start+300*time.Millisecond, heal,
				[]digest.Member{a.Member(), b.Member()}, []digest.Member{c.Member(), d.Member(), e.Member()})
			ok, err := h.s.RunWhile(func() bool { return !(converged(a, b) && converged(c, d) && quiet(a, b) && quiet(c, d)) },
				10*time.Millisecond, heal)
			require.NoError(t, err)
			require.True(t, ok, "two views with closed cuts: %s", h.dump())
			h.join(h.s.Now(), e)
			ok, err = h.s.RunWhile(func() bool { return !(converged(c, d, e) && quiet(c, d, e)) }, 10*time.Millisecond, heal)
			require.NoError(t, err)
			require.True(t, ok, "E joined {C,D} before the heal: %s", h.dump())
			h.runUntil(func() bool { return h.s.Now() > heal && converged(all...) && quiet(all...) }, start+20*time.Second, "merged view")
			h.run(max(h.s.Now(), stop))
			h.runUntil(func() bool { return allDelivered(all...) }, h.s.Now()+10*time.Second, "all delivered")
			require.NotEmpty(t, merges)
			side := func(m digest.Member) int {
				if m.ID <= 2 {
					return 0
				}
				return 1
			}
			em := e.self()
			for _, md := range merges {
				require.True(t, md.Contains(em), "merge digest without E")
			}
			for _, n := range all {
				for s, rs := range n.app.lost {
					require.NotEqual(t, side(n.self()), side(s), "%d reports its own side's %v lost", n.id, s)
					var low uint64
					for _, md := range merges {
						if e, ok := md.Lookup(s); ok {
							low = max(low, e.Low)
						}
					}
					for _, r := range rs {
						require.LessOrEqual(t, r.To, low, "%d reports %v of %v lost above the merge digest's Low", n.id, r, s)
					}
				}
			}
			for _, n := range []*node{a, b} {
				// E was never seen here: its history starts at 1, delivered or
				// reported lost, never skipped.
				first := uint64(0)
				if rs := n.app.lost[em]; len(rs) > 0 {
					first = rs[0].From
				}
				if ds := n.app.delivered[em]; len(ds) > 0 && (first == 0 || ds[0] < first) {
					first = ds[0]
				}
				require.Equal(t, uint64(1), first, "%d: E's first message neither delivered nor reported lost", n.id)
				require.Equal(t, e.sent(), n.app.state[em].last)
				if len(n.app.lost[em]) > 0 {
					lostSeen++
				}
			}
			h.noNotFound()
			h.noErrors()
		})
	}
	t.Logf("members of {A,B} with E's early messages reported lost: %d", lostSeen)
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
