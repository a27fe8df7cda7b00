package engine

import (
	"context"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGroupPeersWake: wake wakes the blocked agents (parked) of the other
// members of the group, once a time they block (it takes the parked flag,
// as a producer's wake does), never the sender's own nor another group's,
// and allocates nothing.
func TestGroupPeersWake(t *testing.T) {
	var g groupPeers
	ga := netip.MustParseAddrPort("239.1.2.3:5000")
	gb := netip.MustParseAddrPort("239.1.2.4:5000")
	woke := map[*logBuffer]int{}
	fake := func() *logBuffer {
		q := &logBuffer{}
		q.wake = func() { woke[q]++ }
		return q
	}
	from, same, running, other := fake(), fake(), fake(), fake()
	g.add(ga, from)
	g.add(ga, same)
	g.add(ga, running)
	g.add(gb, other)
	from.parked.Store(true)
	same.parked.Store(true)
	other.parked.Store(true)

	require.Equal(t, 1, g.wake(ga, from))
	require.Equal(t, map[*logBuffer]int{same: 1}, woke)
	require.False(t, same.parked.Load())
	require.True(t, from.parked.Load())
	require.True(t, other.parked.Load())
	require.Zero(t, g.wake(ga, from), "woken again before it blocked again")

	same.parked.Store(true)
	g.remove(same)
	require.Zero(t, g.wake(ga, from), "woken after it left")
	require.Zero(t, testing.AllocsPerRun(100, func() { g.wake(ga, from) }))
	g.remove(from)
	g.remove(running)
	g.remove(other)
	require.Empty(t, *g.list.Load())
}

// TestSendWakesBlockedPeers: a running member (ThreadingShared) is in
// peers with its group until it is closed, and the members' writes wake
// a blocked agent of their group in this process (a stand-in that
// nothing else wakes), counted in Stats.PeerWakes, and not one of
// another group.
func TestSendWakesBlockedPeers(t *testing.T) {
	rec := newRecorder(0)
	ms := openGroup(t, 2, func(i int, c *Config) {
		if i == 1 {
			c.Handler = rec
		}
	})
	grp := ms[0].tr.Group()
	in := func(q *logBuffer) bool {
		return slices.ContainsFunc(*peers.list.Load(), func(e peer) bool { return e.q == q && e.group == grp })
	}
	require.True(t, in(ms[0].q))
	require.True(t, in(ms[1].q))

	woken := make(chan struct{}, 1)
	stand := &logBuffer{wake: func() { woken <- struct{}{} }}
	var otherWakes atomic.Int32
	other := &logBuffer{wake: func() { otherWakes.Add(1) }}
	// Another group: the same address, a port testGroup never picks.
	peers.add(grp, stand)
	t.Cleanup(func() { peers.remove(stand) })
	peers.add(netip.AddrPortFrom(grp.Addr(), 19999), other)
	t.Cleanup(func() { peers.remove(other) })
	stand.parked.Store(true)
	other.parked.Store(true)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, ms[0].Send(ctx, []byte("wake")))
	select {
	case <-woken:
	case <-ctx.Done():
		t.Fatal("the send did not wake the blocked agent of its group")
	}
	// Either member's write may have been the one that woke it (the
	// receiver's acknowledgements too): the waker counted it.
	require.NotZero(t, ms[0].Stats().PeerWakes+ms[1].Stats().PeerWakes)
	require.NoError(t, rec.waitFor(ctx, func() bool { return rec.total == 1 }))
	require.Zero(t, otherWakes.Load())
	require.True(t, other.parked.Load())

	for i, err := range closeAll(t, ms, 10*time.Second) {
		require.NoError(t, err, "close member %d", i)
	}
	require.False(t, in(ms[0].q))
	require.False(t, in(ms[1].q))
}
