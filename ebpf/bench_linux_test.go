package ebpf_test

import (
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/nakcast/nakcast/ebpf"
	"github.com/nakcast/nakcast/engine/transport"
)

// BenchmarkXDPTransportPingPong is the transports alone, no engine: two
// members in namespaces of their own (veth, bridge), one pinging a 64 B
// group datagram and the other answering it, both spinning on
// TryReadBatch, over UDP and over AF_XDP (native and generic XDP) in the
// same run. It reports the round trip's p50 and p99 and, for AF_XDP, the
// p50 over UDP's (root; skipped otherwise).
func BenchmarkXDPTransportPingPong(b *testing.B) {
	var udpP50 time.Duration
	for _, kind := range []string{"udp", ebpf.ModeNative, ebpf.ModeGeneric} {
		b.Run(kind, func(b *testing.B) {
			ns := newXDPNetns(b, 2)
			var x, y transport.Transport
			if kind == "udp" {
				x, y = ns.openUDP(0, group4), ns.openUDP(1, group4)
			} else {
				x, y = ns.openXDP(0, group4, ebpf.Options{Mode: kind}), ns.openXDP(1, group4, ebpf.Options{Mode: kind})
			}
			b.ResetTimer()
			rtts := pingPong(x, y, max(b.N, 100))
			b.StopTimer()
			p50, p99 := rtts[len(rtts)/2], rtts[len(rtts)*99/100]
			b.ReportMetric(float64(p50.Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns")
			if kind == "udp" {
				udpP50 = p50
			} else if udpP50 > 0 {
				b.ReportMetric(float64(p50)/float64(udpP50), "p50/udp")
			}
		})
	}
}

// pingPong times n round trips of a 64 B datagram from a to the group,
// answered by b, each side spinning on TryReadBatch on a thread of its
// own; it returns the round trips sorted.
func pingPong(a, b transport.Transport, n int) []time.Duration {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
		for i := 0; i < n; {
			if k, err := b.TryReadBatch(bufs, sizes, nil); err != nil {
				return
			} else if k > 0 {
				_, _ = b.WriteBatch([][]byte{bufs[0][:sizes[0]]}, nil)
				i++
			}
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	msg := [][]byte{make([]byte, 64)}
	rtts := make([]time.Duration, 0, n)
	deadline := time.Now().Add(time.Minute)
	for range n {
		t0 := time.Now()
		if _, err := a.WriteBatch(msg, []netip.AddrPort{{}}); err != nil {
			break
		}
		for {
			if k, err := a.TryReadBatch(bufs, sizes, nil); err != nil || k > 0 || time.Now().After(deadline) {
				break
			}
		}
		rtts = append(rtts, time.Since(t0))
	}
	_ = b.Close() // ends the answering side if a round trip was lost
	<-done
	slices.Sort(rtts)
	return rtts
}
