package gms

import (
	"testing"
	"time"

	"github.com/nakcast/nakcast/sim"
	"github.com/stretchr/testify/require"
)

func TestJoinFormsOneView(t *testing.T) {
	h := newHarness(t, 1, sim.NetConfig{})
	a, b, c := h.add(1), h.add(2), h.add(3)
	h.join(0, a)
	h.join(100*time.Millisecond, b, c)
	h.runUntil(func() bool { return converged(a, b, c) && quiet(a, b, c) }, 5*time.Second, "one view")
	require.Equal(t, a.self(), a.g.View().Coord().Member)
	h.noErrors()
}
