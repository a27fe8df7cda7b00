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

// TestSendBatchSizesSmallBundles: SendBatch opens the bundle of a short run
// (at most MaxDatagram/8 bytes) in a buffer of its size class, with no
// MaxDatagram buffer and no compaction copy; a later run that does not fit
// moves the bundle into a MaxDatagram buffer and continues it, keeping the
// messages already stored from it readable (self-delivery and repair).
func TestSendBatchSizesSmallBundles(t *testing.T) {
	c := newCluster(t, nil, mA, mB)
	a := c.p(mA)
	gets := c.pool.Stats().Gets
	_, n, err := a.SendBatch([][]byte{[]byte("one"), []byte("two")}, c.now)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	a.Flush(c.now)
	out := a.Outbox()
	require.Len(t, out, 1)
	require.Len(t, out[0].Buf.B, wire.MinBufferSize)
	require.Equal(t, gets+1, c.pool.Stats().Gets, "one small buffer, no MaxDatagram one")
	c.take()

	// A run in a small bundle, delivered to self (stored in the window from
	// the small buffer), then a run that needs the bundle to grow.
	_, _, err = a.SendBatch([][]byte{[]byte("three")}, c.now)
	require.NoError(t, err)
	var r recorder
	require.Equal(t, 3, a.Poll(&r, 10))
	big := make([][]byte, 3)
	for i := range big {
		big[i] = make([]byte, 300)
		big[i][0] = byte(i)
	}
	_, n, err = a.SendBatch(big, c.now)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	a.Flush(c.now)
	out = a.Outbox()
	require.Len(t, out, 1, "one datagram: the bundle grew")
	require.Len(t, out[0].Buf.B, 1400)
	ds := c.take()

	// B misses it; the repair comes from the grown buffer.
	c.deliver(ds, func(d dgram, to digest.Member) bool { return to == mB })
	c.run(time.Second, nil)
	dels := c.rec(mB).dels
	require.Len(t, dels, 6)
	require.Equal(t, delivery{mA, 3, "three"}, dels[2])
	require.Equal(t, string(big[2]), dels[5].payload)
	require.Equal(t, []delivery{{mA, 1, "one"}, {mA, 2, "two"}, {mA, 3, "three"}}, r.dels)
}
