package nakack

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRepairBuckets(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{0, 0}, {1, 0}, {ms, 0}, {ms + 1, 1}, {2 * ms, 1}, {3 * ms, 2}, {4 * ms, 2},
		{1000 * ms, 10}, {1024 * ms, 10}, {4096 * ms, 12}, {4096*ms + 1, 13}, {time.Hour, 13}, {-ms, 0},
	} {
		var r RepairStats
		r.record(tc.d)
		require.Equal(t, uint64(1), r.Buckets[tc.want], "%v", tc.d)
		if b := RepairBucketBound(tc.want); b >= 0 {
			require.LessOrEqual(t, max(tc.d, 0), b)
		}
		if tc.want > 0 {
			require.Greater(t, tc.d, RepairBucketBound(tc.want-1))
		}
	}
	require.Equal(t, time.Duration(-1), RepairBucketBound(RepairBuckets-1))
	var r RepairStats
	require.Zero(t, r.Mean())
	require.Zero(t, testing.AllocsPerRun(100, func() { r.record(3 * ms) }))
	require.Equal(t, 3*ms, r.Mean())
}

// TestRepairLatency: a lost datagram's gap is measured from its detection
// (the next datagram arriving) to its repair, on the protocol's clock; a
// stream without gaps records nothing.
func TestRepairLatency(t *testing.T) {
	c := newCluster(t, nil, mA, mB)
	ds := c.send(mA, true, payloads("a", 1, 5)...)
	require.Len(t, ds, 5)
	c.deliver(ds[:1], nil)
	require.Zero(t, c.p(mB).Stats().Repair.Count, "no gap, no episode")
	c.now = 10 * time.Millisecond
	t0 := c.now
	c.deliver(ds[2:], nil) // 2 lost: detected now
	var filled time.Duration
	for c.p(mB).Stats().Repair.Count == 0 {
		require.Less(t, c.now, time.Second, "never repaired")
		c.run(c.now+100*time.Microsecond, nil)
		filled = c.now
	}
	c.poll()
	require.Equal(t, span(1, 5), c.rec(mB).seqs(mA))
	r := c.p(mB).Stats().Repair
	cfg := testConfig(mB)
	require.Equal(t, uint64(1), r.Count)
	require.Equal(t, r.Sum, r.Max)
	require.GreaterOrEqual(t, r.Max, cfg.NakDelay, "at least the reorder delay")
	require.LessOrEqual(t, r.Max, filled-t0)
	require.Greater(t, r.Max, filled-t0-100*time.Microsecond, "filled in the last step")
	n := uint64(0)
	for i, k := range r.Buckets {
		n += k
		if k > 0 {
			require.LessOrEqual(t, r.Max, RepairBucketBound(i))
		}
	}
	require.Equal(t, uint64(1), n)
	require.Zero(t, c.p(mA).Stats().Repair.Count, "the sender had no gap")
}

// TestRepairsReceived: RepairsReceived counts the messages a member got
// back from repair datagrams, once each: the originals arriving late are
// duplicates and add nothing, nor does the sender count anything.
func TestRepairsReceived(t *testing.T) {
	c := newCluster(t, nil, mA, mB)
	ds := c.send(mA, true, payloads("a", 1, 6)...)
	require.Len(t, ds, 6)
	c.deliver(ds[:1], nil)
	c.deliver(ds[3:], nil) // 2 and 3 lost
	for c.p(mB).Stats().Repair.Count == 0 {
		require.Less(t, c.now, time.Second, "never repaired")
		c.run(c.now+100*time.Microsecond, nil)
	}
	c.deliver(ds[1:3], nil) // the originals, late
	c.poll()
	require.Equal(t, span(1, 6), c.rec(mB).seqs(mA))
	b := c.p(mB).Stats()
	require.Equal(t, uint64(2), b.RepairsReceived)
	require.Equal(t, uint64(2), c.p(mA).Stats().Retransmitted)
	require.Equal(t, uint64(6), b.Received)
	require.Equal(t, uint64(2), b.Duplicates+b.Old, "the late originals")
	require.Zero(t, c.p(mA).Stats().RepairsReceived)
}

// TestRepairsReceivedFragments: a repaired fragment counts as one message
// got back, like a repaired small message.
func TestRepairsReceivedFragments(t *testing.T) {
	c := newCluster(t, nil, mB, mA)
	ds := sendWithFrag(t, c, 2, 4) // 1, M's two fragments (seqnos 2 and 3), 4
	c.deliverTo(dataOf(t, ds, 1), mA)
	c.deliverTo(dataOf(t, ds, 4), mA) // M lost
	for c.p(mA).Stats().Repair.Count == 0 {
		require.Less(t, c.now, time.Second, "never repaired")
		c.run(c.now+100*time.Microsecond, nil)
	}
	c.poll()
	require.Equal(t, []uint64{1, 2, 4}, c.rec(mA).seqs(mB))
	require.Equal(t, uint64(2), c.p(mA).Stats().RepairsReceived, "M's two fragments")
}

// stableRound has every member send its STABLE, shuttles the STABLEs to
// the coordinator and its STABILITY to everyone, without polling.
func stableRoundNoPoll(c *cluster) {
	for _, m := range c.order {
		c.p(m).sendStable(c.now)
	}
	for range 2 {
		c.deliver(c.take(), nil)
	}
}

// TestPeerLags: the coordinator knows each member's delivered of its own
// messages from that member's STABLE; a member that does not coordinate
// knows only the group's stable point, for every member alike.
func TestPeerLags(t *testing.T) {
	c := newCluster(t, nil, mA, mB, mC)
	require.Equal(t, []PeerLag{{Member: mB}, {Member: mC}}, c.p(mA).AppendPeerLags(nil), "nothing sent")
	c.deliver(c.send(mB, true, payloads("b", 1, 10)...), nil)
	c.p(mC).Poll(c.rec(mC), 3) // C: 3 of B's
	c.deliver(c.send(mA, true, payloads("a", 1, 10)...), nil)
	c.p(mA).Poll(c.rec(mA), 1<<30)
	c.p(mB).Poll(c.rec(mB), 1<<30)
	ca, cb := uint64(len(c.rec(mC).seqs(mA))), uint64(len(c.rec(mC).seqs(mB)))
	require.Equal(t, []uint64{0, 3}, []uint64{ca, cb}, "C's deliveries of A's and B's")
	c.now = 50 * time.Millisecond
	stableRoundNoPoll(c)

	// The coordinator: B delivered all 10 of A's, C ca (their reports).
	require.Equal(t, []PeerLag{
		{Member: mB, Delivered: 10, Lag: 0, At: c.now, Reported: true},
		{Member: mC, Delivered: ca, Lag: 10 - ca, At: c.now, Reported: true},
	}, c.p(mA).AppendPeerLags(nil))
	// B does not coordinate: for A and C alike it knows the stable point
	// of its messages, cb (C's), learnt from the STABILITY.
	require.Equal(t, []PeerLag{
		{Member: mA, Delivered: cb, Lag: 10 - cb, At: c.now},
		{Member: mC, Delivered: cb, Lag: 10 - cb, At: c.now},
	}, c.p(mB).AppendPeerLags(nil))

	// C catches up; the next round moves both.
	c.p(mC).Poll(c.rec(mC), 1<<30)
	c.now = 80 * time.Millisecond
	stableRoundNoPoll(c)
	for _, l := range c.p(mA).AppendPeerLags(nil) {
		require.Equal(t, PeerLag{Member: l.Member, Delivered: 10, At: c.now, Reported: true}, l)
	}
	for _, l := range c.p(mB).AppendPeerLags(nil) {
		require.Equal(t, PeerLag{Member: l.Member, Delivered: 10, At: c.now}, l)
	}
	buf := make([]PeerLag, 0, 4)
	require.Zero(t, testing.AllocsPerRun(100, func() { buf = c.p(mA).AppendPeerLags(buf[:0]) }))
}
