package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nakcast/nakcast/bench"
)

// BenchmarkEngineLoopback measures one sender member to one receiver
// member on loopback with 64 KB datagrams, for 64 B and 1 KiB messages:
// b.N messages sent with Send, timed until the receiver delivered the last.
// In the same run it measures the raw baseline (bench.RunRaw: the same
// message size packed into the same datagram size, sendmmsg/recvmmsg and a
// parse, no protocol) over the same count, and reports engine/raw.
func BenchmarkEngineLoopback(b *testing.B) {
	for _, size := range []int{64, 1024} {
		for _, idle := range []IdleStrategy{IdleBlock, IdleYield} {
			b.Run(fmt.Sprintf("%dB/%v", size, idle), func(b *testing.B) {
				benchLoopback(b, size, idle)
			})
		}
	}
}

func benchLoopback(b *testing.B, size int, idle IdleStrategy) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	raw, err := bench.RunRaw(ctx, bench.RawConfig{Group: testGroup(), MsgSize: size, Count: int64(b.N), Batch: 64})
	if err != nil {
		b.Fatal(err)
	}
	cs := []*counter{{}, {}}
	ms := openGroup(b, 2, func(i int, c *Config) {
		c.Handler = cs[i]
		c.Idle = idle
	})
	payload := make([]byte, size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		payload[0] = byte(i)
		if err := ms[0].Send(ctx, payload); err != nil {
			b.Fatal(err)
		}
	}
	for cs[1].n.Load() < int64(b.N) {
		if ctx.Err() != nil {
			b.Fatalf("timeout: %d of %d delivered", cs[1].n.Load(), b.N)
		}
		time.Sleep(50 * time.Microsecond) // polling the receiver's count, not synchronisation
	}
	el := time.Since(start)
	b.StopTimer()
	rate := float64(b.N) / el.Seconds()
	b.ReportMetric(rate, "msgs/s")
	b.ReportMetric(raw.MsgsPerSec, "raw-msgs/s")
	if raw.MsgsPerSec > 0 {
		b.ReportMetric(rate/raw.MsgsPerSec, "engine/raw")
	}
	s := ms[0].Stats()
	r := ms[1].Stats()
	b.ReportMetric(float64(s.Sent)/float64(max(s.Bundles, 1)), "msgs/datagram")
	b.ReportMetric(float64(s.ProtocolBackPressure), "window-full")
	b.ReportMetric(float64(r.Retransmitted+s.Retransmitted), "retransmitted")
	b.ReportMetric(float64(s.FlowControlWaits), "flow-waits")
	b.ReportMetric(float64(r.Protocol.StableSent), "stable-sent")
	b.ReportMetric(float64(s.Protocol.StabilitySent), "stability-sent")
}
