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

// allDelivered: every node delivered every message every sender in ns sent.
func allDelivered(ns ...*node) bool {
	for _, n := range ns {
		p := n.cur()
		if p == nil {
			return false
		}
		for _, s := range ns {
			w := p.wins[s.self()]
			if w == nil || w.hd != s.cur().seq {
				return false
			}
		}
	}
	return true
}

// TestJoinUnderTrafficNoLoss: members join while every member sends, under
// loss, duplication and reordering; stability suspension means no lost range
// and no MSG_NOT_FOUND ever, and every member delivers every message from its
// join digest on.
func TestJoinUnderTrafficNoLoss(t *testing.T) {
	for seed := range uint64(seeds(200, 20)) {
		h := newHarness(t, seed, lossyNet(seed, 0.1))
		a, b, c, d, e := h.add(1), h.add(2), h.add(3), h.add(4), h.add(5)
		r := rand.New(rand.NewPCG(seed, 5))
		h.join(0, a)
		h.join(60*time.Millisecond, b, c)
		for _, n := range []*node{a, b, c} {
			h.traffic(n, 300*time.Millisecond, 1200*time.Millisecond, time.Duration(1+r.IntN(3))*time.Millisecond)
		}
		h.join(400*time.Millisecond+time.Duration(r.IntN(300))*time.Millisecond, d)
		h.join(400*time.Millisecond+time.Duration(r.IntN(300))*time.Millisecond, e)
		all := []*node{a, b, c, d, e}
		h.runUntil(func() bool { return converged(all...) && quiet(all...) }, 10*time.Second, "joined")
		h.run(max(h.s.Now(), 1300*time.Millisecond))
		h.s.SetNet(sim.NetConfig{})
		h.runUntil(func() bool { return allDelivered(all...) && drained(all...) }, 20*time.Second, "all delivered")
		for _, n := range all {
			require.Zero(t, n.p.notFound, "seed %d", seed)
			require.Empty(t, n.app.lost, "seed %d node %d", seed, n.id)
		}
		h.noErrors()
		if t.Failed() {
			return
		}
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

// TestCoordinatorCrashDuringJoin: the coordinator crashes while a join is
// in progress (before it answers, or right after sending the JoinRsp); the
// next member takes over and the joiner ends in the survivors' view.
func TestCoordinatorCrashDuringJoin(t *testing.T) {
	for _, when := range []uint8{typeJoinReqCrash, typeJoinRspCrash, typeViewCrash} {
		for seed := range uint64(seeds(20, 5)) {
			t.Run(fmt.Sprintf("%s/seed%d", crashNames[when], seed), func(t *testing.T) {
				h := newHarness(t, seed, lossyNet(seed, 0.05))
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
					if crashed || ev.Data[0] == fakeMagic {
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
				for _, n := range []*node{b, c} {
					h.traffic(n, h.s.Now(), h.s.Now()+500*time.Millisecond, 3*time.Millisecond)
				}
				h.join(h.s.Now()+10*time.Millisecond, d)
				h.runUntil(func() bool { return crashed && converged(b, c, d) && quiet(b, c, d) }, h.s.Now()+20*time.Second, "survivors' view")
				require.Equal(t, orig.Members[1].Member, b.g.View().Coord().Member, "the next member took over")
				h.s.SetNet(sim.NetConfig{})
				h.runUntil(func() bool { return drained(b, c, d) }, h.s.Now()+10*time.Second, "drained")
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

// TestSenderCrashSamePrefix: a member crashes while sending under loss;
// the coordinator fixes the cut and every survivor ends with the same prefix
// of its messages (delivered or reported lost), then closes its window.
func TestSenderCrashSamePrefix(t *testing.T) {
	for seed := range uint64(seeds(60, 10)) {
		h := newHarness(t, seed, lossyNet(seed, 0.2))
		a, b, c, d := h.add(1), h.add(2), h.add(3), h.add(4)
		all := []*node{a, b, c, d}
		h.join(0, a)
		h.join(60*time.Millisecond, b, c, d)
		h.runUntil(func() bool { return converged(all...) && quiet(all...) }, 5*time.Second, "joined")
		start := h.s.Now()
		for _, n := range all {
			h.traffic(n, start, start+800*time.Millisecond, time.Millisecond)
		}
		r := rand.New(rand.NewPCG(seed, 7))
		crashAt := start + time.Duration(100+r.IntN(500))*time.Millisecond
		victim := []*node{b, c, d}[r.IntN(3)]
		vm := victim.self()
		h.s.Schedule(crashAt, func(time.Duration) { h.s.Crash(victim.Member()) })
		var surv []*node
		for _, n := range all {
			if n != victim {
				surv = append(surv, n)
			}
		}
		h.runUntil(func() bool { return h.s.Now() > crashAt && converged(surv...) && quiet(surv...) }, crashAt+20*time.Second, "cut closed")
		var last *senderFold
		for _, n := range surv {
			require.Nil(t, n.p.wins[vm], "seed %d: window still open at %d", seed, n.id)
			st := n.app.state[vm]
			require.NotNil(t, st, "seed %d", seed)
			if last != nil {
				require.Equal(t, *last, *st, "seed %d: survivors differ on the crashed sender's prefix", seed)
			}
			last = st
		}
		h.s.SetNet(sim.NetConfig{})
		h.runUntil(func() bool { return drained(surv...) }, h.s.Now()+10*time.Second, "drained")
		h.noErrors()
		if t.Failed() {
			return
		}
	}
}

// TestPartitionMerge: {A,B} | {C,D} under traffic, then the partition
// heals: the coordinators merge into one view; every message is delivered
// once or reported lost, and lost only if its sender had purged it.
func TestPartitionMerge(t *testing.T) {
	for seed := range uint64(seeds(30, 5)) {
		h := newHarness(t, seed, sim.NetConfig{Jitter: 200 * time.Microsecond})
		a, b, c, d := h.add(1), h.add(2), h.add(3), h.add(4)
		all := []*node{a, b, c, d}
		h.join(0, a)
		h.join(60*time.Millisecond, b, c, d)
		h.runUntil(func() bool { return converged(all...) && quiet(all...) }, 5*time.Second, "joined")
		start := h.s.Now()
		for _, n := range all {
			h.traffic(n, start, start+3*time.Second, 2*time.Millisecond)
		}
		h.s.Partition(start+300*time.Millisecond, start+1500*time.Millisecond,
			[]digest.Member{a.Member(), b.Member()}, []digest.Member{c.Member(), d.Member()})
		ok, err := h.s.RunWhile(func() bool { return !(converged(a, b) && converged(c, d)) }, 10*time.Millisecond, start+1500*time.Millisecond)
		require.NoError(t, err)
		require.True(t, ok, "seed %d: two views: %v %v %v %v", seed, a.g.View(), b.g.View(), c.g.View(), d.g.View())
		h.runUntil(func() bool { return h.s.Now() > start+1500*time.Millisecond && converged(all...) && quiet(all...) },
			start+20*time.Second, "merged view")
		h.run(start + 3*time.Second)
		h.runUntil(func() bool { return drained(all...) && allDelivered(all...) }, h.s.Now()+10*time.Second, "drained")
		require.NotZero(t, a.g.Stats().Merges+c.g.Stats().Merges, "seed %d", seed)
		for _, n := range all {
			for s, rs := range n.app.lost {
				var sender *node
				for _, x := range all {
					if x.self() == s {
						sender = x
					}
				}
				require.NotNil(t, sender)
				for _, r := range rs {
					require.LessOrEqual(t, r.To, sender.p.wins[s].purged, "seed %d: %d reports %v lost from %d but it was never purged", seed, n.id, r, sender.id)
				}
			}
		}
		h.noErrors()
		if t.Failed() {
			return
		}
	}
}

// TestStateTransferUnderLoss: a member joins during traffic with loss and
// fetches the state; its installed state plus what it delivers afterwards
// equals the provider's state plus what the provider delivers afterwards
// (all application states equal once traffic stops).
func TestStateTransferUnderLoss(t *testing.T) {
	for seed := range uint64(seeds(200, 20)) {
		h := newHarness(t, seed, lossyNet(seed, 0.15))
		h.tweak = func(c *Config) { c.StateChunk = 64; c.StateWindow = 3 }
		a, b, c, d := h.add(1), h.add(2), h.add(3), h.add(4)
		all := []*node{a, b, c, d}
		r := rand.New(rand.NewPCG(seed, 11))
		h.join(0, a)
		h.join(60*time.Millisecond, b, c)
		for _, n := range []*node{a, b, c} {
			h.traffic(n, 200*time.Millisecond, 1500*time.Millisecond, time.Duration(1+r.IntN(3))*time.Millisecond)
		}
		h.join(400*time.Millisecond+time.Duration(r.IntN(300))*time.Millisecond, d)
		h.runUntil(func() bool { return converged(all...) }, 10*time.Second, "joined")
		h.do(h.s.Now(), d, func(now time.Duration) { require.NoError(t, d.g.RequestState(now)) })
		h.runUntil(func() bool { return len(d.states) > 0 }, h.s.Now()+20*time.Second, "state installed")
		require.NoError(t, d.states[0], "seed %d", seed)
		h.run(max(h.s.Now(), 1600*time.Millisecond))
		h.s.SetNet(sim.NetConfig{})
		h.runUntil(func() bool { return allDelivered(all...) && drained(all...) && quiet(all...) }, h.s.Now()+20*time.Second, "delivered")
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
		h.noErrors()
		if t.Failed() {
			return
		}
	}
}

// TestRejoinNewIncarnation: a member leaves gracefully and rejoins: the new
// incarnation delivers every message from its JoinRsp digest on and none its
// earlier incarnation delivered; its own seqnos restart at 1 and the others
// keep them apart from the old ones.
func TestRejoinNewIncarnation(t *testing.T) {
	h := newHarness(t, 21, lossyNet(21, 0.05))
	a, b, c := h.add(1), h.add(2), h.add(3)
	rsps := tapJoinRsps(h)
	h.join(0, a)
	h.join(60*time.Millisecond, b, c)
	h.runUntil(func() bool { return converged(a, b, c) && quiet(a, b, c) }, 5*time.Second, "joined")
	start := h.s.Now()
	for _, n := range []*node{a, b, c} {
		h.traffic(n, start, start+1500*time.Millisecond, 2*time.Millisecond)
	}
	old := b.self()
	var oldApp *fakeApp
	var oldSeq uint64
	h.do(start+400*time.Millisecond, b, func(now time.Duration) {
		oldApp, oldSeq = b.app, b.p.seq
		require.NoError(t, b.g.Leave(now))
	})
	h.runUntil(func() bool { return len(b.left) == 1 && converged(a, c) && quiet(a, c) }, start+5*time.Second, "left")
	require.NoError(t, b.left[0])
	for _, n := range []*node{a, c} {
		require.Nil(t, n.p.wins[old], "old incarnation's window closed")
		require.Equal(t, oldSeq, n.app.state[old].last, "every message of the leaver delivered")
	}
	h.join(h.s.Now()+50*time.Millisecond, b)
	h.runUntil(func() bool { return converged(a, b, c) && quiet(a, b, c) }, h.s.Now()+5*time.Second, "rejoined")
	nb := b.self()
	require.Equal(t, old.ID, nb.ID)
	require.Greater(t, nb.Inc, old.Inc)
	h.traffic(b, h.s.Now(), start+1500*time.Millisecond, 2*time.Millisecond)
	h.run(start + 1600*time.Millisecond)
	h.s.SetNet(sim.NetConfig{})
	h.runUntil(func() bool { return allDelivered(a, b, c) && drained(a, b, c) }, h.s.Now()+10*time.Second, "delivered")
	var jd digest.Digest
	for _, r := range *rsps {
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
	require.Equal(t, b.p.seq, a.app.state[nb].last)
	require.Equal(t, oldSeq, a.app.state[old].last, "old incarnation's messages untouched")
	h.noErrors()
}
