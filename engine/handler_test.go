package engine

import (
	"context"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine/transport/memtransport"
	"github.com/stretchr/testify/require"
)

// batchRecorder is a recorder that is also a BatchHandler: a batch counts
// as its messages delivered one by one, so the recorder's order and hash
// checks cover both paths.
type batchRecorder struct {
	*recorder
	batches, batched int // under recorder.mu
}

func (b *batchRecorder) DeliverBatch(s digest.Member, first uint64, ps [][]byte) {
	b.mu.Lock()
	b.batches++
	b.batched += len(ps)
	b.mu.Unlock()
	for i, p := range ps {
		b.Deliver(s, first+uint64(i), p)
	}
}

// TestBatchHandler: a Handler with DeliverBatch gets the runs of whole
// messages in batches and fragmented ones through Deliver, every message
// once and in order (the recorder's checks and hash), under loss.
func TestBatchHandler(t *testing.T) {
	const n = 3000
	size := func(i int) int { return sizeFor(i, true) } // some fragmented
	recs := []*batchRecorder{{recorder: newRecorder(n)}, {recorder: newRecorder(n)}}
	ms := openGroup(t, 2, func(i int, c *Config) {
		c.Handler = recs[i]
		overMem(c, memtransport.Faults{Loss: 0.05, Seed: uint64(i + 7)})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	frags := 0
	for i := range n {
		if size(i) > 64<<10 {
			frags++
		}
		require.NoError(t, ms[0].Send(ctx, payloadOf(0, i, size(i))))
	}
	require.Positive(t, frags)
	want := expectedHash(n, func(i int) []byte { return payloadOf(0, i, size(i)) })
	requireHash(ctx, t, []*recorder{recs[0].recorder, recs[1].recorder}, ms[0].Self(), want)
	for i, r := range recs {
		r.mu.Lock()
		require.Positive(t, r.batches, "member %d", i)
		require.Less(t, r.batches, r.batched, "member %d: some batch held more than one message", i)
		require.LessOrEqual(t, r.batched, n-frags, "member %d: fragmented messages are not batched", i)
		r.mu.Unlock()
	}
}
