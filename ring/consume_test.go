package ring

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConsumeMatchesRemoveBatch: Consume moves delivered exactly as
// RemoveBatch does (stopping at a gap, a lost seqno, max and the window's
// capacity), on random windows, without touching the values.
func TestConsumeMatchesRemoveBatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 500 {
		const capacity = 256
		a, err := NewWindow[int](capacity, 0)
		require.NoError(t, err)
		b, err := NewWindow[int](capacity, 0)
		require.NoError(t, err)
		for seq := uint64(1); seq <= capacity; seq++ {
			switch r := rng.IntN(20); {
			case r == 0: // gap
			case r == 1:
				a.MarkLost(seq, seq)
				b.MarkLost(seq, seq)
			default:
				a.Add(seq, int(seq))
				b.Add(seq, int(seq))
			}
		}
		dst := make([]int, capacity)
		for step := 0; step < 50; step++ {
			max := rng.IntN(80)
			f1, n1 := a.Consume(max)
			f2, n2 := b.RemoveBatch(dst[:max])
			require.Equal(t, f2, f1, "round %d step %d", round, step)
			require.Equal(t, n2, n1, "round %d step %d", round, step)
			require.Equal(t, b.Delivered(), a.Delivered())
			if n1 == 0 && rng.IntN(2) == 0 {
				// Past a lost seqno the way a consumer would.
				_, ok1 := a.SkipLost()
				_, ok2 := b.SkipLost()
				require.Equal(t, ok2, ok1)
			}
		}
		v, ok := a.Get(a.Delivered())
		if a.Delivered() > 0 && ok {
			require.Equal(t, int(a.Delivered()), v, "values stay retained")
		}
	}
	w, err := NewWindow[int](64, 0)
	require.NoError(t, err)
	first, n := w.Consume(10)
	require.Equal(t, uint64(1), first)
	require.Zero(t, n)
	first, n = w.Consume(-1)
	require.Equal(t, uint64(1), first)
	require.Zero(t, n)
}
