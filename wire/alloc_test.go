package wire

import (
	"bytes"
	"testing"

	"github.com/nakcast/nakcast/digest"
	"github.com/stretchr/testify/require"
)

// bundle64 encodes 64 messages of 64 bytes into buf and decodes them back,
// returning the number of bytes seen (so nothing is optimized away).
func bundle64(buf []byte, msgs [][]byte) int {
	var w DataWriter
	if w.Reset(buf, hdr(mA), mA, 1001) != nil {
		return -1
	}
	for _, m := range msgs {
		if !w.Append(m) {
			return -1
		}
	}
	b := w.Finish()
	h, body, err := DecodeHeader(b, testGroup)
	if err != nil {
		return -1
	}
	d, err := DecodeData(h, body)
	if err != nil {
		return -1
	}
	n := 0
	it := d.Messages()
	for p, ok := it.Next(); ok; p, ok = it.Next() {
		n += len(p)
	}
	return n
}

func messages(n, size int) [][]byte {
	msgs := make([][]byte, n)
	for i := range msgs {
		msgs[i] = bytes.Repeat([]byte{byte(i)}, size)
	}
	return msgs
}

func testRanges(n int) []Range {
	rs := make([]Range, n)
	for i := range rs {
		rs[i] = Range{From: uint64(i*10 + 1), To: uint64(i*10 + 5)}
	}
	return rs
}

func testDigest(n int) digest.Digest {
	es := make([]digest.Entry, n)
	for i := range es {
		es[i] = digest.Entry{Member: digest.Member{ID: uint64(i + 1), Inc: 1}, Low: 10, Delivered: 20, Received: 30}
	}
	return digest.New(es)
}

func TestZeroAllocs(t *testing.T) {
	buf := make([]byte, MaxUDPPayload)
	msgs := messages(64, 64)
	ranges := testRanges(64)
	dg := testDigest(16)
	es := EntrySlice(dg.Entries())
	xb, err := EncodeXmitReq(make([]byte, 2000), hdr(mB), view1, mA, 50, ranges)
	require.NoError(t, err)
	nb, err := EncodeMsgNotFound(make([]byte, 2000), hdr(mA), view1, mB, Range{From: 51, To: 150}, 150, 201, dg)
	require.NoError(t, err)
	nh, nbody, err := DecodeHeader(nb, testGroup)
	require.NoError(t, err)
	nf, err := DecodeMsgNotFound(nh, nbody)
	require.NoError(t, err)
	msgDst := make([][]byte, 0, 64)
	offs := make([]uint32, 0, 65)
	var dw DataWriter
	_ = dw.Reset(make([]byte, MaxUDPPayload), hdr(mA), mA, 1)
	for range 64 {
		copy(dw.Claim(64), msgs[0])
	}
	dataDgram := dw.Finish()

	cases := []struct {
		name string
		f    func()
	}{
		{"bundle 64x64 encode+decode", func() {
			if bundle64(buf, msgs) != 64*64 {
				panic("bundle")
			}
		}},
		{"data append messages", func() {
			var w DataWriter
			_ = w.Reset(buf, hdr(mA), mA, 1)
			for range 64 {
				copy(w.Claim(64), msgs[0])
			}
			h, body, _ := DecodeHeader(w.Finish(), testGroup)
			d, _ := DecodeData(h, body)
			msgDst = d.AppendMessages(msgDst[:0])
		}},
		{"data offsets", func() {
			h, body, _ := DecodeHeader(dataDgram, testGroup)
			if _, offs, _ = DecodeDataOffsets(h, body, offs); len(offs) != 65 {
				panic("offsets")
			}
		}},
		{"xmit encode", func() {
			if _, err := EncodeXmitReq(buf, hdr(mB), view1, mA, 50, ranges); err != nil {
				panic(err)
			}
		}},
		{"xmit decode", func() {
			h, body, err := DecodeHeader(xb, testGroup)
			if err != nil {
				panic(err)
			}
			x, err := DecodeXmitReq(h, body)
			if err != nil {
				panic(err)
			}
			for i := range x.Ranges.Len() {
				_ = x.Ranges.At(i)
			}
		}},
		{"not-found decode", func() {
			h, body, err := DecodeHeader(nb, testGroup)
			if err != nil {
				panic(err)
			}
			m, err := DecodeMsgNotFound(h, body)
			if err != nil {
				panic(err)
			}
			_, _ = m.Digest.Lookup(digest.Member{ID: 16, Inc: 1})
		}},
		{"not-found encode from Digest", func() {
			_, _ = EncodeMsgNotFound(buf, hdr(mA), view1, mB, Range{From: 51, To: 150}, 150, 201, dg)
		}},
		{"not-found encode from DigestView", func() {
			_, _ = EncodeMsgNotFound(buf, hdr(mA), view1, mB, Range{From: 51, To: 150}, 150, 201, nf.Digest)
		}},
		{"stable encode from EntrySlice", func() { _, _ = EncodeStable(buf, hdr(mA), view1, es) }},
		{"stability encode+decode", func() {
			b, _ := EncodeStability(buf, hdr(mA), view1, dg)
			h, body, _ := DecodeHeader(b, testGroup)
			_, _ = DecodeStability(h, body)
		}},
		{"frag encode+decode", func() {
			b, _ := EncodeFrag(buf, authHdr(mA, 1), Frag{Origin: mA, Seq: 9, Index: 1, Count: 3, Total: 3000, Payload: buf[40000:41000]})
			h, body, _ := DecodeHeader(b, testGroup)
			_, _ = DecodeFrag(h, body)
		}},
		{"highest+heartbeat", func() {
			b, _ := EncodeHighest(buf, hdr(mA), Highest{View: view1, Low: 1, Highest: 2})
			h, body, _ := DecodeHeader(b, testGroup)
			_, _ = DecodeHighest(h, body)
			b, _ = EncodeHeartbeat(buf, hdr(mA), Heartbeat{View: view1})
			h, body, _ = DecodeHeader(b, testGroup)
			_, _ = DecodeHeartbeat(h, body)
		}},
		{"challenge encode, decode, echo", func() {
			b, _ := EncodeChallenge(buf, hdr(mA), TypeChallenge, view1, mB, 42, ChallengeNotFound, RangeSlice(ranges[:4]))
			h, body, _ := DecodeHeader(b, testGroup)
			c, _ := DecodeChallenge(h, body)
			_, _ = EncodeChallenge(buf[4096:], hdr(mB), TypeEcho, c.View, c.Target, c.Nonce, c.Kind, c.Ranges)
		}},
		{"errors", func() {
			_, _, _ = DecodeHeader(xb[:10], testGroup)
			_, _, _ = DecodeHeader(xb, testGroup+1)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Zero(t, testing.AllocsPerRun(100, c.f))
		})
	}
}

func TestPoolZeroAllocs(t *testing.T) {
	p := NewPool(MaxUDPPayload, 1<<20)
	// Warm every class used below.
	warm := []*Buffer{p.Get(100), p.Get(100), p.Get(9000), p.Get(MaxUDPPayload)}
	for _, b := range warm {
		b.Release()
	}
	allocs := testing.AllocsPerRun(1000, func() {
		b := p.Get(100)
		b.Retain(1)
		c := p.Get(9000)
		d := p.Get(MaxUDPPayload)
		b.Release()
		c.Release()
		d.Release()
		b.Release()
	})
	require.Zero(t, allocs)
}
