package wire

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nakcast/nakcast/digest"
	"github.com/stretchr/testify/require"
)

func TestRoundTripSamples(t *testing.T) {
	for _, s := range samples() {
		t.Run(s.name, func(t *testing.T) {
			b, err := encode(make([]byte, MaxUDPPayload), s.m)
			require.NoError(t, err)
			got, err := decode(b)
			require.NoError(t, err)
			require.Equal(t, s.m, got)

			h, body, err := DecodeHeader(b, testGroup)
			require.NoError(t, err)
			require.Equal(t, VersionMinor, h.Minor)
			require.Equal(t, HeaderLen+int(fixedLen[h.Type]), h.Len)
			require.Equal(t, len(b)-HeaderLen-trailerLen(h), len(body))
			if h.Auth() {
				signed, nonce, tag, ok := Trailer(b)
				require.True(t, ok)
				require.Len(t, signed, len(b)-TrailerLen)
				require.Len(t, nonce, NonceLen)
				require.Len(t, tag, TagLen)
				require.Equal(t, make([]byte, TrailerLen), b[len(b)-TrailerLen:], "trailer left zeroed")
			} else {
				_, _, _, ok := Trailer(b)
				require.False(t, ok)
			}

			// Exact-size buffer works, one byte less does not.
			b2, err := encode(make([]byte, len(b)), s.m)
			require.NoError(t, err)
			require.Equal(t, b, b2)
			_, err = encode(make([]byte, len(b)-1), s.m)
			require.ErrorIs(t, err, ErrShortBuffer)
		})
	}
}

// TestRoundTripProperty: decode(encode(x)) == x for random valid x of every
// type, and the encoding is canonical: re-encoding gives the same bytes.
func TestRoundTripProperty(t *testing.T) {
	n := roundTrips
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, MaxUDPPayload)
	buf2 := make([]byte, MaxUDPPayload)
	for _, typ := range allTypes {
		t.Run(typ.String(), func(t *testing.T) {
			for range n {
				m := randMsg(r, typ)
				b, err := encode(buf, m)
				require.NoError(t, err)
				got, err := decode(b)
				require.NoError(t, err)
				require.Equal(t, m, got)
				b2, err := encode(buf2, got)
				require.NoError(t, err)
				require.Equal(t, b, b2)
			}
		})
	}
}

// TestNewerMinor: the compatibility rule. Extra fixed-part bytes of a newer
// minor are skipped; the content decodes the same.
func TestNewerMinor(t *testing.T) {
	for _, s := range samples() {
		t.Run(s.name, func(t *testing.T) {
			b, err := encode(make([]byte, MaxUDPPayload), s.m)
			require.NoError(t, err)
			for _, extra := range []int{1, 8, 100} {
				x := extend(b, 3, extra)
				h, _, err := DecodeHeader(x, testGroup)
				require.NoError(t, err)
				require.Equal(t, uint8(3), h.Minor)
				require.Equal(t, canonicalLen(h.Type)+extra, h.Len)
				got, err := decode(x)
				require.NoError(t, err)
				require.Equal(t, s.m, got)
			}
		})
	}
}

func TestUnknownFlagsIgnored(t *testing.T) {
	m := samples()[0].m
	m.H.Flags |= 0x80 | 0x04
	b, err := encode(make([]byte, MaxUDPPayload), m)
	require.NoError(t, err)
	got, err := decode(b)
	require.NoError(t, err)
	require.Equal(t, m, got)
}

// TestTruncatedEveryLength: every proper prefix of every sample fails with
// ErrTruncated (a cut datagram never decodes, even with a trailer).
func TestTruncatedEveryLength(t *testing.T) {
	for _, s := range samples() {
		t.Run(s.name, func(t *testing.T) {
			b, err := encode(make([]byte, MaxUDPPayload), s.m)
			require.NoError(t, err)
			for n := range len(b) {
				_, err := decode(b[:n])
				require.ErrorIs(t, err, ErrTruncated, "prefix %d of %d", n, len(b))
			}
		})
	}
}

// mutate returns a copy of the encoding of m changed by f.
func mutate(t *testing.T, m msg, f func(b []byte) []byte) []byte {
	b, err := encode(make([]byte, MaxUDPPayload), m)
	require.NoError(t, err)
	return f(bytes.Clone(b))
}

func put16(off int, v uint16) func([]byte) []byte {
	return func(b []byte) []byte { binary.LittleEndian.PutUint16(b[off:], v); return b }
}
func put32(off int, v uint32) func([]byte) []byte {
	return func(b []byte) []byte { binary.LittleEndian.PutUint32(b[off:], v); return b }
}
func put64(off int, v uint64) func([]byte) []byte {
	return func(b []byte) []byte { binary.LittleEndian.PutUint64(b[off:], v); return b }
}
func add32(off int, d int32) func([]byte) []byte {
	return func(b []byte) []byte {
		binary.LittleEndian.PutUint32(b[off:], uint32(int32(binary.LittleEndian.Uint32(b[off:]))+d))
		return b
	}
}
func setByte(off int, v byte) func([]byte) []byte {
	return func(b []byte) []byte { b[off] = v; return b }
}
func appendBytes(p ...byte) func([]byte) []byte {
	return func(b []byte) []byte { return append(b, p...) }
}

// TestMalformed: every malformed case, by decoder, with its error.
func TestMalformed(t *testing.T) {
	ss := samples()
	get := func(name string) msg {
		for _, s := range ss {
			if s.name == name {
				return s.m
			}
		}
		t.Fatalf("no sample %q", name)
		return msg{}
	}
	data, frag, xmit := get("data-64x64"), get("frag"), get("xmit-req")
	nf, stable, stability := get("msg-not-found"), get("stable"), get("stability")
	highest, hb, dataAuth := get("highest"), get("heartbeat"), get("data-64x64-auth")
	chal := get("challenge-not-found")
	const H = HeaderLen
	dataLen := func() int { b, _ := encode(make([]byte, MaxUDPPayload), data); return len(b) }()
	lastMsgLen := dataLen - 64 - MsgOverhead // offset of the last message's length

	cases := []struct {
		name string
		b    []byte
		err  error
	}{
		// Common header.
		{"empty", nil, ErrTruncated},
		{"major 2, one byte", []byte{2}, ErrVersion},
		{"major 0", mutate(t, hb, setByte(0, 0)), ErrVersion},
		{"major 2", mutate(t, hb, setByte(0, 2)), ErrVersion},
		{"major 255 short", []byte{255, 0, 1}, ErrVersion},
		{"23 bytes", mutate(t, hb, func(b []byte) []byte { return b[:23] }), ErrTruncated},
		{"foreign group", mutate(t, hb, put32(4, testGroup+1)), ErrForeignGroup},
		{"type 0", mutate(t, hb, setByte(2, 0)), ErrUnknownType},
		{"type 11", mutate(t, hb, setByte(2, 11)), ErrUnknownType},
		{"type 15", mutate(t, hb, setByte(2, 15)), ErrUnknownType},
		{"type 40", mutate(t, hb, setByte(2, 40)), ErrUnknownType},
		{"type 255", mutate(t, hb, setByte(2, 255)), ErrUnknownType},
		{"zero sender", mutate(t, hb, func(b []byte) []byte { clear(b[8:20]); return b }), ErrMalformed},
		{"header length 0", mutate(t, hb, put16(22, 0)), ErrMalformed},
		{"header length 23", mutate(t, hb, put16(22, 23)), ErrMalformed},
		{"header length below data minimum", mutate(t, data, put16(22, H+DataFixed-1)), ErrMalformed},
		{"header length below frag minimum", mutate(t, frag, put16(22, H+FragFixed-1)), ErrMalformed},
		{"header length below xmit minimum", mutate(t, xmit, put16(22, H+XmitReqFixed-1)), ErrMalformed},
		{"header length below not-found minimum", mutate(t, nf, put16(22, H+MsgNotFoundFixed-1)), ErrMalformed},
		{"header length below stable minimum", mutate(t, stable, put16(22, H+StableFixed-1)), ErrMalformed},
		{"header length below stability minimum", mutate(t, stability, put16(22, H+StableFixed-1)), ErrMalformed},
		{"header length below highest minimum", mutate(t, highest, put16(22, H+HighestFixed-1)), ErrMalformed},
		{"header length below heartbeat minimum", mutate(t, hb, put16(22, H+HeartbeatFixed-1)), ErrMalformed},
		{"header length past datagram", mutate(t, hb, put16(22, H+HeartbeatFixed+1)), ErrTruncated},
		{"header length max", mutate(t, hb, put16(22, math.MaxUint16)), ErrTruncated},
		{"auth flag without key", mutate(t, dataAuth, put16(20, 0)), ErrMalformed},
		{"key without auth flag", mutate(t, data, put16(20, 5)), ErrMalformed},
		{"auth flag, no room for trailer", mutate(t, hb, func(b []byte) []byte { b[3] = FlagAuth; return put16(20, 1)(b) }), ErrTruncated},
		{"auth trailer cut", mutate(t, get("heartbeat-auth"), func(b []byte) []byte { return b[:len(b)-1] }), ErrTruncated},

		// DATA.
		{"data count 0", mutate(t, data, put32(H+20, 0)), ErrMalformed},
		{"data first 0", mutate(t, data, put64(H, 0)), ErrMalformed},
		{"data zero origin", mutate(t, data, func(b []byte) []byte { clear(b[H+8 : H+20]); return b }), ErrMalformed},
		{"data run overflows", mutate(t, data, put64(H, math.MaxUint64-62)), ErrMalformed},
		{"data run ends at max", mutate(t, data, put64(H, math.MaxUint64-63)), nil},
		{"data count one more", mutate(t, data, add32(H+20, 1)), ErrTruncated},
		{"data count huge", mutate(t, data, put32(H+20, math.MaxUint32)), ErrTruncated},
		{"data count one less", mutate(t, data, add32(H+20, -1)), ErrMalformed},
		{"data length past datagram", mutate(t, data, put16(lastMsgLen, 65)), ErrTruncated},
		{"data first length past datagram", mutate(t, data, put16(DataOverhead, math.MaxUint16)), ErrTruncated},
		{"data trailing byte", mutate(t, data, appendBytes(0)), ErrMalformed},
		{"data trailing length", mutate(t, data, appendBytes(0, 0)), ErrMalformed},

		// FRAG.
		{"frag index = count", mutate(t, frag, put32(H+20, 4)), ErrMalformed},
		{"frag count 0", mutate(t, frag, put32(H+24, 0)), ErrMalformed},
		{"frag seq <= index", mutate(t, frag, put64(H, 2)), ErrMalformed},
		{"frag seq 0", mutate(t, frag, put64(H, 0)), ErrMalformed},
		{"frag run overflows", mutate(t, frag, put64(H, math.MaxUint64)), ErrMalformed},
		{"frag zero origin", mutate(t, frag, func(b []byte) []byte { clear(b[H+8 : H+20]); return b }), ErrMalformed},
		{"frag payload > total", mutate(t, frag, put32(H+28, 999)), ErrMalformed},
		{"frag length past datagram", mutate(t, frag, add32(H+32, 1)), ErrTruncated},
		{"frag length short of datagram", mutate(t, frag, add32(H+32, -1)), ErrMalformed},
		{"frag trailing byte", mutate(t, frag, appendBytes(1)), ErrMalformed},

		// XMIT_REQ.
		{"xmit too many ranges", mutate(t, xmit, put32(H+40, MaxRanges+1)), ErrTooManyRanges},
		{"xmit ranges uint32 max", mutate(t, xmit, put32(H+40, math.MaxUint32)), ErrTooManyRanges},
		{"xmit no ranges", mutate(t, xmit, put32(H+40, 0)), ErrMalformed},
		{"xmit count one more", mutate(t, xmit, add32(H+40, 1)), ErrTruncated},
		{"xmit count one less", mutate(t, xmit, add32(H+40, -1)), ErrMalformed},
		{"xmit from > to", mutate(t, xmit, put64(XmitReqOverhead+RangeLen, 206)), ErrMalformed},
		{"xmit from 0", mutate(t, xmit, put64(XmitReqOverhead, 0)), ErrMalformed},
		{"xmit zero target", mutate(t, xmit, func(b []byte) []byte { clear(b[H+20 : H+32]); return b }), ErrMalformed},
		{"xmit trailing byte", mutate(t, xmit, appendBytes(1)), ErrMalformed},

		// MSG_NOT_FOUND.
		{"not-found zero requester", mutate(t, nf, func(b []byte) []byte { clear(b[H+20 : H+32]); return b }), ErrMalformed},
		{"not-found from > to", mutate(t, nf, put64(H+32, 151)), ErrMalformed},
		{"not-found from 0", mutate(t, nf, put64(H+32, 0)), ErrMalformed},
		{"not-found low > highest", mutate(t, nf, put64(H+48, 202)), ErrMalformed},
		{"not-found entries one more", mutate(t, nf, add32(H+64, 1)), ErrTruncated},
		{"not-found entries huge", mutate(t, nf, put32(H+64, math.MaxUint32)), ErrTruncated},
		{"not-found entries one less", mutate(t, nf, add32(H+64, -1)), ErrMalformed},
		{"not-found zero entry member", mutate(t, nf, func(b []byte) []byte { clear(b[MsgNotFoundOverhead+EntryLen:][:MemberLen]); return b }), ErrMalformed},
		{"not-found trailing byte", mutate(t, nf, appendBytes(1)), ErrMalformed},

		// STABLE, STABILITY.
		{"stable entries one more", mutate(t, stable, add32(H+20, 1)), ErrTruncated},
		{"stable entries one less", mutate(t, stable, add32(H+20, -1)), ErrMalformed},
		{"stable zero entry member", mutate(t, stable, func(b []byte) []byte { clear(b[StableOverhead:][:MemberLen]); return b }), ErrMalformed},
		{"stable trailing byte", mutate(t, stable, appendBytes(1)), ErrMalformed},
		{"stability entries one more", mutate(t, stability, add32(H+20, 1)), ErrTruncated},
		{"stability entries one less", mutate(t, stability, add32(H+20, -1)), ErrMalformed},
		{"stability zero entry member", mutate(t, stability, func(b []byte) []byte { clear(b[StableOverhead+2*EntryLen:][:MemberLen]); return b }), ErrMalformed},

		// HIGHEST, HEARTBEAT.
		{"highest low > highest", mutate(t, highest, put64(H+20, 202)), ErrMalformed},
		{"highest trailing byte", mutate(t, highest, appendBytes(1)), ErrMalformed},
		{"heartbeat trailing byte", mutate(t, hb, appendBytes(1)), ErrMalformed},

		// CHALLENGE and ECHO.
		{"header length below challenge minimum", mutate(t, chal, put16(22, H+ChallengeFixed-1)), ErrMalformed},
		{"challenge zero target", mutate(t, chal, func(b []byte) []byte { clear(b[H+20 : H+32]); return b }), ErrMalformed},
		{"challenge zero kind", mutate(t, chal, put32(H+40, 0)), ErrMalformed},
		{"challenge too many ranges", mutate(t, chal, put32(H+44, MaxRanges+1)), ErrTooManyRanges},
		{"challenge count one more", mutate(t, chal, add32(H+44, 1)), ErrTruncated},
		{"challenge count one less", mutate(t, chal, add32(H+44, -1)), ErrMalformed},
		{"challenge from > to", mutate(t, chal, put64(ChallengeOverhead, 151)), ErrMalformed},
		{"challenge trailing byte", mutate(t, chal, appendBytes(1)), ErrMalformed},
		{"challenge unknown kind", mutate(t, chal, put32(H+40, 99)), nil},

		// Accepted variants.
		{"newer minor", mutate(t, hb, setByte(1, 9)), nil},
		{"reserved gms type", mutate(t, hb, func(b []byte) []byte { b[2] = 17; return b }), nil},
		{"reserved state type", mutate(t, hb, func(b []byte) []byte { b[2] = 39; return b }), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := decode(c.b)
			if c.err == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, c.err)
			}
		})
	}
}

// TestWrongDecoder: a decoder given another type's header refuses it.
func TestWrongDecoder(t *testing.T) {
	b, err := EncodeHeartbeat(make([]byte, 100), hdr(mA), Heartbeat{View: view1})
	require.NoError(t, err)
	h, body, err := DecodeHeader(b, testGroup)
	require.NoError(t, err)
	decoders := map[string]func() error{
		"data":        func() error { _, err := DecodeData(h, body); return err },
		"frag":        func() error { _, err := DecodeFrag(h, body); return err },
		"xmit":        func() error { _, err := DecodeXmitReq(h, body); return err },
		"not-found":   func() error { _, err := DecodeMsgNotFound(h, body); return err },
		"stable":      func() error { _, err := DecodeStable(h, body); return err },
		"stability":   func() error { _, err := DecodeStability(h, body); return err },
		"highest":     func() error { _, err := DecodeHighest(h, body); return err },
		"bad hdr len": func() error { h2 := h; h2.Len = 0; _, err := DecodeHeartbeat(h2, body); return err },
	}
	for name, f := range decoders {
		t.Run(name, func(t *testing.T) { require.ErrorIs(t, f(), ErrMalformed) })
	}
	// A header whose length runs past the body handed in.
	h.Len = HeaderLen + HeartbeatFixed + 1
	_, err = DecodeHeartbeat(h, body)
	require.ErrorIs(t, err, ErrTruncated)
}

func TestEncodeErrors(t *testing.T) {
	buf := make([]byte, MaxUDPPayload)
	tooMany := make([]Range, MaxRanges+1)
	for i := range tooMany {
		tooMany[i] = Range{From: 1, To: 1}
	}
	es := EntrySlice{{Member: mA}}
	cases := []struct {
		name string
		f    func() error
		err  error
	}{
		{"zero sender", func() error { _, err := EncodeHeartbeat(buf, hdr(digest.Member{}), Heartbeat{}); return err }, ErrMalformed},
		{"auth without key", func() error {
			_, err := EncodeHeartbeat(buf, Header{Group: 1, Sender: mA, Flags: FlagAuth}, Heartbeat{})
			return err
		}, ErrMalformed},
		{"key without auth", func() error {
			_, err := EncodeHeartbeat(buf, Header{Group: 1, Sender: mA, KeyID: 1}, Heartbeat{})
			return err
		}, ErrMalformed},
		{"xmit too many", func() error { _, err := EncodeXmitReq(buf, hdr(mA), view1, mB, 0, tooMany); return err }, ErrTooManyRanges},
		{"xmit none", func() error { _, err := EncodeXmitReq(buf, hdr(mA), view1, mB, 0, nil); return err }, ErrMalformed},
		{"xmit from > to", func() error {
			_, err := EncodeXmitReq(buf, hdr(mA), view1, mB, 0, []Range{{From: 5, To: 4}})
			return err
		}, ErrMalformed},
		{"xmit from 0", func() error {
			_, err := EncodeXmitReq(buf, hdr(mA), view1, mB, 0, []Range{{From: 0, To: 4}})
			return err
		}, ErrMalformed},
		{"xmit zero target", func() error {
			_, err := EncodeXmitReq(buf, hdr(mA), view1, digest.Member{}, 0, []Range{{From: 1, To: 4}})
			return err
		}, ErrMalformed},
		{"not-found low > highest", func() error {
			_, err := EncodeMsgNotFound(buf, hdr(mA), view1, mB, Range{From: 1, To: 2}, 5, 4, es)
			return err
		}, ErrMalformed},
		{"not-found bad range", func() error {
			_, err := EncodeMsgNotFound(buf, hdr(mA), view1, mB, Range{From: 3, To: 2}, 5, 6, es)
			return err
		}, ErrMalformed},
		{"not-found zero requester", func() error {
			_, err := EncodeMsgNotFound(buf, hdr(mA), view1, digest.Member{}, Range{From: 1, To: 2}, 5, 6, es)
			return err
		}, ErrMalformed},
		{"stable zero member", func() error {
			_, err := EncodeStable(buf, hdr(mA), view1, EntrySlice{{Member: mA}, {}})
			return err
		}, ErrMalformed},
		{"stable short", func() error {
			_, err := EncodeStable(buf[:StableOverhead+EntryLen-1], hdr(mA), view1, es)
			return err
		}, ErrShortBuffer},
		{"highest low > highest", func() error { _, err := EncodeHighest(buf, hdr(mA), Highest{Low: 2, Highest: 1}); return err }, ErrMalformed},
		{"frag index >= count", func() error {
			_, err := EncodeFrag(buf, hdr(mA), Frag{Origin: mA, Seq: 5, Index: 2, Count: 2, Total: 1})
			return err
		}, ErrMalformed},
		{"frag payload > total", func() error {
			_, err := EncodeFrag(buf, hdr(mA), Frag{Origin: mA, Seq: 5, Count: 1, Total: 1, Payload: []byte("ab")})
			return err
		}, ErrMalformed},
		{"put header short", func() error {
			return PutHeader(buf[:HeaderLen-1], Header{Sender: mA, Type: TypeGMSFirst, Len: HeaderLen})
		}, ErrShortBuffer},
		{"challenge zero kind", func() error {
			_, err := EncodeChallenge(buf, hdr(mA), TypeChallenge, view1, mB, 1, 0, RangeSlice(nil))
			return err
		}, ErrMalformed},
		{"challenge wrong type", func() error {
			_, err := EncodeChallenge(buf, hdr(mA), TypeXmitReq, view1, mB, 1, ChallengeAddress, RangeSlice(nil))
			return err
		}, ErrMalformed},
		{"challenge bad range", func() error {
			_, err := EncodeChallenge(buf, hdr(mA), TypeEcho, view1, mB, 1, ChallengeNotFound, RangeSlice{{From: 3, To: 2}})
			return err
		}, ErrMalformed},
		{"challenge too many ranges", func() error {
			_, err := EncodeChallenge(buf, hdr(mA), TypeEcho, view1, mB, 1, ChallengeNotFound, RangeSlice(make([]Range, MaxRanges+1)))
			return err
		}, ErrTooManyRanges},
		{"challenge short", func() error {
			_, err := EncodeChallenge(buf[:ChallengeOverhead+RangeLen-1], hdr(mA), TypeEcho, view1, mB, 1, ChallengeNotFound, RangeSlice{{From: 1, To: 2}})
			return err
		}, ErrShortBuffer},
		{"put header unknown type", func() error { return PutHeader(buf, Header{Sender: mA, Type: 11, Len: HeaderLen}) }, ErrMalformed},
		{"put header len below type", func() error { return PutHeader(buf, Header{Sender: mA, Type: TypeData, Len: HeaderLen}) }, ErrMalformed},
		{"put header len too big", func() error { return PutHeader(buf, Header{Sender: mA, Type: TypeGMSFirst, Len: 1 << 16}) }, ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { require.ErrorIs(t, c.f(), c.err) })
	}
}

func TestDataWriter(t *testing.T) {
	t.Run("reset errors", func(t *testing.T) {
		var w DataWriter
		require.ErrorIs(t, w.Reset(make([]byte, 100), hdr(mA), digest.Member{}, 1), ErrMalformed)
		require.ErrorIs(t, w.Reset(make([]byte, 100), hdr(mA), mA, 0), ErrMalformed)
		require.ErrorIs(t, w.Reset(make([]byte, 100), hdr(digest.Member{}), mA, 1), ErrMalformed)
		require.ErrorIs(t, w.Reset(make([]byte, DataOverhead+1), hdr(mA), mA, 1), ErrShortBuffer)
		require.ErrorIs(t, w.Reset(make([]byte, DataOverhead+2+TrailerLen-1), authHdr(mA, 1), mA, 1), ErrShortBuffer)
		require.False(t, w.Append(nil))
		require.Nil(t, w.Claim(0))
		require.Nil(t, w.Finish())
		require.Equal(t, -1, w.Remaining())
		require.Zero(t, w.Len())
		require.Zero(t, w.Next())
	})
	t.Run("grow", func(t *testing.T) {
		var w DataWriter
		require.NoError(t, w.Reset(make([]byte, DataOverhead+TrailerLen+8), authHdr(mA, 9), mB, 7))
		require.True(t, w.Append([]byte("first")))
		require.Nil(t, w.Claim(80), "does not fit the small buffer")
		require.ErrorIs(t, w.Grow(make([]byte, DataOverhead+TrailerLen+7)), ErrShortBuffer)
		require.Equal(t, 1, w.Count(), "unchanged by a refused Grow")
		big := make([]byte, 1500)
		require.NoError(t, w.Grow(big))
		require.True(t, w.Append(make([]byte, 80)))
		require.Equal(t, 1500-w.Len()-MsgOverhead, w.Remaining(), "Len counts the trailer")
		b := w.Finish()
		require.Equal(t, &big[0], &b[0], "finished in the new buffer")
		h, body, err := DecodeHeader(b, testGroup)
		require.NoError(t, err)
		d, err := DecodeData(h, body)
		require.NoError(t, err)
		require.Equal(t, 2, d.Count)
		require.Equal(t, uint64(7), d.First)
		msgs := d.AppendMessages(nil)
		require.Equal(t, "first", string(msgs[0]))
		require.Len(t, msgs[1], 80)
	})
	t.Run("fill exactly", func(t *testing.T) {
		const size = 10
		n := MaxBundleMessages(1500-TrailerLen, size)
		require.Equal(t, (1500-TrailerLen-DataOverhead)/(size+MsgOverhead), n)
		buf := make([]byte, 1500)
		var w DataWriter
		require.NoError(t, w.Reset(buf, authHdr(mA, 9), mB, 100))
		require.Nil(t, w.Finish(), "empty bundle")
		for i := range n {
			require.Equal(t, uint64(100+i), w.Next())
			p := w.Claim(size)
			require.Len(t, p, size)
			require.Equal(t, size, cap(p))
			for j := range p {
				p[j] = byte(i)
			}
		}
		require.Less(t, w.Remaining(), size)
		require.False(t, w.Append(make([]byte, size)))
		require.Nil(t, w.Claim(size))
		require.Equal(t, n, w.Count())
		if rem := w.Remaining(); rem >= 0 {
			require.True(t, w.Append(make([]byte, rem)))
			n++
		}
		b := w.Finish()
		require.Equal(t, w.Len(), len(b))
		require.LessOrEqual(t, len(b), 1500)
		h, body, err := DecodeHeader(b, testGroup)
		require.NoError(t, err)
		require.True(t, h.Auth())
		d, err := DecodeData(h, body)
		require.NoError(t, err)
		require.Equal(t, n, d.Count)
		require.Equal(t, uint64(100), d.First)
		require.Equal(t, uint64(100+n-1), d.Last())
		require.Equal(t, mB, d.Origin)
		msgs := d.AppendMessages(nil)
		require.Len(t, msgs, n)
		it := d.Messages()
		for i := 0; ; i++ {
			p, ok := it.Next()
			if !ok {
				require.Equal(t, n, i)
				break
			}
			require.Equal(t, uint64(100+i), it.Seq())
			require.Equal(t, len(p), cap(p), "payload capped")
			if i < n-1 || len(p) == size {
				require.Equal(t, bytes.Repeat([]byte{byte(i)}, size), p)
			}
		}
	})
	t.Run("message too long", func(t *testing.T) {
		var w DataWriter
		require.NoError(t, w.Reset(make([]byte, 1<<17), hdr(mA), mA, 1))
		require.Equal(t, MaxMessageLen, w.Remaining())
		require.False(t, w.Append(make([]byte, MaxMessageLen+1)))
		require.True(t, w.Append(make([]byte, MaxMessageLen)))
		require.Equal(t, MaxMessageLen, MaxBundledMessageLen(1<<17))
		require.Equal(t, 1500-DataOverhead-MsgOverhead, MaxBundledMessageLen(1500))
		require.Nil(t, w.Claim(-1))
	})
	t.Run("run ends at max seqno", func(t *testing.T) {
		var w DataWriter
		require.NoError(t, w.Reset(make([]byte, 1000), hdr(mA), mA, math.MaxUint64-1))
		require.True(t, w.Append(nil))
		require.True(t, w.Append(nil))
		require.False(t, w.Append(nil), "seqno would wrap")
		require.Equal(t, -1, w.Remaining())
		_, err := decode(w.Finish())
		require.NoError(t, err)
	})
	t.Run("append after finish", func(t *testing.T) {
		var w DataWriter
		require.NoError(t, w.Reset(make([]byte, 1000), authHdr(mA, 2), mA, 1))
		require.True(t, w.Append([]byte("a")))
		b1 := bytes.Clone(w.Finish())
		require.True(t, w.Append([]byte("b")))
		got, err := decode(w.Finish())
		require.NoError(t, err)
		require.Equal(t, [][]byte{[]byte("a"), []byte("b")}, got.Body.(dataMsg).Msgs)
		got, err = decode(b1)
		require.NoError(t, err)
		require.Equal(t, [][]byte{[]byte("a")}, got.Body.(dataMsg).Msgs)
	})
}

func TestSizeHelpers(t *testing.T) {
	require.Equal(t, 48, DataOverhead)
	require.Equal(t, 0, MaxBundleMessages(DataOverhead+1, 0))
	require.Equal(t, 0, MaxBundleMessages(10, 1))
	require.Equal(t, 0, MaxBundleMessages(1500, -1))
	require.Equal(t, (MaxUDPPayload-DataOverhead)/66, MaxBundleMessages(MaxUDPPayload, 64))
	require.Equal(t, MaxRanges, MaxXmitRanges(MaxUDPPayload))
	require.Equal(t, (1500-XmitReqOverhead)/RangeLen, MaxXmitRanges(1500))
	require.Equal(t, 0, MaxXmitRanges(10))
	require.Equal(t, 0, MaxDigestEntries(10))
	require.Equal(t, 1500-FragOverhead, MaxFragPayload(1500))

	// MaxXmitRanges and MaxDigestEntries are exact.
	buf := make([]byte, 1500)
	ranges := make([]Range, MaxXmitRanges(len(buf)))
	for i := range ranges {
		ranges[i] = Range{From: 1, To: 2}
	}
	_, err := EncodeXmitReq(buf, hdr(mA), view1, mB, 0, ranges)
	require.NoError(t, err)
	_, err = EncodeXmitReq(buf, hdr(mA), view1, mB, 0, append(ranges, Range{From: 1, To: 2}))
	require.ErrorIs(t, err, ErrShortBuffer)
	es := make(EntrySlice, MaxDigestEntries(len(buf)))
	for i := range es {
		es[i].Member = mA
	}
	_, err = EncodeMsgNotFound(buf, hdr(mA), view1, mB, Range{From: 1, To: 1}, 0, 0, es)
	require.NoError(t, err)
	_, err = EncodeMsgNotFound(buf, hdr(mA), view1, mB, Range{From: 1, To: 1}, 0, 0, append(es, digest.Entry{Member: mA}))
	require.ErrorIs(t, err, ErrShortBuffer)
}

func TestTypeStrings(t *testing.T) {
	require.Equal(t, "DATA", TypeData.String())
	require.Equal(t, "MSG_NOT_FOUND", TypeMsgNotFound.String())
	require.Equal(t, "CHALLENGE", TypeChallenge.String())
	require.Equal(t, "ECHO", TypeEcho.String())
	require.Equal(t, "GMS(17)", Type(17).String())
	require.Equal(t, "STATE(32)", Type(32).String())
	require.Equal(t, "TYPE(0)", Type(0).String())
	require.Equal(t, "TYPE(255)", Type(255).String())
	for typ := range 256 {
		want := (typ >= 1 && typ <= 10) || (typ >= 16 && typ <= 39)
		require.Equal(t, want, Type(typ).Known(), "type %d", typ)
	}
}

func TestViews(t *testing.T) {
	s := samples()
	var nf msg
	for _, x := range s {
		if x.name == "msg-not-found" {
			nf = x.m
		}
	}
	b, err := encode(make([]byte, 2000), nf)
	require.NoError(t, err)
	h, body, err := DecodeHeader(b, testGroup)
	require.NoError(t, err)
	m, err := DecodeMsgNotFound(h, body)
	require.NoError(t, err)
	want := nf.Body.(notFoundMsg).Entries
	require.Equal(t, len(want), m.Digest.Len())
	for i, e := range want {
		require.Equal(t, e, m.Digest.At(i))
		got, ok := m.Digest.Lookup(e.Member)
		require.True(t, ok)
		require.Equal(t, e, got)
	}
	_, ok := m.Digest.Lookup(digest.Member{ID: 99})
	require.False(t, ok)
	require.Equal(t, digest.Entry{}, m.Digest.At(-1))
	require.Equal(t, digest.Entry{}, m.Digest.At(len(want)))
	require.True(t, digest.New(want).Equal(m.Digest.ToDigest()))

	// Encoding from a digest.Digest and from a DigestView gives the same bytes.
	b2, err := EncodeMsgNotFound(make([]byte, 2000), nf.H, m.View, m.Requester, m.Missing, m.Low, m.HighestSent, digest.New(want))
	require.NoError(t, err)
	require.Equal(t, b, b2)
	b3, err := EncodeMsgNotFound(make([]byte, 2000), nf.H, m.View, m.Requester, m.Missing, m.Low, m.HighestSent, m.Digest)
	require.NoError(t, err)
	require.Equal(t, b, b3)

	var rl RangeList
	require.Zero(t, rl.Len())
	require.Equal(t, Range{}, rl.At(0))
	require.True(t, Range{From: 3, To: 5}.Contains(3))
	require.True(t, Range{From: 3, To: 5}.Contains(5))
	require.False(t, Range{From: 3, To: 5}.Contains(6))
	require.False(t, Range{From: 0, To: 5}.Valid())
	var it MsgIter
	_, ok = it.Next()
	require.False(t, ok)
}
