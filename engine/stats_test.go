package engine

import (
	"context"
	"testing"
	"time"

	"github.com/nakcast/nakcast/engine/transport/memtransport"
	"github.com/stretchr/testify/require"
)

// TestStatsRepairAndPeerLag: with loss at the receiver, its Stats show
// repair episodes (count, sum, max, histogram agreeing); the sender, which
// coordinates the static view, shows the receiver's lag from the
// receiver's own reports, back to 0 once it delivered everything; the
// receiver shows the sender's lag behind its (unsent) messages as 0.
func TestStatsRepairAndPeerLag(t *testing.T) {
	const n = 3000
	rec := newRecorder(n)
	faults := make([]*faultCounter, 2)
	ms := openGroup(t, 2, func(i int, c *Config) {
		// Small bundles: about 200 data datagrams, so 5% loss drops some
		// (about 10) in every run.
		c.Tuning.BundleBytes = 8 << 10
		faults[i] = overMem(c, none)
		if i == 1 {
			c.Handler = rec
			faults[i] = overMem(c, memtransport.Faults{Loss: 0.05, Seed: 3})
		}
	})
	sendAndWait(t, ms[0], rec, n)

	r := ms[1].Stats()
	require.Positive(t, faults[1].counts().Dropped)
	rs := r.Repair
	require.Equal(t, r.Protocol.Repair, rs)
	require.Positive(t, rs.Count, "lost datagrams were repaired")
	require.Positive(t, rs.Max)
	require.GreaterOrEqual(t, rs.Sum, rs.Max)
	require.LessOrEqual(t, rs.Mean(), rs.Max)
	var inBuckets uint64
	for _, k := range rs.Buckets {
		inBuckets += k
	}
	require.Equal(t, rs.Count, inBuckets)
	require.Zero(t, ms[0].Stats().Repair.Count, "the sender had nothing to repair")
	t.Logf("receiver: %d datagrams dropped, %d repair episodes, mean %v, max %v, buckets %v",
		faults[1].counts().Dropped, rs.Count, rs.Mean(), rs.Max, rs.Buckets)

	// The coordinator (member 0) has member 1's own report; it reaches 0
	// lag once member 1's STABLE after its last delivery arrived.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var s Stats
	require.NoError(t, pollUntil(ctx, func() bool {
		s = ms[0].Stats()
		return len(s.Peers) == 1 && s.Peers[0].Lag == 0
	}), "peers %+v", s.Peers)
	p := s.Peers[0]
	require.Equal(t, ms[1].Self(), p.Member)
	require.True(t, p.Reported)
	require.Equal(t, uint64(n), p.Delivered)
	require.Equal(t, uint64(n), s.Sent)
	require.GreaterOrEqual(t, p.Age, time.Duration(0))
	require.Less(t, p.Age, 10*time.Second)

	// Member 1 does not coordinate and sent nothing: lag 0, nothing learnt.
	r = ms[1].Stats()
	require.Len(t, r.Peers, 1)
	require.Equal(t, PeerLag{Member: ms[0].Self(), Age: -1}, r.Peers[0])
}

// TestSocketStatsShowGSO: Stats.Socket reports the transport's counters;
// with small datagrams on loopback a sender's full bundles go out
// segmented (GSO) and the receiver reads them in runs (GRO) unless
// Config.Transport.NoGSO, and are delivered all the same.
func TestSocketStatsShowGSO(t *testing.T) {
	const n = 5000
	for _, noGSO := range []bool{false, true} {
		rec := newRecorder(n)
		ms := openGroup(t, 2, func(i int, c *Config) {
			c.Tuning.MaxDatagram = 1472
			c.Transport.NoGSO = noGSO
			if i == 1 {
				c.Handler = rec
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		for i := range n {
			require.NoError(t, ms[0].Send(ctx, payloadOf(0, i, 64)))
		}
		select {
		case <-rec.cond:
		case <-ctx.Done():
			t.Fatalf("NoGSO %v: receiver got %d of %d", noGSO, rec.total, n)
		}
		cancel()
		require.Empty(t, rec.errs)
		st := ms[0].Stats().Socket
		require.Zero(t, st.GSORefused)
		if noGSO {
			require.False(t, st.GSO)
			require.Zero(t, st.GSOSends)
		} else {
			require.True(t, st.GSO)
			require.Positive(t, st.GSOSends, "%d messages of 64 B in 1472 B datagrams, no segmented send", n)
			// The receiver reads those runs at once (UDP_GRO, MaxDatagram
			// below 16 KB).
			rs := ms[1].Stats().Socket
			require.True(t, rs.GRO)
			require.Positive(t, rs.GRORuns)
		}
	}
}
