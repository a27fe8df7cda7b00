package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTwoMembersPush(t *testing.T) {
	const n = 1000
	recs := []*recorder{newRecorder(2 * n), newRecorder(2 * n)}
	ms := openGroup(t, 2, func(i int, c *Config) { c.Handler = recs[i] })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for k, m := range ms {
		go func() {
			buf := make([]byte, 64)
			for i := range n {
				fillPayload(buf, k, i)
				if err := m.Send(ctx, buf); err != nil {
					t.Errorf("send: %v", err)
					return
				}
			}
		}()
	}
	for _, r := range recs {
		select {
		case <-r.cond:
		case <-ctx.Done():
			t.Fatalf("timeout: delivered %d", r.total)
		}
	}
	for _, r := range recs {
		require.Empty(t, r.errs)
	}
	t.Logf("%+v", ms[0].Stats())
}
