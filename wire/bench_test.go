package wire

import (
	"sync/atomic"
	"testing"
)

// BenchmarkBundle64: encode and decode one DATA datagram of 64 messages of
// 64 bytes (the unit of the hot path). Reports messages per second.
func BenchmarkBundle64(b *testing.B) {
	buf := make([]byte, MaxUDPPayload)
	msgs := messages(64, 64)
	b.ReportAllocs()
	b.SetBytes(64 * 64)
	for b.Loop() {
		if bundle64(buf, msgs) != 64*64 {
			b.Fatal("bundle")
		}
	}
	b.ReportMetric(float64(b.N)*64/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkBundleEncode64 and BenchmarkBundleDecode64 split the above.
func BenchmarkBundleEncode64(b *testing.B) {
	buf := make([]byte, MaxUDPPayload)
	msgs := messages(64, 64)
	b.ReportAllocs()
	b.SetBytes(64 * 64)
	var w DataWriter
	for b.Loop() {
		_ = w.Reset(buf, hdr(mA), mA, 1)
		for _, m := range msgs {
			w.Append(m)
		}
		_ = w.Finish()
	}
}

// BenchmarkBundleEncodeRun64 is BenchmarkBundleEncode64 with AppendRun
// (SendBatch's loop) instead of Append a message.
func BenchmarkBundleEncodeRun64(b *testing.B) {
	buf := make([]byte, MaxUDPPayload)
	msgs := messages(64, 64)
	offs := make([]uint32, len(msgs))
	b.ReportAllocs()
	b.SetBytes(64 * 64)
	var w DataWriter
	for b.Loop() {
		_ = w.Reset(buf, hdr(mA), mA, 1)
		if w.AppendRun(msgs, len(msgs), MaxMessageLen, offs) != len(msgs) {
			b.Fatal("short run")
		}
		_ = w.Finish()
	}
}

func BenchmarkBundleDecode64(b *testing.B) {
	var w DataWriter
	_ = w.Reset(make([]byte, MaxUDPPayload), hdr(mA), mA, 1)
	for _, m := range messages(64, 64) {
		w.Append(m)
	}
	dg := w.Finish()
	b.ReportAllocs()
	b.SetBytes(64 * 64)
	for b.Loop() {
		h, body, err := DecodeHeader(dg, testGroup)
		if err != nil {
			b.Fatal(err)
		}
		d, err := DecodeData(h, body)
		if err != nil {
			b.Fatal(err)
		}
		it := d.Messages()
		for _, ok := it.Next(); ok; _, ok = it.Next() {
		}
	}
}

func BenchmarkDecodeXmitReq64(b *testing.B) {
	dg, err := EncodeXmitReq(make([]byte, 2000), hdr(mB), view1, mA, 50, testRanges(64))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var sink uint64
	for b.Loop() {
		h, body, err := DecodeHeader(dg, testGroup)
		if err != nil {
			b.Fatal(err)
		}
		x, err := DecodeXmitReq(h, body)
		if err != nil {
			b.Fatal(err)
		}
		for i := range x.Ranges.Len() {
			sink += x.Ranges.At(i).To
		}
	}
	_ = sink
}

func BenchmarkEncodeXmitReq64(b *testing.B) {
	buf := make([]byte, 2000)
	ranges := testRanges(64)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeXmitReq(buf, hdr(mB), view1, mA, 50, ranges); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeMsgNotFound16(b *testing.B) {
	dg, err := EncodeMsgNotFound(make([]byte, 2000), hdr(mA), view1, mB, Range{From: 51, To: 150}, 150, 201, testDigest(16))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		h, body, err := DecodeHeader(dg, testGroup)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := DecodeMsgNotFound(h, body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPoolGetRelease(b *testing.B) {
	p := NewPool(MaxUDPPayload, 1<<30)
	b.ReportAllocs()
	for b.Loop() {
		buf := p.Get(MaxUDPPayload)
		buf.Retain(1)
		buf.Release()
		buf.Release()
	}
}

func BenchmarkPoolGetReleaseParallel(b *testing.B) {
	p := NewPool(MaxUDPPayload, 1<<30)
	var fails atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			buf := p.Get(1500)
			if buf == nil {
				fails.Add(1)
				continue
			}
			buf.Release()
		}
	})
	if fails.Load() > 0 {
		b.Fatal("over budget")
	}
}
