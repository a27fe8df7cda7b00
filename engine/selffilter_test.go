package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSenderDoesNotReadOwnData checks the group socket's kernel filter: a
// sender's own data datagrams never reach its agent (the protocol would
// count them as Drops.Self), while the other member gets every message.
func TestSenderDoesNotReadOwnData(t *testing.T) {
	const n = 2000
	rec := newRecorder(n)
	ms := openGroup(t, 2, func(i int, c *Config) {
		if i == 1 {
			c.Handler = rec
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		require.NoError(t, ms[0].Send(ctx, payloadOf(0, i, 100+i%900)))
	}
	select {
	case <-rec.cond:
	case <-ctx.Done():
		t.Fatalf("receiver got %d of %d", rec.total, n)
	}
	s := ms[0].Stats()
	require.Positive(t, s.Bundles)
	require.Zero(t, s.Drops.Self, "the sender read its own data datagrams")
}
