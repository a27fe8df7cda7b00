package transport_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/nakcast/nakcast/engine/transport"
	"golang.org/x/net/ipv4"
)

const benchBatch, benchSize = 16, 1024

// BenchmarkBatchRoundTrip compares the two ways of doing recvmmsg/sendmmsg:
// this package's preallocated headers and golang.org/x/net/ipv4's
// ReadBatch/WriteBatch with reused Message slices. One op is one batch of
// 16 unicast datagrams of 1 KiB written and read back on loopback. x/net's
// ReadBatch allocates a *net.UDPAddr and its IP for every datagram read
// (internal/socket parseInetAddr), so it shows 2 allocs per datagram.
func BenchmarkBatchRoundTrip(b *testing.B) {
	b.Run("transport", func(b *testing.B) {
		a, err := transport.Open(transport.Config{Group: group(30), SendOnly: false, BatchSize: benchBatch})
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		r, err := transport.Open(transport.Config{Group: a.Group(), BatchSize: benchBatch})
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		out := numbered(0, benchBatch, benchSize)
		dsts := make([]netip.AddrPort, benchBatch)
		for i := range dsts {
			dsts[i] = r.LocalAddr()
		}
		in := newBatch(benchBatch, 2048)
		b.ReportAllocs()
		b.SetBytes(benchBatch * benchSize)
		for b.Loop() {
			if _, err := a.WriteBatch(out, dsts); err != nil {
				b.Fatal(err)
			}
			for got := 0; got < benchBatch; {
				n, err := r.ReadBatch(in.bufs[got:], in.sizes[got:], in.srcs[got:])
				if err != nil {
					b.Fatal(err)
				}
				got += n
			}
		}
	})
	b.Run("xnet", func(b *testing.B) {
		lc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		defer lc.Close()
		rc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		defer rc.Close()
		for _, c := range []*net.UDPConn{lc, rc} {
			_ = c.SetReadBuffer(transport.DefaultBufferSize)
			_ = c.SetWriteBuffer(transport.DefaultBufferSize)
		}
		ap, rp := ipv4.NewPacketConn(lc), ipv4.NewPacketConn(rc)
		dst := rc.LocalAddr()
		out := make([]ipv4.Message, benchBatch)
		for i, buf := range numbered(0, benchBatch, benchSize) {
			out[i] = ipv4.Message{Buffers: [][]byte{buf}, Addr: dst}
		}
		in := make([]ipv4.Message, benchBatch)
		for i := range in {
			in[i].Buffers = [][]byte{make([]byte, 2048)}
		}
		b.ReportAllocs()
		b.SetBytes(benchBatch * benchSize)
		for b.Loop() {
			for sent := 0; sent < benchBatch; {
				n, err := ap.WriteBatch(out[sent:], 0)
				if err != nil {
					b.Fatal(err)
				}
				sent += n
			}
			for got := 0; got < benchBatch; {
				n, err := rp.ReadBatch(in[got:], 0)
				if err != nil {
					b.Fatal(err)
				}
				got += n
			}
		}
	})
}
