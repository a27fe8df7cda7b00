package wire

import (
	"encoding/binary"
	"math/rand/v2"
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

// TestDataWriterAppendRun: AppendRun takes what Append, called in a loop
// until it refuses or a payload is longer than maxLen, would take, up to
// maxCount and len(offs), and writes the same datagram; offs tell where
// each payload begins in the buffer, as Claim's slices do. Random runs
// of sizes around the buffer's room, with an open bundle already holding
// messages, checked against that model.
func TestDataWriterAppendRun(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 2000 {
		size := DataOverhead + TrailerLen + MsgOverhead + rng.IntN(600)
		maxLen := rng.IntN(200)
		maxCount := rng.IntN(12)
		pls := make([][]byte, rng.IntN(12))
		for i := range pls {
			pls[i] = make([]byte, rng.IntN(220))
			for j := range pls[i] {
				pls[i][j] = byte(rng.Uint32())
			}
		}
		before := rng.IntN(3)
		var want, got DataWriter
		wbuf, gbuf := make([]byte, size), make([]byte, size)
		require.NoError(t, want.Reset(wbuf, authHdr(mA, 3), mB, 40))
		require.NoError(t, got.Reset(gbuf, authHdr(mA, 3), mB, 40))
		for range before {
			require.Equal(t, want.Append([]byte("x")), got.Append([]byte("x")))
		}
		count0 := want.Count()
		var wantOffs []uint32
		for _, pl := range pls {
			if len(wantOffs) == maxCount || len(pl) > maxLen {
				break
			}
			start := want.off + MsgOverhead
			dst := want.Claim(len(pl))
			if dst == nil {
				break
			}
			copy(dst, pl)
			if len(dst) > 0 {
				require.Same(t, &wbuf[start], &dst[0])
			}
			wantOffs = append(wantOffs, uint32(start))
		}
		offs := make([]uint32, 16)
		n := got.AppendRun(pls, maxCount, maxLen, offs)
		require.Equal(t, len(wantOffs), n, "round %d", round)
		require.Equal(t, count0+n, got.Count(), "round %d", round)
		if n > 0 {
			require.Equal(t, wantOffs, offs[:n], "round %d", round)
		}
		require.Equal(t, want.Finish(), got.Finish(), "round %d", round)
	}
	var w DataWriter
	require.Zero(t, w.AppendRun([][]byte{[]byte("a")}, 1, 10, make([]uint32, 1)), "before Reset")
	require.NoError(t, w.Reset(make([]byte, 200), authHdr(mA, 3), mB, 1))
	require.Equal(t, 1, w.AppendRun([][]byte{[]byte("a"), []byte("b")}, 5, 10, make([]uint32, 1)), "at most len(offs)")
}
