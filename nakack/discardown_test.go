package nakack

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDiscardOwn: a member with DiscardOwn delivers none of its own
// messages (whole or fragmented) and counts them in OwnDiscarded; the
// others deliver them all; stability still advances past them (the sender
// sends three windows' worth, which needs purges), and the member delivers
// the others' messages as usual.
func TestDiscardOwn(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.DiscardOwn = cfg.Self == mA }, mA, mB)
	const rounds, per = 6, 256 // 1536 messages through a window of 512
	sent := 0
	for r := range rounds {
		ps := payloads("a", r*per, (r+1)*per-1)
		if r == 2 {
			ps = append(ps, strings.Repeat("F", 4000)) // 3-4 fragments
		}
		c.deliver(c.send(mA, false, ps...), nil)
		sent += len(ps)
		c.run(c.now, nil)
		c.stableRound()
	}
	c.deliver(c.send(mB, false, payloads("b", 0, 9)...), nil)
	c.run(c.now, nil)
	c.stableRound()

	a, b := c.p(mA), c.p(mB)
	require.Empty(t, c.rec(mA).seqs(mA), "own messages delivered")
	require.Len(t, c.rec(mA).seqs(mB), 10)
	require.Equal(t, a.NextSeq()-1, a.Stats().OwnDiscarded)
	require.Equal(t, uint64(10), a.Stats().Delivered)
	require.Len(t, c.rec(mB).seqs(mA), sent)
	require.Zero(t, b.Stats().OwnDiscarded)
	own, ok := a.WindowState(mA)
	require.True(t, ok)
	require.Equal(t, a.NextSeq()-1, own.Low, "own window purged to the last message")
	require.Equal(t, a.NextSeq()-1, own.Delivered)
}
