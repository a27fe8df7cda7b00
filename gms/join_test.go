package gms

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/sim"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

func TestJoinFormsOneView(t *testing.T) {
	h := newHarness(t, 1, sim.NetConfig{})
	a, b, c := h.add(1), h.add(2), h.add(3)
	h.join(0, a)
	h.join(100*time.Millisecond, b, c)
	h.runUntil(func() bool { return converged(a, b, c) && quiet(a, b, c) }, 5*time.Second, "one view")
	require.Equal(t, a.self(), a.g.View().Coord().Member)
	h.noErrors()
}

// TestJoinBackoffCountsJoinReqs: the wait for a JoinRsp doubles per
// JOIN_REQ; discovery rounds that went unanswered before the first answer
// do not count (the first JOIN_REQ waits JoinTimeout, up to 25% jitter);
// discovery starts again after every third JOIN_REQ.
func TestJoinBackoffCountsJoinReqs(t *testing.T) {
	const round, jt = 50 * time.Millisecond, 100 * time.Millisecond
	g, err := New(Config{Group: 7, ID: 2, Addr: "2", Logger: discardLogger, DiscoveryTimeout: round, JoinTimeout: jt,
		NewProtocol: func(m digest.Member, now time.Duration) (Protocol, error) {
			return newFakeProto(m, newFakeApp(), now), nil
		}})
	require.NoError(t, err)
	require.NoError(t, g.Join(0))
	now := time.Duration(0)
	for range 4 { // unanswered rounds
		now += round
		g.Tick(now)
		require.Equal(t, StatusJoining, g.Status())
		require.True(t, g.join.discovering)
	}
	ans := &msg{typ: typeDiscovery, kind: 1, view: digest.ViewID{Coord: digest.Member{ID: 1, Inc: 1}, Counter: 1}}
	ans.withPeer(Peer{Member: digest.Member{ID: 1, Inc: 1}, Addr: "1"})
	b, err := ans.encode(7, digest.Member{ID: 1, Inc: 1})
	require.NoError(t, err)
	require.NoError(t, g.Receive(b, now+time.Millisecond))
	for i, want := range []time.Duration{jt, 2 * jt, 4 * jt} {
		now += round
		if i > 0 {
			now = g.NextDeadline()
		}
		g.Tick(now)
		require.False(t, g.join.discovering, "JOIN_REQ %d", i+1)
		wait := g.NextDeadline() - now
		require.GreaterOrEqual(t, wait, want, "JOIN_REQ %d", i+1)
		require.LessOrEqual(t, wait, want+want/4, "JOIN_REQ %d", i+1)
	}
	require.Equal(t, uint64(3), g.Stats().JoinAttempts)
	g.Tick(g.NextDeadline())
	require.True(t, g.join.discovering, "rediscovers after the third JOIN_REQ")
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

// TestMaxJoinAttemptsFounds (simulator): a lone starter that may found
// (CreateGroup) with MaxJoinAttempts below DiscoveryRounds founds its
// group: discovery rounds nobody answers are not join attempts.
func TestMaxJoinAttemptsFounds(t *testing.T) {
	h := newHarness(t, 1, sim.NetConfig{Latency: 100 * time.Microsecond})
	h.tweak = func(c *Config) { c.MaxJoinAttempts, c.DiscoveryRounds = 2, 3 }
	a := h.add(1)
	h.join(0, a)
	h.runUntil(func() bool { return settled(a) }, time.Second, "founded")
	require.Empty(t, a.left)
	require.Equal(t, []digest.Member{a.self()}, a.views[0].IDs())
	require.Zero(t, a.g.Stats().JoinAttempts)
	h.noErrors()
}

// TestMaxJoinAttemptsCountsJoinReqs (simulator): MaxJoinAttempts bounds the
// JOIN_REQs that got no valid JoinRsp, not discovery rounds. A joiner that
// may not found (no CreateGroup) starts with MaxJoinAttempts 2 while there
// is no group yet and hears nothing for ten discovery rounds; then b founds
// one. If b never gets its JOIN_REQs, the joiner gives up with
// ErrJoinFailed after exactly two of them; if it does, it joins.
func TestMaxJoinAttemptsCountsJoinReqs(t *testing.T) {
	const round = 50 * time.Millisecond // the default DiscoveryTimeout
	for _, lose := range []bool{false, true} {
		t.Run(fmt.Sprintf("lose=%v", lose), func(t *testing.T) {
			h := newHarness(t, 1, sim.NetConfig{Latency: 100 * time.Microsecond})
			h.tweak = func(c *Config) {
				c.CreateGroup = c.ID == 1
				if c.ID == 2 {
					c.MaxJoinAttempts = 2
				}
			}
			b, j := h.add(1), h.add(2)
			if lose {
				h.drop = func(from, to digest.Member, d []byte) bool {
					return to == b.Member() && len(d) >= 3 && wire.Type(d[2]) == typeJoinReq
				}
			}
			h.join(0, j)
			h.run(10*round + round/2)
			require.Equal(t, StatusJoining, j.g.Status(), "ten unanswered discovery rounds are not join attempts")
			require.Empty(t, j.left)
			require.Zero(t, j.g.Stats().JoinAttempts)
			h.join(h.s.Now(), b)
			if !lose {
				h.runUntil(func() bool { return settled(b, j) }, h.s.Now()+5*time.Second, "joined")
				require.Empty(t, j.left)
				require.Equal(t, uint64(1), j.g.Stats().JoinAttempts)
				h.noErrors()
				return
			}
			h.runUntil(func() bool { return len(j.left) > 0 }, h.s.Now()+5*time.Second, "join failed")
			require.Equal(t, []error{ErrJoinFailed}, j.left)
			require.Equal(t, uint64(2), j.g.Stats().JoinAttempts, "gave up after MaxJoinAttempts JOIN_REQs")
			require.True(t, settled(b))
			h.noErrors()
		})
	}
}

// TestLateJoinRetryKeepsMember (TestSenderCrashSamePrefix seed 928): a
// joiner's JoinRsp is late, so it retries with a new incarnation; the
// JoinRsp for its first incarnation then arrives and it joins with it
// (a JoinRsp for any incarnation of the join is accepted). Its retry,
// reaching the coordinator after that, is a late copy of a join already
// admitted: it must not make the coordinator replace the member that just
// joined (which would exclude it: it would leave with ErrExcluded, and the
// incarnation admitted in its place would never exist).
func TestLateJoinRetryKeepsMember(t *testing.T) {
	h := newHarness(t, 1, sim.NetConfig{})
	a, b := h.add(1), h.add(2)
	var held []byte
	h.drop = func(from, to digest.Member, d []byte) bool {
		if len(d) < 3 {
			return false
		}
		switch typ := wire.Type(d[2]); {
		case to == b.Member() && typ == typeJoinRsp && b.g.Self().Member.Inc < 2:
			return true // every JoinRsp until b retries with a new incarnation
		case to == a.Member() && typ == typeJoinReq && held == nil && b.g.Self().Member.Inc == 2:
			held = append([]byte(nil), d...) // b's retry, held until b has joined
			return true
		}
		return false
	}
	h.join(0, a)
	h.join(100*time.Millisecond, b)
	h.runUntil(func() bool { return converged(a, b) && quiet(a, b) }, 5*time.Second, "joined")
	require.NotNil(t, held)
	require.Equal(t, uint32(1), b.g.Self().Member.Inc, "b joined with its first incarnation's JoinRsp")
	v := a.g.View()
	h.do(h.s.Now(), a, func(now time.Duration) { require.NoError(t, a.g.Receive(held, now)) })
	h.run(h.s.Now() + 3*time.Second)
	require.Equal(t, v, a.g.View(), "the late retry changed nothing")
	require.True(t, converged(a, b))
	require.Empty(t, b.left)
	require.Equal(t, uint64(1), a.g.Stats().JoinReqStale)
	h.noErrors()
}

// TestJoinReqReplacesOlderIncarnation: which member of the view with the
// joiner's id a JOIN_REQ replaces. One admitted by the same join (its
// incarnation at or above the request's first, a) stays, unless it is
// already queued for exclusion or suspected (it never acknowledged: the
// joiner is still joining); an incarnation of an earlier join, or any when
// the request does not say (a = 0, an older joiner), is replaced.
func TestJoinReqReplacesOlderIncarnation(t *testing.T) {
	m21 := digest.Member{ID: 2, Inc: 1}
	for _, tc := range []struct {
		name     string
		first    uint64
		queued   bool
		suspect  bool
		replaced bool
	}{
		{"same join", 1, false, false, false},
		{"same join, never acknowledged", 1, true, false, true},
		{"same join, suspected", 1, false, true, true},
		{"a later join", 3, false, false, true},
		{"unknown join", 0, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 1, sim.NetConfig{})
			a, b := h.add(1), h.add(2)
			h.join(0, a)
			h.join(100*time.Millisecond, b)
			h.runUntil(func() bool { return converged(a, b) && quiet(a, b) }, 5*time.Second, "joined")
			require.Equal(t, m21, b.g.Self().Member)
			g := a.g
			h.do(h.s.Now(), a, func(now time.Duration) {
				if tc.queued {
					g.queueExclusion(m21)
				}
				if tc.suspect {
					g.fd.suspected[m21] = true
				}
				// Hold the view change that a queued exclusion would start,
				// to look at what the request queues.
				g.coord.retryAt = now + time.Hour
				g.onJoinReq(&msg{typ: typeJoinReq, sender: digest.Member{ID: 2, Inc: 3}, a: tc.first, addr: "2"}, now)
				if tc.replaced {
					require.Contains(t, g.coord.excl, m21)
					require.Len(t, g.coord.joins, 1)
					require.Equal(t, digest.Member{ID: 2, Inc: 3}, g.coord.joins[0].Member)
				} else {
					require.NotContains(t, g.coord.excl, m21)
					require.Empty(t, g.coord.joins)
					require.Equal(t, uint64(1), g.Stats().JoinReqStale)
				}
			})
			h.run(h.s.Now() + time.Millisecond)
		})
	}
}

const (
	typeJoinReqCrash uint8 = iota
	typeJoinRspCrash
	typeViewCrash
)

var crashNames = []string{"on JoinReq", "after JoinRsp", "after View"}

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

// TestJoinUnderTrafficNoLoss: members join (on the real nakack) while every
// member sends under loss, duplication and reordering; stability suspension
// (the JoinRsp capture) means no lost range and no MSG_NOT_FOUND ever, and
// every member delivers every message from its join digest on.
func TestJoinUnderTrafficNoLoss(t *testing.T) {
	for seed := range uint64(seeds(200, 20)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s := sim.New(seed, lossyNet(seed, 0.1))
			var ns []*node
			for id := uint64(1); id <= 5; id++ {
				ns = append(ns, newRealNode(t, s, id))
			}
			r := rand.New(rand.NewPCG(seed, 5))
			join := func(at time.Duration, n *node) {
				require.NoError(t, s.Do(at, n.Member(), func(now time.Duration) { require.NoError(t, n.g.Join(now)) }))
			}
			join(0, ns[0])
			join(60*time.Millisecond, ns[1])
			join(60*time.Millisecond, ns[2])
			sent := map[uint64]uint64{}
			for _, n := range ns[:3] {
				every := time.Duration(1+r.IntN(3)) * time.Millisecond
				var step func(now time.Duration)
				step = func(now time.Duration) {
					if n.g.Status() == StatusMember {
						if _, err := n.nk.P.Send(fmt.Appendf(nil, "%d/%d", n.id, sent[n.id]+1), now); err == nil {
							sent[n.id]++
						}
						n.nk.P.Flush(now)
						n.poll()
					}
					if now+every < 1200*time.Millisecond {
						require.NoError(t, s.Do(now+every, n.Member(), step))
					}
				}
				require.NoError(t, s.Do(300*time.Millisecond, n.Member(), step))
			}
			join(400*time.Millisecond+time.Duration(r.IntN(300))*time.Millisecond, ns[3])
			join(400*time.Millisecond+time.Duration(r.IntN(300))*time.Millisecond, ns[4])
			done, err := s.RunWhile(func() bool {
				v := ns[0].g.View()
				for _, n := range ns {
					if n.g.Status() != StatusMember || !n.g.View().Equal(v) || len(v.Members) != 5 || n.nk.P.Captures() > 0 || n.g.coord.vc != nil {
						return true
					}
				}
				return false
			}, 10*time.Millisecond, 10*time.Second)
			require.NoError(t, err)
			require.True(t, done, "seed %d: not joined", seed)
			require.NoError(t, s.RunUntil(max(s.Now(), 1300*time.Millisecond)))
			s.SetNet(sim.NetConfig{})
			done, err = s.RunWhile(func() bool {
				for _, n := range ns {
					for _, snd := range ns[:3] {
						if e, ok := n.nk.P.WindowState(snd.g.Self().Member); !ok || e.Delivered != sent[snd.id] {
							return true
						}
					}
				}
				return false
			}, 10*time.Millisecond, 20*time.Second)
			require.NoError(t, err)
			require.True(t, done, "seed %d: not all delivered", seed)
			for _, n := range ns {
				st := n.nk.P.Stats()
				require.Zero(t, st.MsgNotFoundSent, "seed %d", seed)
				require.Zero(t, st.LostRanges, "seed %d", seed)
				require.Empty(t, n.app.errs, "seed %d node %d", seed, n.id)
				require.Empty(t, n.app.lost)
			}
		})
	}
}

// joinPoint returns where n's window for sender m started: its delivered
// value in the first view n's nakack installed with a window for m (the
// join digest's entry).
func joinPoint(t *testing.T, n *node, m digest.Member) uint64 {
	t.Helper()
	h := n.p().History()
	require.Equal(t, uint64(h.Len()), h.Total(), "node %d: digest history rolled over", n.id)
	for _, r := range h.Records() {
		if !strings.HasPrefix(r.Reason, "view ") {
			continue
		}
		if e, ok := r.Digest.Lookup(m); ok {
			return e.Delivered
		}
	}
	t.Fatalf("node %d: no view with a window for %v", n.id, m)
	return 0
}

// TestJoinInsideFragmentedMessageReal: two members join (at the same
// instant, from the seed) a group of three while member 2 sends a small
// or fragmented message (2-5 fragments of about 8KB) every millisecond,
// on the real nakack under 0-5% loss, duplication and reordering. A
// joiner's window for member 2 starts at its join digest's point, which
// is never inside a fragmented message: a coordinator reassembling one
// reports the seqno before it, and the joiner delivers it whole (before
// nakack's digests stopped at message boundaries, 20 of the 80 join
// points fell inside one and the joiner skipped it). Every joiner must
// deliver exactly member 2's messages that begin after its join point,
// whole and in order, report nothing lost and not stall; the founders
// deliver every message. Seeds replay (go test -run
// TestJoinInsideFragmentedMessageReal).
func TestJoinInsideFragmentedMessageReal(t *testing.T) {
	before := 0 // join points just before a fragmented message
	for seed := range uint64(seeds(40, 10)) {
		h := newNakHarness(t, seed, lossyNet(seed, 0.05))
		founders := []*node{h.add(1), h.add(2), h.add(3)}
		h.join(0, founders[0])
		h.join(60*time.Millisecond, founders[1:]...)
		h.runUntil(func() bool { return converged(founders...) && quiet(founders...) }, 5*time.Second, "founded")
		joiners := []*node{h.add(4), h.add(5)}
		all := append(slices.Clone(founders), joiners...)
		snd := founders[1]
		sm := snd.self()
		r := rand.New(rand.NewPCG(seed, 21))
		sizes := rand.New(rand.NewPCG(seed, 22))
		start := h.s.Now()
		stop := start + 400*time.Millisecond
		ext := map[uint64]uint64{} // member 2's messages: first seqno -> last
		var step func(now time.Duration)
		step = func(now time.Duration) {
			if p := snd.p(); p != nil && snd.g.Status() == StatusMember {
				pl := fmt.Appendf(nil, "%v/%d/", sm, p.NextSeq())
				if sizes.IntN(3) != 0 {
					pl = append(pl, bytes.Repeat([]byte{'f'}, 8000*(1+sizes.IntN(4)))...)
				}
				if seq, err := p.Send(pl, now); err == nil {
					ext[seq] = p.NextSeq() - 1
				}
				p.Flush(now)
				snd.poll()
			}
			if now+time.Millisecond < stop {
				h.do(now+time.Millisecond, snd, step)
			}
		}
		h.do(start, snd, step)
		h.join(start+time.Duration(50+r.IntN(250))*time.Millisecond, joiners...)
		h.runUntil(func() bool {
			return h.s.Now() > stop && converged(all...) && quiet(all...) && allDelivered(all...)
		}, stop+20*time.Second, "joined and delivered")

		firsts := make([]uint64, 0, len(ext))
		for f := range ext {
			firsts = append(firsts, f)
		}
		slices.Sort(firsts)
		for _, n := range all {
			from := uint64(0)
			if slices.Contains(joiners, n) {
				from = joinPoint(t, n, sm)
				for _, f := range firsts {
					require.False(t, f <= from && from < ext[f], "seed %d: node %d: join point %d inside message %d..%d", seed, n.id, from, f, ext[f])
					if f == from+1 && ext[f] > f {
						before++
					}
				}
			}
			var want []uint64
			for _, f := range firsts {
				if f > from {
					want = append(want, f)
				}
			}
			require.Equal(t, want, n.app.delivered[sm], "seed %d: node %d (join point %d)", seed, n.id, from)
			require.Empty(t, n.app.lost[sm], "seed %d: node %d", seed, n.id)
			require.Zero(t, n.p().Stats().LostRanges, "seed %d: node %d", seed, n.id)
			// fakeApp's fold takes a fragmented message for one seqno:
			// its complaints about member 2 are checked above.
			requireComplaintsOnlyAbout(t, seed, n, sm)
		}
		h.noNotFound()
		if t.Failed() {
			return
		}
	}
	t.Logf("joiners whose join point fell just before a fragmented message: %d", before)
	require.NotZero(t, before, "no join point just before a fragmented message")
}

// seed002 is the setting of 002_d6613d63a762f156.txt on the real nakack:
// v1={A,B}; C joins (v2); A's protocol digest lacks C's entry (hidden by
// the gms wrapper: A "installed v2 but has not yet set the digest"); C
// sends 50 messages, delivered everywhere. The test then forces (or not)
// the purge of C and lets D join.
type seed002 struct {
	h          *harness
	a, b, c, d *node
	cm         digest.Member
	rsps       []sentJoinRsp // JoinRsps to D
	dAsks      []wire.Range  // D's retransmission requests for C
	xmits      int           // every XmitReq and MsgNotFound on the network
}

func newSeed002(t *testing.T, seed uint64) *seed002 {
	h := newNakHarness(t, seed, sim.NetConfig{})
	h.tweak = func(c *Config) { c.MaxJoinAttempts = 0 }
	x := &seed002{h: h, a: h.add(1), b: h.add(2), c: h.add(3), d: h.add(4)}
	h.s.AddTap(func(ev sim.TapEvent) {
		if ev.Kind != sim.TapSend {
			return
		}
		wh, body, err := wire.DecodeHeader(ev.Data, 7)
		if err != nil {
			return
		}
		switch {
		case wh.Type == wire.TypeXmitReq || wh.Type == wire.TypeMsgNotFound:
			x.xmits++
			if wh.Type == wire.TypeXmitReq && wh.Sender.ID == x.d.id {
				if r, err := wire.DecodeXmitReq(wh, body); err == nil && r.Target.ID == x.c.id {
					x.dAsks = r.Ranges.AppendTo(x.dAsks)
				}
			}
		case IsMembership(wh.Type):
			if m, err := decode(ev.Data, 7); err == nil && m.typ == typeJoinRsp && m.kind == 0 && m.member.ID == x.d.id {
				x.rsps = append(x.rsps, sentJoinRsp{at: ev.At, from: m.sender, to: m.member, v: m.v, dig: m.dig})
			}
		}
	})
	h.join(0, x.a)
	h.join(60*time.Millisecond, x.b)
	h.runUntil(func() bool { return converged(x.a, x.b) && quiet(x.a, x.b) }, 2*time.Second, "v1={A,B}")
	h.join(h.s.Now(), x.c)
	h.runUntil(func() bool { return converged(x.a, x.b, x.c) && quiet(x.a, x.b, x.c) }, 4*time.Second, "v2={A,B,C}")
	x.cm = x.c.self()
	x.a.hide[x.cm] = true
	x.send(x.c, 50)
	h.runUntil(func() bool {
		for _, n := range []*node{x.a, x.b, x.c} {
			if e, _ := n.p().WindowState(x.cm); e.Delivered != 50 {
				return false
			}
		}
		return true
	}, h.s.Now()+2*time.Second, "C's 50 delivered")
	return x
}

// send makes n send k messages now.
func (x *seed002) send(n *node, k int) {
	x.h.do(x.h.s.Now(), n, func(now time.Duration) {
		for i := 0; i < k; i++ {
			_, err := n.p().Send([]byte{byte(i)}, now)
			require.NoError(x.h.t, err)
		}
		n.p().Flush(now)
		n.poll()
	})
}

// TestJoinRaceSeed002 replays 002_d6613d63a762f156.txt step by step on the
// real nakack: v1={A,B}; C joins; A installs v2 but its digest has no entry
// for C yet; C sends 50 messages and C is purged up to 45 everywhere
// (forced: stability alone would not allow it, see
// TestStabilityNeverPurgesPastCapture); D joins and A builds v3. A never
// sends a JoinRsp with C at 0 or unset. "Entry set belatedly": D joins
// once A has the entry, is given C at 50, never asks C for anything at or
// below it; all end in one view with no retransmission traffic. "Entry
// never set": A keeps dropping the join (bounded digest retries), D keeps
// retrying and never gets a JoinRsp.
func TestJoinRaceSeed002(t *testing.T) {
	for _, tc := range []struct {
		name   string
		belate time.Duration // when A finally has C's entry (0: never)
	}{
		{"entry set belatedly", 400 * time.Millisecond},
		{"entry never set", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newSeed002(t, 2)
			h, a, b, c, d, cm := x.h, x.a, x.b, x.c, x.d, x.cm
			for _, n := range []*node{a, b, c} {
				_, err := n.p().ForcePurge(cm, 45)
				require.NoError(t, err)
				e, _ := n.p().WindowState(cm)
				require.Equal(t, uint64(45), e.Low)
			}
			joinAt := h.s.Now()
			h.join(joinAt, d)
			if tc.belate == 0 {
				h.run(joinAt + 2*time.Second)
				require.Empty(t, x.rsps, "a JoinRsp was sent while C's entry is unset")
				require.NotZero(t, a.g.Stats().JoinDigestRetry)
				require.NotZero(t, a.g.Stats().JoinsDropped)
				require.Greater(t, d.g.Stats().JoinAttempts, uint64(1), "D retries")
				require.NotEqual(t, StatusMember, d.g.Status())
				require.Len(t, a.g.View().Members, 3)
				require.Zero(t, a.p().Captures(), "no capture left behind by dropped joins")
				h.noErrors()
				return
			}
			h.do(joinAt+tc.belate, a, func(time.Duration) { delete(a.hide, cm) })
			h.runUntil(func() bool { return converged(a, b, c, d) && quiet(a, b, c, d) }, joinAt+5*time.Second, "v3={A,B,C,D}")
			require.NotZero(t, a.g.Stats().JoinDigestRetry, "A never met the unset entry")
			require.NotEmpty(t, x.rsps)
			var given uint64
			for _, r := range x.rsps {
				require.GreaterOrEqual(t, r.at, joinAt+tc.belate, "JoinRsp sent while C's entry was unset")
				require.NoError(t, r.dig.Matches(r.v.IDs()))
				e, ok := r.dig.Lookup(cm)
				require.True(t, ok)
				require.Equal(t, uint64(50), e.Delivered)
				require.GreaterOrEqual(t, e.Low, uint64(45))
				if r.to == d.self() {
					given = e.Delivered
				}
			}
			require.Equal(t, uint64(50), given)
			x.send(c, 10)
			h.runUntil(func() bool { e, _ := d.p().WindowState(cm); return e.Delivered == 60 }, h.s.Now()+3*time.Second, "D has C #60")
			for _, r := range x.dAsks {
				require.Greater(t, r.From, given, "D asked C for %v", r)
			}
			require.Equal(t, []uint64{51, 52, 53, 54, 55, 56, 57, 58, 59, 60}, d.app.delivered[cm])
			// All members end with the same view and no retransmission traffic.
			h.run(h.s.Now() + 500*time.Millisecond)
			before := x.xmits
			h.run(h.s.Now() + time.Second)
			require.Equal(t, before, x.xmits, "retransmission traffic goes on")
			require.True(t, converged(a, b, c, d))
			for _, n := range h.nodes {
				require.Zero(t, n.p().Stats().LostRanges)
			}
			h.noNotFound()
			h.noErrors()
		})
	}
}

// TestJoinDigestUnsetEntry: the coordinator's JoinRsp digest (joinDigest,
// over the real nakack's capture) is built over the new view with every
// entry unset; while the protocol's digest has no entry for C the digest
// stays incomplete, naming C, and the capture is released; once the entry
// is there the digest covers exactly v3, C at nakack's numbers, D at 0.
func TestJoinDigestUnsetEntry(t *testing.T) {
	x := newSeed002(t, 3)
	a, cm := x.a, x.cm
	_, err := a.p().ForcePurge(cm, 45)
	require.NoError(t, err)
	dm := digest.Member{ID: 4, Inc: 1}
	v2 := a.g.View()
	v3 := View{ID: digest.ViewID{Coord: a.self(), Counter: v2.ID.Counter + 1}, Members: append(append([]Peer{}, v2.Members...), Peer{dm, "4"})}
	now := x.h.s.Now()

	_, _, err = a.g.joinDigest(v3, []digest.Member{dm}, now)
	require.ErrorIs(t, err, digest.ErrIncomplete)
	require.ErrorContains(t, err, cm.String())
	require.Zero(t, a.p().Captures(), "capture released after an incomplete digest")
	require.Empty(t, a.caps)

	delete(a.hide, cm)
	id, jd, err := a.g.joinDigest(v3, []digest.Member{dm}, now)
	require.NoError(t, err)
	require.NoError(t, jd.Matches(v3.IDs()))
	ec, _ := jd.Lookup(cm)
	require.Equal(t, digest.Entry{Member: cm, Low: 45, Delivered: 50, Received: 50}, ec)
	ed, _ := jd.Lookup(dm)
	require.Equal(t, digest.Entry{Member: dm}, ed)
	require.Equal(t, 1, a.p().Captures())
	require.Contains(t, a.caps, id)
	a.g.proto.ReleaseCapture(id, now)
	require.Zero(t, a.p().Captures())
}
