package gms

import (
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/sim"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

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
