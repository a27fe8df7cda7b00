package nakack

import (
	"encoding/binary"
	"testing"

	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// TestMalformedFreshRunChangesNothing: a datagram whose run is new to the
// receiver's window goes through insertFresh, which stores its messages
// while it checks their lengths. A message length that runs past the body,
// or one that ends the messages before it, must leave the window as it was:
// the datagram is counted malformed, its error returned, nothing is
// delivered, and the intact datagram is then delivered whole.
func TestMalformedFreshRunChangesNothing(t *testing.T) {
	c := newCluster(t, nil, mA, mB)
	ds := c.send(mA, false, "m1", "m2", "m3")
	require.Len(t, ds, 1)
	good := ds[0]
	h, body, err := wire.DecodeHeader(good.data, testGroup)
	require.NoError(t, err)
	require.False(t, h.Auth())
	_, offs, err := wire.DecodeDataOffsets(h, body, nil)
	require.NoError(t, err)
	start := len(good.data) - len(body)
	corrupt := func(msg int, length uint16) dgram {
		d := good
		d.data = append([]byte(nil), good.data...)
		binary.LittleEndian.PutUint16(d.data[start+int(offs[msg]):], length)
		return d
	}
	b := c.p(mB)
	for i, tc := range []struct {
		d    dgram
		want error
	}{
		{corrupt(1, 200), wire.ErrTruncated}, // runs past the body
		{corrupt(2, 1), wire.ErrMalformed},   // a byte left over
		{corrupt(0, 0), wire.ErrTruncated},   // the next length read inside a payload
	} {
		buf := wire.NewBuffer(tc.d.data)
		require.ErrorIs(t, b.Receive(buf, c.now), tc.want, "case %d", i)
		buf.Release()
		require.Equal(t, uint64(i+1), b.Stats().Drops.Malformed, "case %d", i)
	}
	require.Zero(t, b.Stats().Received)
	c.poll()
	require.Empty(t, c.rec(mB).dels)

	c.deliver([]dgram{good}, nil)
	c.poll()
	require.Equal(t, []delivery{{mA, 1, "m1"}, {mA, 2, "m2"}, {mA, 3, "m3"}}, c.rec(mB).dels)
	require.Equal(t, uint64(3), b.Stats().Received)
}
