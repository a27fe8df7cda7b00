package wire

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDataWriterAdopt: messages written in place after the fixed part and
// adopted give the same datagram as the same messages appended; prefixes
// that do not end at end, a count out of range, messages past the trailer
// room, a ps shorter than count or an adoption after Append are refused and
// change nothing; ps gets the payloads as slices of the buffer, as
// AppendPayloads does after an adoption or appends.
func TestDataWriterAdopt(t *testing.T) {
	msgs := [][]byte{[]byte("one"), {}, make([]byte, 300), []byte("four")}
	var want DataWriter
	wbuf := make([]byte, 1500)
	require.NoError(t, want.Reset(wbuf, authHdr(mA, 3), mB, 40))
	for _, m := range msgs {
		require.True(t, want.Append(m))
	}
	buf := make([]byte, 1500)
	end := DataOverhead
	for _, m := range msgs {
		binary.LittleEndian.PutUint16(buf[end:], uint16(len(m)))
		end += MsgOverhead + copy(buf[end+MsgOverhead:], m)
	}
	var w DataWriter
	require.ErrorIs(t, w.Adopt(len(msgs), end, nil), ErrMalformed, "before Reset")
	require.NoError(t, w.Reset(buf, authHdr(mA, 3), mB, 40))
	for _, bad := range []struct{ count, end int }{
		{len(msgs), end - 1}, {len(msgs), end + 1}, {len(msgs) + 1, end}, {len(msgs) - 1, end}, {0, DataOverhead},
	} {
		require.ErrorIs(t, w.Adopt(bad.count, bad.end, nil), ErrMalformed, "%+v", bad)
		require.Zero(t, w.Count())
	}
	require.ErrorIs(t, w.Adopt(len(msgs), end, make([][]byte, len(msgs)-1)), ErrMalformed, "short ps")
	require.Zero(t, w.Count())
	ps := make([][]byte, len(msgs))
	require.NoError(t, w.Adopt(len(msgs), end, ps))
	require.Equal(t, msgs, ps)
	require.Equal(t, &buf[DataOverhead+MsgOverhead], &ps[0][0], "in place")
	require.Equal(t, len(msgs), w.Count())
	require.Equal(t, uint64(44), w.Next())
	// AppendPayloads gives the adopted (or appended) payloads in place.
	require.Equal(t, msgs, w.AppendPayloads(nil))
	require.Equal(t, &buf[DataOverhead+MsgOverhead], &w.AppendPayloads(nil)[0][0], "in place")
	require.Equal(t, msgs, want.AppendPayloads(nil))
	require.Empty(t, (&DataWriter{}).AppendPayloads(nil), "before Reset")
	require.Equal(t, want.Finish(), w.Finish())
	require.ErrorIs(t, w.Adopt(1, end, nil), ErrMalformed, "messages added already")

	// Past the trailer room: the limit is the buffer less the trailer.
	small := make([]byte, DataOverhead+MsgOverhead+4+TrailerLen)
	binary.LittleEndian.PutUint16(small[DataOverhead:], 5)
	require.NoError(t, w.Reset(small, authHdr(mA, 3), mB, 1))
	require.ErrorIs(t, w.Adopt(1, DataOverhead+MsgOverhead+5, nil), ErrMalformed)
}
