package nakack

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCutBeyondFullDepartedWindow: windows of 8. A and B deliver C's 1..8,
// which fill their windows (no STABILITY purges them); C, its own window
// force-purged, sends 9..20, none of which arrives, and crashes. Its cut
// is 20 with 9..20 declared lost and stable point 8 (both survivors
// delivered 8). A departed window gets no STABILITY: PurgeCut makes room
// up to the stable point, the lost run that reaches the window's capacity
// is reported through the declared range beyond it, once, as 9..20, and
// the window moves on to the cut, so each survivor completes it (delivered
// and received 20, nothing pending) as a member with a larger window would.
// Before, the marks stopped at the window's capacity and the window stayed
// short of the cut: the cut never completed.
func TestCutBeyondFullDepartedWindow(t *testing.T) {
	c := fullWindowsThenCrash(t)
	for _, m := range c.order {
		require.Equal(t, report{delivered: 8, received: 8}, c.report(m, mC))
		c.applyCut(m, mC, 20, rangeU{9, 20})
		_, err := c.p(m).PurgeCut(mC, 8, c.now)
		require.NoError(t, err)
	}
	c.run(c.now+time.Second, nil)
	for _, m := range c.order {
		require.Equal(t, span(1, 8), c.rec(m).seqs(mC), "%v", m)
		require.Equal(t, []lostEvent{{mC, 9, 20}}, c.rec(m).lostOf(mC), "%v", m)
		require.Equal(t, report{delivered: 20, received: 20}, c.report(m, mC), "%v", m)
		require.False(t, c.p(m).CutPending(mC), "%v", m)
	}
}

// TestCutBeyondFullWindowBelowStable: as TestCutBeyondFullDepartedWindow,
// but the cut's stable point is 0 (a survivor was behind when the cut was
// fixed), so PurgeCut makes no room: A and B's windows stay full of C's
// delivered 1..8 and cannot take the declared run 9..20 beyond them. Poll
// reports it all the same, once, as 9..20, and Consumed says 20: the cut is
// complete here (gms acknowledges on it), and a window closed now is
// remembered at 20 (the case of whole-group heavy seed 8023).
func TestCutBeyondFullWindowBelowStable(t *testing.T) {
	c := fullWindowsThenCrash(t)
	for _, m := range c.order {
		c.applyCut(m, mC, 20, rangeU{9, 20})
	}
	c.run(c.now+time.Second, nil)
	for _, m := range c.order {
		require.Equal(t, span(1, 8), c.rec(m).seqs(mC), "%v", m)
		require.Equal(t, []lostEvent{{mC, 9, 20}}, c.rec(m).lostOf(mC), "%v", m)
		require.Equal(t, report{delivered: 8, received: 8}, c.report(m, mC), "%v: the window itself stays full", m)
		consumed, ok := c.p(m).Consumed(mC)
		require.True(t, ok)
		require.Equal(t, uint64(20), consumed, "%v", m)
		require.False(t, c.p(m).CutPending(mC), "%v", m)
		_, err := c.p(m).CloseWindow(mC)
		require.NoError(t, err)
		at, closed := c.p(m).ClosedWindow(mC)
		require.True(t, closed)
		require.Equal(t, uint64(20), at, "%v", m)
	}
}

// fullWindowsThenCrash: windows of 8; A and B deliver C's 1..8, which
// fill their windows (no STABILITY purges them); C, its own window
// force-purged, sends 9..20, none of which arrives, and crashes.
func fullWindowsThenCrash(t *testing.T) *cluster {
	c := newCluster(t, func(cfg *Config) { cfg.SendWindow, cfg.RecvWindow = 8, 8 }, mA, mB, mC)
	c.deliver(c.send(mC, true, payloads("c", 1, 8)...), nil)
	c.poll()
	for _, upto := range []int{8, 16} { // C's own window and send limit allow 8 at a time
		_, err := c.p(mC).ForcePurge(mC, uint64(upto))
		require.NoError(t, err)
		c.send(mC, true, payloads("c", upto+1, min(upto+8, 20))...) // lost
		c.poll()
	}
	c.crash(mC)
	return c
}
