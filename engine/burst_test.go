package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestIterationWritesBoundedBatches: an iteration bundles about one write
// batch of datagrams before it writes them, also when the log buffer
// holds far more. The ring is filled while the agent is held off (the
// protocol lock), so without the bound its next iteration would bundle the
// whole ring (over 800 datagrams of 1472 B here) into one write.
func TestIterationWritesBoundedBatches(t *testing.T) {
	for _, th := range []Threading{ThreadingShared, ThreadingDedicated} {
		t.Run(th.String(), func(t *testing.T) { testBoundedBatches(t, th) })
	}
}

func testBoundedBatches(t *testing.T, th Threading) {
	const n = 1 << 15
	rec := newRecorder(2 * n)
	ms := openGroup(t, 2, func(i int, c *Config) {
		c.Tuning.MaxDatagram = 1472
		c.Tuning.RingCapacity = n
		c.Handler = rec
		c.Agent.Threading = th
	})
	s := ms[0]
	payload := make([]byte, 32)
	s.mu.Lock()
	for i := range n {
		payload[0] = byte(i)
		if err := s.TrySend(payload); err != nil {
			s.mu.Unlock()
			t.Fatalf("message %d: %v", i, err)
		}
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case <-rec.cond:
	case <-ctx.Done():
		t.Fatalf("delivered %d of %d", rec.total, 2*n)
	}
	require.NoError(t, s.Close(ctx))
	bs := s.tr.BatchSize()
	// One iteration: the bound's batch, plus the datagram that crossed it
	// and the iteration's control datagrams, at most the write batch's
	// capacity (2*BatchSize).
	require.LessOrEqual(t, max(s.ag.rw.max, s.ag.sw.max), 2*bs, "largest write batch")
	require.Greater(t, max(s.ag.rw.max, s.ag.sw.max), 0)
}
