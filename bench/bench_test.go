package bench

import (
	"context"
	"flag"
	"testing"
)

// Flags for exploring the raw bundler's settings with go test -bench.
var (
	rawBatch = flag.Int("raw.batch", 0, "datagrams per sendmmsg/recvmmsg in BenchmarkRawBundler (0: RawConfig default)")
	rawBusy  = flag.Bool("raw.busypoll", false, "BenchmarkRawBundler receivers spin on TryReadBatch")
)

// BenchmarkRawBundler is the raw baseline: b.N messages of the given size
// packed into 64 KB datagrams, multicast on loopback with sendmmsg and
// parsed after recvmmsg, one receiver. msgs/s is the receiver's rate.
func BenchmarkRawBundler(b *testing.B) {
	for _, size := range []int{64, 1024} {
		b.Run(byteSize(size), func(b *testing.B) {
			b.ReportAllocs()
			res, err := RunRaw(context.Background(), RawConfig{Group: testGroup(40), MsgSize: size, Count: int64(b.N), Batch: *rawBatch, BusyPoll: *rawBusy})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.MsgsPerSec, "msgs/s")
			b.ReportMetric(res.SendMsgsPerSec, "sent-msgs/s")
			b.ReportMetric(res.MBPerSec, "MB/s")
			b.ReportMetric(res.LossPct, "loss%")
		})
	}
}

// BenchmarkRawPingPong is the raw latency baseline: b.N round trips of 64 B
// over unicast loopback between two transports.
func BenchmarkRawPingPong(b *testing.B) {
	for _, busy := range []bool{false, true} {
		name := "blocking"
		if busy {
			name = "busypoll"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			res, err := RunRawPingPong(context.Background(), PingPongConfig{Group: testGroup(41), Count: b.N, Warmup: min(b.N, 1000), BusyPoll: busy})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(res.P50.Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(res.P99.Nanoseconds()), "p99-ns")
		})
	}
}

// BenchmarkFillParseRaw is the CPU cost of the bundler without the
// sockets: one op packs a 64 KB datagram of 64 B messages and parses it;
// ns/msg is the cost per message.
func BenchmarkFillParseRaw(b *testing.B) {
	buf := make([]byte, 65507)
	payload := make([]byte, 64)
	n := msgsPerDatagram(len(buf), len(payload))
	b.ReportAllocs()
	b.SetBytes(int64(n * len(payload)))
	var sum uint64
	for i := 0; b.Loop(); i += n {
		d := fillRaw(buf, 1, uint64(i), n, payload)
		_, _, _, s, _ := parseRaw(d)
		sum += s
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/msg")
	_ = sum
}
