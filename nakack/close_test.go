package nakack

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCloseReleasesEverything: Close returns to the pool every buffer a
// protocol holds (own window with an open bundle and fragments, received
// windows with delivered and undelivered messages, datagrams pending a
// window, the outbox), keeps its counters and window numbers, and can be
// called again.
func TestCloseReleasesEverything(t *testing.T) {
	c := newCluster(t, nil, mA, mB)
	a, b := c.p(mA), c.p(mB)
	// toB hands datagrams to B in pool buffers, as the engine does.
	toB := func(ds []dgram) {
		for _, d := range ds {
			if d.from == mB || (!d.to.IsZero() && d.to != mB) {
				continue
			}
			buf := c.pool.Get(len(d.data))
			require.NotNil(t, buf)
			buf.N = copy(buf.B, d.data)
			_ = b.Receive(buf, c.now)
			buf.Release()
		}
	}
	big := string(make([]byte, 3000)) // fragmented
	toB(c.send(mA, true, append(payloads("a", 1, 10), big)...))
	b.Poll(c.rec(mB), 5) // some delivered, some not
	// A gap: B holds the last two without the first (undelivered,
	// unstable).
	ds := c.send(mA, true, "a11", "a12", "a13")
	toB(ds[1:])
	// A datagram from a sender B has no window for: pending.
	d := newCluster(t, nil, mD, mB)
	toB(d.send(mD, false, "d1"))
	// A's open bundle (not flushed) and B's outbox (not taken).
	_, err := a.Send([]byte("open"), c.now)
	require.NoError(t, err)
	_, err = b.Send([]byte("b1"), c.now)
	require.NoError(t, err)
	b.Flush(c.now)
	require.NotEmpty(t, b.Outbox())
	require.Positive(t, b.Stats().Pending)
	require.Positive(t, c.pool.Stats().OutstandingBuffers)

	before := b.Stats()
	da, db := a.Digest(), b.Digest()
	a.Close()
	b.Close()
	st := c.pool.Stats()
	require.Zero(t, st.OutstandingBuffers, "every buffer back in the pool")
	require.Zero(t, st.Outstanding)
	require.Equal(t, before, b.Stats(), "counters kept")
	require.Equal(t, da, a.Digest(), "window numbers kept")
	require.Equal(t, db, b.Digest())
	require.Empty(t, b.Outbox())
	e, ok := b.WindowState(mA)
	require.True(t, ok)
	require.Equal(t, a.NextSeq()-2, e.Received, "the gap's datagrams (the open bundle's message not sent)")
	require.Greater(t, e.Received, e.Delivered)
	a.Close()
	b.Close()
	require.Zero(t, c.pool.Stats().OutstandingBuffers, "idempotent")
	require.Zero(t, testing.AllocsPerRun(10, b.Close))
}
