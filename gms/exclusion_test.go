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

// TestExclusionNoticeRules (simulator, no loss, datagrams injected by
// hand into a converged group {A,B,C}, A coordinating): who answers a
// heartbeat with an exclusion notice, and what the receiver of one does.
//
// Sender: a member X that is not in the view and whose heartbeat names an
// older view gets a notice (VIEW kind 2 for X's incarnation, carrying the
// current view) from the coordinator, or from the coordinator of the view
// X names; nothing for a coordinator's heartbeat (a merge), a view as new
// as ours, a member of our view or a heartbeat without an address.
//
// Receiver: a notice is never installed; it is ignored when it is for
// another incarnation, names us, is not newer than our view, or comes from
// a member outside our view; otherwise we leave with ErrExcluded (once).
func TestExclusionNoticeRules(t *testing.T) {
	h, a, b, c := joinedThree(t)
	v := a.g.View()
	require.Equal(t, a.self(), v.Coord().Member)
	n := v.ID.Counter
	x := digest.Member{ID: 9, Inc: 1}
	enc := func(m *msg, from digest.Member) []byte {
		d, err := m.encode(7, from)
		require.NoError(t, err)
		return d
	}
	hb := func(kind uint8, view digest.ViewID, addr bool) *msg {
		m := &msg{typ: typeHeartbeat, kind: kind, view: view}
		if addr {
			m.withAddr("9")
		}
		return m
	}
	// notices returns the notices in n's outbox (and clears it: nothing
	// is sent to the made-up member X).
	notices := func(n *node) []*msg {
		var ms []*msg
		for _, o := range n.g.Outbox() {
			m, err := decode(o.Data, 7)
			require.NoError(t, err)
			if m.typ == typeView && m.kind == 2 {
				require.Equal(t, "9", o.To.Addr)
				ms = append(ms, m)
			}
		}
		n.g.ClearOutbox()
		return ms
	}
	older := digest.ViewID{Coord: a.self(), Counter: n - 1}
	h.do(h.s.Now(), a, func(now time.Duration) {
		for _, tc := range []struct {
			what   string
			from   digest.Member
			m      *msg
			notice bool
		}{
			{"an outsider naming an older view", x, hb(0, older, true), true},
			{"an outsider coordinating an older view", x, hb(1, older, true), false},
			{"an outsider naming a view as new", x, hb(0, digest.ViewID{Coord: x, Counter: n}, true), false},
			{"an outsider naming a newer view", x, hb(0, digest.ViewID{Coord: x, Counter: n + 1}, true), false},
			{"a member naming an older view", b.self(), hb(0, older, true), false},
			{"an outsider without address", x, hb(0, older, false), false},
		} {
			require.NoError(t, a.g.Receive(enc(tc.m, tc.from), now))
			ns := notices(a)
			if !tc.notice {
				require.Empty(t, ns, tc.what)
				continue
			}
			require.Len(t, ns, 1, tc.what)
			require.Equal(t, x, ns[0].member, tc.what)
			require.Equal(t, v.ID, ns[0].view, tc.what)
			require.True(t, v.Equal(ns[0].v), tc.what)
		}
	})
	h.do(h.s.Now(), b, func(now time.Duration) {
		// Not the coordinator: only for a view we coordinated.
		require.NoError(t, b.g.Receive(enc(hb(0, older, true), x), now))
		require.Empty(t, notices(b))
		require.NoError(t, b.g.Receive(enc(hb(0, digest.ViewID{Coord: b.self(), Counter: n - 1}, true), x), now))
		ns := notices(b)
		require.Len(t, ns, 1)
		require.Equal(t, x, ns[0].member)
	})

	// Receiver: B. without is a newer view without B.
	without := View{ID: digest.ViewID{Coord: a.self(), Counter: n + 1}, Members: []Peer{v.Members[0], v.Members[2]}}
	with := View{ID: digest.ViewID{Coord: a.self(), Counter: n + 1}, Members: v.Members}
	stale := View{ID: digest.ViewID{Coord: a.self(), Counter: n}, Members: without.Members}
	notice := func(to digest.Member, nv View) *msg {
		m := &msg{typ: typeView, kind: 2, view: nv.ID, member: to}
		return m.withView(nv)
	}
	views := len(b.views)
	h.do(h.s.Now(), b, func(now time.Duration) {
		bm := b.self()
		for _, tc := range []struct {
			what string
			from digest.Member
			m    *msg
		}{
			{"another incarnation", a.self(), notice(digest.Member{ID: bm.ID, Inc: bm.Inc + 1}, without)},
			{"a view with us", a.self(), notice(bm, with)},
			{"not newer", a.self(), notice(bm, stale)},
			{"from outside our view", x, notice(bm, without)},
		} {
			require.NoError(t, b.g.Receive(enc(tc.m, tc.from), now))
			require.Equal(t, StatusMember, b.g.Status(), tc.what)
			require.True(t, v.Equal(b.g.View()), tc.what)
			require.Len(t, b.views, views, tc.what)
			require.Empty(t, b.left, tc.what)
		}
		// From any member of our view: the coordinator, or another.
		require.NoError(t, b.g.Receive(enc(notice(bm, without), c.self()), now))
		require.Equal(t, []error{ErrExcluded}, b.left)
		require.Equal(t, StatusIdle, b.g.Status())
		require.NoError(t, b.g.Receive(enc(notice(bm, without), a.self()), now))
		require.Equal(t, []error{ErrExcluded}, b.left)
	})
	h.run(h.s.Now() + time.Millisecond)
	require.Len(t, b.views, views)
}

// TestExcludedMemberLearnsFromNotice (simulator, fake protocol, random loss
// up to 5% plus targeted drops): m is excluded from a group of four and
// never receives the view that excludes it: every VIEW datagram to m is
// dropped (except notices) as long as m is still that incarnation. In even
// seeds a member R stops hearing m and the coordinator excludes m on R's
// report (R is the coordinator in some seeds); in odd seeds the coordinator
// crashes and the next in line, which stops hearing m, takes over and
// excludes m too, while m never installs a view after the crashed
// coordinator's (so only the new coordinator can tell it). Once the
// excluding view is installed m's datagrams flow again (except the first k
// notices, k drawn from 0..3): m leaves with ErrExcluded within k+1
// heartbeat intervals plus a margin for random loss, and rejoins as a new
// incarnation; every notice sent is addressed to m's old incarnation and
// carries a view without it; nobody else leaves, and no survivor changes
// incarnation.
func TestExcludedMemberLearnsFromNotice(t *testing.T) {
	// droppedExcl: seeds in which a view without m was dropped on its way
	// to m (in the others the network lost it first, or a notice overtook
	// it).
	droppedExcl := 0
	for seed := range uint64(seeds(60, 12)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newHarness(t, seed, lossyNet(seed, 0.05))
			all := h.joinFour()
			vs := byView(all[0].g.View(), all)
			r := rand.New(rand.NewPCG(seed, 29))
			takeover := seed%2 == 1
			var sus, rep, coord *node // rep stops hearing m; coord excludes it
			var crashed *node
			if takeover {
				crashed, coord, rep = vs[0], vs[1], vs[1]
				sus = vs[2+r.IntN(2)]
			} else {
				p := r.Perm(3)
				sus, coord = vs[1+p[0]], vs[0]
				rep = vs[(1+p[1])*r.IntN(2)]
			}
			sus.rejoin = true
			sm := sus.self()
			k := r.IntN(4)
			surv := without(all, sus, crashed)
			incs := map[uint64]digest.Member{}
			for _, n := range surv {
				incs[n.id] = n.self()
			}
			blocked := false
			noticesIn, droppedNotices, dropped := 0, 0, false
			h.drop = func(from, to digest.Member, b []byte) bool {
				if to != sus.Member() {
					return blocked && from == sus.Member() && to == rep.Member()
				}
				m := membershipMsg(b)
				if m == nil || m.typ != typeView || sus.self() != sm || sus.g.Status() != StatusMember {
					return false
				}
				if m.kind != 2 {
					// In the crash seeds every view, else those without m.
					if takeover || !m.v.Contains(sm) {
						if !m.v.Contains(sm) && !dropped {
							dropped = true
							droppedExcl++
						}
						return true
					}
					return false
				}
				if droppedNotices < k {
					droppedNotices++
					return true
				}
				noticesIn++
				return false
			}
			var notices []*msg
			h.s.AddTap(func(ev sim.TapEvent) {
				if ev.Kind != sim.TapSend {
					return
				}
				if m := membershipMsg(ev.Data); m != nil && m.typ == typeView && m.kind == 2 {
					notices = append(notices, m)
				}
			})
			// exclAt: the view without m is installed (m's datagrams flow
			// again); leftAt: m learns it.
			exclAt, leftAt := time.Duration(-1), time.Duration(-1)
			h.s.AddCheck(func(now time.Duration) error {
				if exclAt < 0 && coord.g.IsCoordinator() && !coord.g.View().Contains(sm) {
					exclAt, blocked = now, false
				}
				if leftAt < 0 && len(sus.left) > 0 {
					leftAt = now
				}
				return nil
			})
			start := h.s.Now() + time.Duration(r.IntN(100))*time.Millisecond
			h.s.Schedule(start, func(time.Duration) {
				blocked = true
				if crashed != nil {
					h.s.Crash(crashed.Member())
				}
			})
			h.runUntil(func() bool { return leftAt >= 0 }, start+10*time.Second, "m told it was excluded")
			require.Positive(t, exclAt, "m left before it was excluded")
			hb := sus.g.cfg.HeartbeatInterval
			require.LessOrEqual(t, leftAt-exclAt, time.Duration(k+1)*hb+5*hb,
				"excluded at %v, told at %v (%d notices dropped)", exclAt, leftAt, k)
			require.Equal(t, []error{ErrExcluded}, sus.left)
			require.Equal(t, k, droppedNotices)
			require.Equal(t, 1, noticesIn, "m left on the first notice it received")
			rejoined := append([]*node{sus}, surv...)
			h.runUntil(func() bool { return sus.self() != sm && settled(rejoined...) },
				h.s.Now()+10*time.Second, "rejoined")
			require.Equal(t, sm.ID, sus.self().ID)
			require.Greater(t, sus.self().Inc, sm.Inc)
			require.Equal(t, []error{ErrExcluded}, sus.left)
			require.NotEmpty(t, notices)
			for _, m := range notices {
				require.Equal(t, sm, m.member, "a notice for another member")
				require.False(t, m.v.Contains(sm))
				require.True(t, slices.ContainsFunc(surv, func(n *node) bool { return m.sender == incs[n.id] }),
					"a notice from %v", m.sender)
			}
			for _, n := range surv {
				require.Empty(t, n.left, "node %d", n.id)
				require.Equal(t, incs[n.id], n.self(), "node %d", n.id)
			}
			h.noErrors()
		})
	}
	t.Logf("seeds in which a view without m was dropped on its way to m: %d", droppedExcl)
	require.NotZero(t, droppedExcl)
}

// TestMemberLeftBehindGetsView (simulator, fake protocol, loss up to 5%,
// every member sending): in a group of four a view change happens (even
// seeds: a fifth member joins; odd seeds: a member other than the
// coordinator and M crashes) and M, a member the new view keeps, never
// receives it: every VIEW datagram to M is dropped while the view change
// is under way, so the coordinator gives up waiting for M's
// acknowledgement (ViewChangeTimeout) and counts M as a member while M
// stays in its old view, heartbeating (nobody suspects it). Then the
// first k VIEW datagrams the coordinator resends to M are dropped too (k
// drawn from 0..3).
//
// The coordinator answers M's heartbeats, which name the old view, with
// its view: M installs it within k+1 heartbeat intervals plus a margin for
// random loss, and the group ends in one view with nothing pending (the
// crashed member's cut, which needs M's report, closes); stability, which
// stopped while M's STABLE named the old view, resumes (the coordinator
// purges its own messages again); nobody is excluded or leaves.
func TestMemberLeftBehindGetsView(t *testing.T) {
	for seed := range uint64(seeds(40, 8)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newHarness(t, seed, lossyNet(seed, 0.05))
			all := h.joinFour()
			vs := byView(all[0].g.View(), all)
			r := rand.New(rand.NewPCG(seed, 43))
			a := vs[0]
			p := r.Perm(3)
			m, x := vs[1+p[0]], vs[1+p[1]]
			mm := m.self()
			start := h.s.Now()
			for _, n := range all {
				h.traffic(n, start, start+time.Hour, 5*time.Millisecond)
			}
			join := seed%2 == 0
			final := all
			at := start + time.Duration(50+r.IntN(200))*time.Millisecond
			if join {
				j := h.add(5)
				h.join(at, j)
				h.traffic(j, at, at+time.Hour, 5*time.Millisecond)
				final = append(final, j)
			} else {
				h.s.Schedule(at, func(time.Duration) { h.s.Crash(x.Member()) })
				final = without(all, x)
			}
			old := m.g.View().ID
			k := r.IntN(4)
			vcSeen, vcDone := false, time.Duration(-1)
			resends := 0
			h.drop = func(from, to digest.Member, b []byte) bool {
				if to != m.Member() {
					return false
				}
				msg := membershipMsg(b)
				if msg == nil || msg.typ != typeView || msg.kind != 0 {
					return false
				}
				if vcDone < 0 {
					return true
				}
				resends++
				return resends <= k
			}
			h.s.AddCheck(func(now time.Duration) error {
				if !vcSeen && a.g.coord.vc != nil {
					vcSeen = true
				}
				if vcSeen && vcDone < 0 && a.g.coord.vc == nil {
					vcDone = now
				}
				return nil
			})
			h.runUntil(func() bool { return vcDone >= 0 }, at+10*time.Second, "view change given up")
			require.Equal(t, uint64(1), a.g.Stats().ViewChangeAborts, "M never acknowledged")
			require.Equal(t, old, m.g.View().ID, "M is left in its old view")
			require.True(t, a.g.View().Contains(mm))
			low := a.fp.wins[a.self()].low
			h.runUntil(func() bool { return m.g.View().ID == a.g.View().ID }, vcDone+10*time.Second, "M installed the view")
			hb := a.g.cfg.HeartbeatInterval
			require.LessOrEqual(t, h.s.Now()-vcDone, time.Duration(k+1)*hb+5*hb,
				"view change given up at %v, M caught up at %v (%d resends dropped)", vcDone, h.s.Now(), k)
			require.NotZero(t, a.g.Stats().ViewsResent) // datagrams dropped, duplicates included
			h.runUntil(func() bool { return settled(final...) }, h.s.Now()+10*time.Second, "one view")
			h.runUntil(func() bool { return a.fp.wins[a.self()].low > low }, h.s.Now()+5*time.Second, "purging resumed")
			for _, n := range final {
				require.Empty(t, n.left, "node %d", n.id)
				require.Zero(t, n.g.Stats().BehindExcluded, "node %d", n.id)
			}
			require.Equal(t, mm, m.self())
			h.noErrors()
		})
	}
}

// TestMemberMissingMergeViewExcluded (simulator, fake protocol, no random
// loss): {A,B} and {C,D} are partitioned and heal; A leads the merge and
// D never receives the merge view (every merge VIEW to that incarnation of
// D is dropped), so it stays in C's old view while A's merge view counts
// it. A regular view cannot bring D forward (it lacks the merge digest):
// once the merge is over (MergeTimeout) A excludes D, D learns it (from
// C's exclusion notice: A is not in D's view) and rejoins as a new
// incarnation, and all four end in one view with nothing pending. Nobody
// else leaves.
func TestMemberMissingMergeViewExcluded(t *testing.T) {
	for seed := range uint64(seeds(10, 3)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newHarness(t, seed, sim.NetConfig{Jitter: 300 * time.Microsecond})
			all := h.joinFour()
			a, b, c, d, heal := h.splitPairs(all)
			dm := d.self()
			cv := d.g.View().ID
			d.rejoin = true
			h.drop = func(from, to digest.Member, bs []byte) bool {
				m := membershipMsg(bs)
				return to == d.Member() && d.self() == dm && m != nil && m.typ == typeView && m.kind == 1
			}
			h.runUntil(func() bool { return c.g.View().Contains(a.self()) }, heal+5*time.Second, "merged")
			require.Equal(t, cv, d.g.View().ID)
			h.runUntil(func() bool { return len(d.left) > 0 }, h.s.Now()+10*time.Second, "D excluded")
			require.Equal(t, []error{ErrExcluded}, d.left)
			require.Equal(t, uint64(1), a.g.Stats().BehindExcluded)
			h.runUntil(func() bool { return d.self() != dm && settled(all...) },
				h.s.Now()+10*time.Second, "one view")
			require.Equal(t, a.self(), a.g.View().Coord().Member)
			for _, n := range []*node{a, b, c} {
				require.Empty(t, n.left, "node %d", n.id)
			}
			h.noErrors()
		})
	}
}
