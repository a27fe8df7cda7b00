package auth

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// accept is what a receiver does: check, then mark what passes.
func accept(w *Window, c uint64) Reason {
	r := w.Check(c)
	if r == OK {
		w.Mark(c)
	}
	return r
}

func TestWindowCases(t *testing.T) {
	const base = 1_700_000_000_000_000_000
	t.Run("in order", func(t *testing.T) {
		var w Window
		for c := uint64(base); c < base+5*WindowSize; c++ {
			require.Equal(t, OK, accept(&w, c))
		}
	})
	t.Run("duplicated", func(t *testing.T) {
		var w Window
		require.Equal(t, OK, accept(&w, base))
		require.Equal(t, Replay, accept(&w, base))
		require.Equal(t, OK, accept(&w, base+1))
		require.Equal(t, Replay, accept(&w, base), "an older duplicate inside the window")
		require.Equal(t, Replay, accept(&w, base+1))
	})
	t.Run("reordered inside the window", func(t *testing.T) {
		var w Window
		require.Equal(t, OK, accept(&w, base+900))
		for c := uint64(base + 899); c > base; c-- {
			require.Equal(t, OK, accept(&w, c), "counter %d", c-base)
		}
		for c := uint64(base + 1); c <= base+900; c++ {
			require.Equal(t, Replay, accept(&w, c))
		}
	})
	t.Run("too old", func(t *testing.T) {
		var w Window
		require.Equal(t, OK, accept(&w, base+10*WindowSize))
		require.Equal(t, TooOld, accept(&w, base))
		require.Equal(t, TooOld, accept(&w, base+9*WindowSize-64))
		require.Equal(t, TooOld, accept(&w, 0), "counter 0 is never sent")
		require.Equal(t, OK, accept(&w, base+10*WindowSize-(WindowSize-64)), "the last full word behind the top is still tracked")
	})
	t.Run("a jump clears the words it passes", func(t *testing.T) {
		var w Window
		require.Equal(t, OK, accept(&w, base))
		require.Equal(t, OK, accept(&w, base+WindowSize))     // base's word slot is reused
		require.Equal(t, OK, accept(&w, base+WindowSize+64))  // and cleared again
		require.Equal(t, OK, accept(&w, base+WindowSize-100)) // inside: not seen
		require.Equal(t, Replay, accept(&w, base+WindowSize-100))
	})
	t.Run("counter 0 first", func(t *testing.T) {
		var w Window
		require.Equal(t, TooOld, w.Check(0))
	})
}

// TestWindowMatchesASet compares the window with an exact set over random
// reorderings within WindowSize-64 of the top.
func TestWindowMatchesASet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var w Window
	seen := map[uint64]bool{}
	top := uint64(1 << 40)
	for range 200000 {
		var c uint64
		if rng.IntN(3) == 0 {
			top += uint64(rng.IntN(100))
			c = top
		} else {
			c = top - uint64(rng.IntN(WindowSize-64))
		}
		want := OK
		if seen[c] {
			want = Replay
		}
		require.Equal(t, want, accept(&w, c), "counter %d top %d", c, top)
		seen[c] = true
		top = max(top, c)
	}
}

func BenchmarkWindow(b *testing.B) {
	var w Window
	c := uint64(1 << 40)
	b.ReportAllocs()
	for b.Loop() {
		c++
		if w.Check(c) == OK {
			w.Mark(c)
		}
	}
}
