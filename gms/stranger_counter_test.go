package gms

import (
	"math"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/sim"
	"github.com/stretchr/testify/require"
)

// A stranger's view counter must not number the group's views: a
// coordinator numbers its next view above the highest counter it has
// taken, so one datagram naming 2^64-1 once made that view 0, which every
// other member refused as stale, and the group split for good.

// joinedAt5 returns a loss-free fakeProto harness (seed 1) whose members
// 5, 6 and 7 have joined, 5 founding and coordinating, and gone quiet: a
// stranger's id can lie below the coordinator's (it would lead a merge)
// or above it (we would).
func joinedAt5(t *testing.T) (h *harness, a, b, c *node) {
	h = newHarness(t, 1, sim.NetConfig{})
	h.tweak = func(c *Config) { c.CreateGroup = c.ID == 5 }
	a, b, c = h.add(5), h.add(6), h.add(7)
	h.join(0, a)
	h.join(60*time.Millisecond, b, c)
	h.runUntil(func() bool { return converged(a, b, c) && quiet(a, b, c) }, 5*time.Second, "joined")
	return h, a, b, c
}

// strangerCounterRun forms a group of three, has its coordinator receive
// the datagram forge builds (from stranger x), lets the merge attempt it
// may start time out, then admits a joiner. The joiner's view must be the
// next one after the group's, seen by every member.
func strangerCounterRun(t *testing.T, x digest.Member, forge func() *msg, wantErr bool) {
	h, a, b, c := joinedAt5(t)
	before := a.g.View().ID.Counter
	h.do(h.s.Now(), a, func(now time.Duration) {
		d, err := forge().encode(7, x)
		require.NoError(t, err)
		if err := a.g.Receive(d, now); wantErr {
			require.Error(t, err)
		} else {
			require.NoError(t, err)
		}
	})
	h.run(h.s.Now() + 5*time.Second) // a merge with the silent stranger times out
	j := h.add(8)
	h.join(h.s.Now(), j)
	h.runUntil(func() bool { return converged(a, b, c, j) }, 20*time.Second, "joiner admitted by every member")
	require.Equal(t, before+1, j.g.View().ID.Counter, "the joiner's view follows the group's")
}

// TestStrangerHeartbeatCounter: a coordinator HEARTBEAT from a stranger
// with a larger id (the coordinator would lead the merge).
func TestStrangerHeartbeatCounter(t *testing.T) {
	x := digest.Member{ID: 100, Inc: 1}
	for _, tc := range []struct {
		counter uint64
		wantErr bool
	}{{math.MaxUint64, true}, {MaxViewCounter + 1, true}, {MaxViewCounter, false}, {1000, false}} {
		t.Run("", func(t *testing.T) {
			strangerCounterRun(t, x, func() *msg {
				hb := &msg{typ: typeHeartbeat, kind: 1, view: digest.ViewID{Coord: x, Counter: tc.counter}}
				return hb.withAddr("100")
			}, tc.wantErr)
		})
	}
}

// TestStrangerMergeReqCounter: a MERGE_REQ from a stranger with a smaller
// id (it would lead; the coordinator answers and holds).
func TestStrangerMergeReqCounter(t *testing.T) {
	x := digest.Member{ID: 2, Inc: 1}
	for _, tc := range []struct {
		counter uint64
		wantErr bool
	}{{math.MaxUint64, true}, {MaxViewCounter, false}, {1000, false}} {
		t.Run("", func(t *testing.T) {
			strangerCounterRun(t, x, func() *msg {
				mr := &msg{typ: typeMergeReq, id: 99, view: digest.ViewID{Coord: x, Counter: tc.counter}}
				return mr.withAddr("2")
			}, tc.wantErr)
		})
	}
}

// TestViewAckCounterOnlyFromTheView: a VIEW_ACK that refuses a view as
// stale (kind 1, naming the member's higher counter) renumbers the view
// change only when a member of that view sends it, with a counter in
// bounds: a stranger's (or an absurd one) would number the group's views.
func TestViewAckCounterOnlyFromTheView(t *testing.T) {
	h, a, b, c := joinedAt5(t)
	// c's answers no longer reach a: the next view change waits for c.
	require.NoError(t, h.s.Block(c.Member(), a.Member(), sim.BlockMulticast|sim.BlockUnicast))
	j := h.add(8)
	h.join(h.s.Now(), j)
	h.runUntil(func() bool { return a.g.coord.vc != nil }, 5*time.Second, "view change under way")
	vid := a.g.coord.vc.view.ID
	ack := func(from digest.Member, counter uint64) {
		h.do(h.s.Now(), a, func(now time.Duration) {
			d, err := (&msg{typ: typeViewAck, kind: 1, view: vid, a: counter}).encode(7, from)
			require.NoError(t, err)
			_ = a.g.Receive(d, now)
		})
		h.run(h.s.Now() + time.Millisecond)
	}
	ack(digest.Member{ID: 100, Inc: 1}, 500) // a stranger
	require.Equal(t, vid, a.g.coord.vc.view.ID, "a stranger's counter renumbered the view")
	ack(b.self(), MaxViewCounter+1) // a member, out of bounds
	require.Equal(t, vid, a.g.coord.vc.view.ID, "an absurd counter renumbered the view")
	ack(b.self(), 500) // a member: renumbered above its counter
	require.Equal(t, uint64(501), a.g.coord.vc.view.ID.Counter)
}
