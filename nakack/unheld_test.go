package nakack

import (
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// TestUnheldAfterNotFound: what a member delivered as lost after a
// MSG_NOT_FOUND is what Unheld reports (gms puts it in cut reports: this
// member cannot repair it); what it delivered it holds until purged.
// Unheld allocates nothing when dst has room, and reports nothing of this
// member's own window or of a sender it has no window of.
func TestUnheldAfterNotFound(t *testing.T) {
	c := newCluster(t, nil, mA, mB)
	a, b := c.p(mA), c.p(mB)
	for i, d := range c.send(mB, true, payloads("b", 1, 10)...) {
		if s := i + 1; s <= 2 || s >= 8 {
			c.deliverTo(d, mA)
		}
	}
	b.Poll(c.rec(mB), 100)
	_, err := b.ForcePurge(mB, 7)
	require.NoError(t, err)
	c.run(c.now+time.Second, nil)
	require.Equal(t, []lostEvent{{mB, 3, 7}}, c.rec(mA).lostOf(mB))
	want := []wire.Range{{From: 3, To: 7}}
	require.Equal(t, want, a.Unheld(mB, nil))
	dst := make([]wire.Range, 0, 4)
	require.Zero(t, testing.AllocsPerRun(100, func() { dst = a.Unheld(mB, dst[:0]) }))
	require.Equal(t, want, dst)
	require.Empty(t, b.Unheld(mB, nil), "own window")
	require.Empty(t, a.Unheld(digest.Member{ID: 99, Inc: 1}, nil), "no window")
	_, ok := a.ClosedWindow(mB)
	require.False(t, ok, "a live sender's window is open")
}

// TestClosedWindowAfterCut: once a departed sender's window is closed
// after its cut, ClosedWindow gives the delivered point it closed at (gms
// reports it when asked about that sender again) and Unheld nothing.
func TestClosedWindowAfterCut(t *testing.T) {
	c := newCluster(t, nil, mA, mB, mC)
	c.deliver(c.send(mC, true, payloads("c", 1, 4)...), nil)
	c.run(c.now+100*time.Millisecond, nil)
	delete(c.nodes, mC)
	c.order = []digest.Member{mA, mB}
	v2 := View{ID: digest.ViewID{Coord: mA, Counter: 2}, Members: []digest.Member{mA, mB}}
	for _, m := range c.order {
		c.p(m).InstallView(v2, digest.Digest{}, c.now)
		require.NoError(t, c.p(m).CompleteCut(mC, 4, c.now))
	}
	c.run(c.now+time.Second, nil)
	a := c.p(mA)
	_, ok := a.ClosedWindow(mC)
	require.False(t, ok, "cut under way: the window is open")
	_, err := a.CloseWindow(mC)
	require.NoError(t, err)
	at, ok := a.ClosedWindow(mC)
	require.True(t, ok)
	require.Equal(t, uint64(4), at)
	require.Empty(t, a.Unheld(mC, nil))
}
