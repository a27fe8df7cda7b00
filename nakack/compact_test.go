package nakack

import (
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// TestSmallBundleCompacted: a bundle of at most MaxDatagram/8 bytes leaves
// its MaxDatagram buffer for one of its size class before it is sent, so
// the own window retains the datagram's bytes rather than a whole buffer;
// the sender still delivers it to itself and repairs it from the copy.
func TestSmallBundleCompacted(t *testing.T) {
	c := newCluster(t, nil, mA, mB)
	a := c.p(mA)
	_, err := a.Send([]byte("lone"), c.now)
	require.NoError(t, err)
	a.Flush(c.now)
	out := a.Outbox()
	require.Len(t, out, 1)
	require.Len(t, out[0].Buf.B, wire.MinBufferSize, "the bundle moved to its size class")
	ds := c.take()
	require.Equal(t, int64(wire.MinBufferSize), c.pool.Stats().Outstanding, "the own window holds the small copy only")

	// B misses the datagram; A's HIGHEST tells it, it asks, A repairs from
	// the copy.
	c.deliver(ds, func(d dgram, to digest.Member) bool { return to == mB })
	all := c.run(time.Second, nil)
	require.NotEmpty(t, ofType(all, wire.TypeXmitReq))
	require.Equal(t, []delivery{{mA, 1, "lone"}}, c.rec(mB).dels)
	require.Equal(t, []delivery{{mA, 1, "lone"}}, c.rec(mA).dels)

	// A full-size bundle is sent from its own buffer.
	big := make([]byte, 1000)
	_, err = a.Send(big, c.now)
	require.NoError(t, err)
	a.Flush(c.now)
	out = a.Outbox()
	require.Len(t, out, 1)
	require.Len(t, out[0].Buf.B, 1400)
	c.take()
}
