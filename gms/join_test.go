package gms

import (
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/sim"
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
