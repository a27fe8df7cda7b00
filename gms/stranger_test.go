package gms

import (
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/sim"
	"github.com/stretchr/testify/require"
)

// TestStrangerCannotSteer (simulator, no loss, datagrams injected by hand
// into a converged group {A,B,C}, A coordinating): a member outside the
// view cannot hand anyone a view (as its coordinator or under its own id),
// have members excluded, fetch the state, end a leave or lead a merge with
// a member of the view's id; a JoinRsp counts only from the member the
// JOIN_REQ went to. (The driver checks that a member of the view is heard
// only from its address: here the claimed ids are taken as they are.)
func TestStrangerCannotSteer(t *testing.T) {
	h, a, b, c := joinedThree(t)
	v := a.g.View()
	x := Peer{Member: digest.Member{ID: 9, Inc: 1}, Addr: "9"}
	enc := func(m *msg, from digest.Member) []byte {
		d, err := m.encode(7, from)
		require.NoError(t, err)
		return d
	}
	// A view that makes X coordinator of all of us.
	taken := View{ID: digest.ViewID{Coord: x.Member, Counter: v.ID.Counter + 5}, Members: append([]Peer{x}, v.Members...)}
	views := len(b.views)
	h.do(h.s.Now(), b, func(now time.Duration) {
		for _, tc := range []struct {
			what string
			from digest.Member
			m    *msg
		}{
			{"a view from its own coordinator, a stranger", x.Member, (&msg{typ: typeView, view: taken.ID}).withView(taken)},
			{"a merge view from a stranger", x.Member, (&msg{typ: typeView, kind: 1, view: taken.ID, id: 5}).withView(taken).
				withDigest(digest.New(entriesOf(taken)))},
			{"a view not sent by its coordinator", c.self(), (&msg{typ: typeView, view: taken.ID}).withView(taken)},
		} {
			before := b.g.Stats().Refused
			require.NoError(t, b.g.Receive(enc(tc.m, tc.from), now), tc.what)
			require.Equal(t, before+1, b.g.Stats().Refused, tc.what)
			require.True(t, v.Equal(b.g.View()), tc.what)
			require.Len(t, b.views, views, tc.what)
		}
	})
	h.do(h.s.Now(), a, func(now time.Duration) {
		before := a.g.Stats().Refused
		sus := &msg{typ: typeSuspect, view: v.ID}
		sus.withMembers([]digest.Member{b.self(), c.self()})
		require.NoError(t, a.g.Receive(enc(sus, x.Member), now))
		st := &msg{typ: typeStateReq, id: 77}
		st.withAddr(x.Addr)
		require.NoError(t, a.g.Receive(enc(st, x.Member), now))
		mr := &msg{typ: typeMergeReq, id: 78, view: digest.ViewID{Coord: b.self(), Counter: 1}}
		mr.withAddr(x.Addr)
		require.NoError(t, a.g.Receive(enc(mr, b.self()), now))
		require.Equal(t, before+3, a.g.Stats().Refused)
		require.Nil(t, a.g.coord.vc, "no view change for the suspicion")
		require.Empty(t, a.g.prov, "no state served")
		require.Nil(t, a.g.hold, "no merge capture")
		require.Empty(t, a.g.Outbox())
	})
	h.run(h.s.Now() + time.Second)
	for _, n := range []*node{a, b, c} {
		require.True(t, v.Equal(n.g.View()), "member %v", n.self())
		require.Empty(t, n.left)
	}
}

// TestJoinRspOnlyFromCoordinator: a joiner takes a JoinRsp (or a redirect)
// only from the member it sent its JOIN_REQ to.
func TestJoinRspOnlyFromCoordinator(t *testing.T) {
	h := newHarness(t, 1, sim.NetConfig{})
	a := h.add(1)
	h.join(0, a)
	h.runUntil(func() bool { return a.g.Status() == StatusMember }, 5*time.Second, "founded")
	j := h.add(2)
	// Hold the JoinRsps: the joiner stays joining, asking A.
	h.drop = func(from, to digest.Member, b []byte) bool {
		return to.ID == 2 && len(b) > 2 && b[2] == byte(typeJoinRsp)
	}
	h.join(h.s.Now(), j)
	h.runUntil(func() bool { return j.g.Stats().JoinAttempts > 0 }, 5*time.Second, "asked")
	h.drop = nil
	x := digest.Member{ID: 9, Inc: 1}
	h.do(h.s.Now(), j, func(now time.Duration) {
		self := digest.Member{ID: 2, Inc: j.g.join.incs[len(j.g.join.incs)-1]}
		fake := View{ID: digest.ViewID{Coord: x, Counter: 9}, Members: []Peer{{Member: x, Addr: "9"}, {Member: self, Addr: "2"}}}
		rsp := (&msg{typ: typeJoinRsp, view: fake.ID, member: self}).withView(fake).withDigest(digest.New(entriesOf(fake)))
		d, err := rsp.encode(7, x)
		require.NoError(t, err)
		require.NoError(t, j.g.Receive(d, now))
		require.Equal(t, StatusJoining, j.g.Status())
		require.Equal(t, uint64(1), j.g.Stats().Refused)
	})
	h.runUntil(func() bool { return converged(a, j) }, 5*time.Second, "joined A all the same")
}

// entriesOf returns a zero digest entry for every member of v.
func entriesOf(v View) []digest.Entry {
	es := make([]digest.Entry, len(v.Members))
	for i, p := range v.Members {
		es[i] = digest.Entry{Member: p.Member}
	}
	return es
}
