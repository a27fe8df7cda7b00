package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDiscardOwn: a member with DiscardOwn is not handed its own messages;
// the other member delivers them all, stability keeps up (four windows'
// worth go through), and the member delivers the other's messages.
func TestDiscardOwn(t *testing.T) {
	const n, window = 1024, 256
	r0, r1 := newRecorder(10), newRecorder(n+10)
	ms := openGroup(t, 2, func(i int, c *Config) {
		c.Tuning.Window = window
		c.DiscardOwn = i == 0
		c.Handler = []*recorder{r0, r1}[i]
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		require.NoError(t, ms[0].Send(ctx, payloadOf(0, i, 64)))
	}
	for i := range 10 {
		require.NoError(t, ms[1].Send(ctx, payloadOf(1, i, 64)))
	}
	for _, r := range []*recorder{r0, r1} {
		select {
		case <-r.cond:
		case <-ctx.Done():
			t.Fatalf("delivered %d of %d", r.total, r.want)
		}
	}
	r0.mu.Lock()
	require.Zero(t, r0.count[ms[0].Self()], "own messages delivered")
	require.Equal(t, 10, r0.count[ms[1].Self()])
	require.Empty(t, r0.errs)
	r0.mu.Unlock()
	r1.mu.Lock()
	require.Equal(t, n, r1.count[ms[0].Self()])
	require.Empty(t, r1.errs)
	r1.mu.Unlock()
	st := ms[0].Stats()
	require.Equal(t, uint64(n), st.Protocol.OwnDiscarded)
	require.Equal(t, uint64(10), st.Delivered)
}
