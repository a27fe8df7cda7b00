package auth

import (
	"fmt"
	"testing"

	"github.com/nakcast/nakcast/wire"
)

// BenchmarkSealOpen measures sealing and verifying one datagram of 64 KB
// (the loopback's) and of 1 KB, signed and encrypted; SetBytes makes the
// figure a throughput, which the engine's cost per message follows from.
func BenchmarkSealOpen(b *testing.B) {
	r := ring(b, key(b, 1, 32, 1))
	for _, size := range []int{1 << 10, 64000} {
		buf, n := bundle(b, alice, 1, size-wire.DataOverhead-wire.MsgOverhead-wire.TrailerLen)
		for _, mode := range modes {
			s := NewSealer(r, ProcessNonces(), mode.encrypt)
			out := make([]byte, n+wire.TrailerLen)
			sealOnce := func() []byte {
				if mode.encrypt {
					d, _ := s.Encrypt(out, buf[:n], PathGroup)
					return d
				}
				d, _ := s.Sign(buf, n, PathGroup)
				return d
			}
			b.Run(fmt.Sprintf("seal/%s/%dB", mode.name, size), func(b *testing.B) {
				b.SetBytes(int64(n))
				b.ReportAllocs()
				for b.Loop() {
					sealOnce()
				}
			})
			v := NewVerifier(r)
			b.Run(fmt.Sprintf("open/%s/%dB", mode.name, size), func(b *testing.B) {
				b.SetBytes(int64(n))
				b.ReportAllocs()
				for b.Loop() {
					if v.Open(sealOnce(), at(0)) != OK {
						b.Fatal("open failed")
					}
				}
			})
		}
	}
}
