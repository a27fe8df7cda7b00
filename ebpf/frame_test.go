package ebpf

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	testMAC    = net.HardwareAddr{0x02, 0x11, 0x22, 0x33, 0x44, 0x55}
	testSrc4   = netip.MustParseAddrPort("10.199.0.1:40001")
	testGroup4 = netip.MustParseAddrPort("239.77.1.1:45600")
	testSrc6   = netip.MustParseAddrPort("[fd00:199::1]:40001")
	testGroup6 = netip.MustParseAddrPort("[ff12::7:1]:45600")
)

// refChecksum is the textbook Internet checksum: 16-bit big-endian words
// summed with end-around carry, complemented.
func refChecksum(parts ...[]byte) uint16 {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	if len(b)%2 == 1 {
		b = append(b, 0)
	}
	var s uint32
	for i := 0; i < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
		s = (s & 0xffff) + (s >> 16)
	}
	return ^uint16(s)
}

// refUDPChecksum recomputes a frame's UDP checksum from scratch (0 when
// the stored one is right, as a receiver checks it).
func refUDPChecksum(t *testing.T, f []byte) uint16 {
	t.Helper()
	var pseudo, seg []byte
	switch binary.BigEndian.Uint16(f[12:]) {
	case etherTypeIPv4:
		ip := f[ethLen:]
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		seg = ip[ipv4Len:tot]
		pseudo = append(append([]byte{}, ip[12:20]...), 0, protoUDP, byte(len(seg)>>8), byte(len(seg)))
	case etherTypeIPv6:
		ip := f[ethLen:]
		pl := int(binary.BigEndian.Uint16(ip[4:]))
		seg = ip[ipv6Len : ipv6Len+pl]
		pseudo = append(append([]byte{}, ip[8:40]...), 0, 0, byte(len(seg)>>8), byte(len(seg)), 0, 0, 0, protoUDP)
	default:
		t.Fatalf("not IP")
	}
	return refChecksum(pseudo, seg)
}

func TestGroupMAC(t *testing.T) {
	require.Equal(t, [6]byte{0x01, 0x00, 0x5e, 0x4d, 0x01, 0x01}, GroupMAC(netip.MustParseAddr("239.77.1.1")))
	// The top bit of the second byte does not map (23 bits).
	require.Equal(t, [6]byte{0x01, 0x00, 0x5e, 0x7f, 0xff, 0xfe}, GroupMAC(netip.MustParseAddr("239.255.255.254")))
	require.Equal(t, [6]byte{0x33, 0x33, 0x00, 0x07, 0x00, 0x01}, GroupMAC(netip.MustParseAddr("ff12::7:1")))
}

func TestFrameBuildParse(t *testing.T) {
	for _, tc := range []struct {
		name       string
		src, group netip.AddrPort
	}{
		{"IPv4", testSrc4, testGroup4},
		{"IPv6", testSrc6, testGroup6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := newFrameTemplate(testMAC, tc.src, tc.group, 1)
			require.NoError(t, err)
			buf := make([]byte, 2048)
			for _, size := range []int{0, 1, 7, 64, 1471, 1472} {
				payload := make([]byte, size)
				for i := range payload {
					payload[i] = byte(i*7 + size)
				}
				n := tmpl.build(buf, payload, uint16(size*3))
				require.Equal(t, tmpl.headerLen()+size, n)
				f := buf[:n]
				mac := GroupMAC(tc.group.Addr())
				require.Equal(t, mac[:], f[0:6])
				require.Equal(t, []byte(testMAC), f[6:12])
				if tc.group.Addr().Is4() {
					require.Zero(t, refChecksum(f[ethLen:ethLen+ipv4Len]), "IPv4 header checksum")
					require.Equal(t, uint16(size*3), binary.BigEndian.Uint16(f[ethLen+4:]), "IPv4 ID")
					require.Equal(t, byte(1), f[ethLen+8], "TTL")
				} else {
					require.Equal(t, byte(1), f[ethLen+7], "hop limit")
				}
				require.Zero(t, refUDPChecksum(t, f), "UDP checksum, size %d", size)
				p, ferr := parseFrame(f, tc.group)
				require.Equal(t, frameOK, ferr)
				require.Equal(t, tc.src, p.src)
				require.Equal(t, payload, f[p.off:p.off+p.n])
			}
			require.Zero(t, tmpl.build(buf[:tmpl.headerLen()+9], make([]byte, 10), 0), "too short a buffer")
		})
	}
}

func TestFrameTemplateRefuses(t *testing.T) {
	for _, tc := range []struct {
		name       string
		mac        net.HardwareAddr
		src, group netip.AddrPort
		ttl        int
	}{
		{"short MAC", testMAC[:4], testSrc4, testGroup4, 1},
		{"family mismatch", testMAC, testSrc6, testGroup4, 1},
		{"unicast group", testMAC, testSrc4, testSrc4, 1},
		{"TTL", testMAC, testSrc4, testGroup4, 256},
	} {
		_, err := newFrameTemplate(tc.mac, tc.src, tc.group, tc.ttl)
		require.ErrorIs(t, err, errFrameTemplate, tc.name)
	}
}

// TestFrameParseRefuses: every kind of damage is a counted refusal, never
// a panic or a payload outside the frame.
func TestFrameParseRefuses(t *testing.T) {
	tmpl, err := newFrameTemplate(testMAC, testSrc4, testGroup4, 1)
	require.NoError(t, err)
	good := make([]byte, 2048)
	good = good[:tmpl.build(good, []byte("hello, group"), 9)]
	tmpl6, err := newFrameTemplate(testMAC, testSrc6, testGroup6, 1)
	require.NoError(t, err)
	good6 := make([]byte, 2048)
	good6 = good6[:tmpl6.build(good6, []byte("hello, group"), 9)]
	mod := func(f []byte, edit func(b []byte)) []byte {
		b := append([]byte(nil), f...)
		edit(b)
		return b
	}
	for _, tc := range []struct {
		name  string
		frame []byte
		group netip.AddrPort
		want  frameError
	}{
		{"empty", nil, testGroup4, frameMalformed},
		{"short", good[:hdrLen4-1], testGroup4, frameMalformed},
		{"truncated payload", good[:len(good)-1], testGroup4, frameMalformed},
		{"ARP", mod(good, func(b []byte) { b[12], b[13] = 0x08, 0x06 }), testGroup4, frameMalformed},
		{"IP version", mod(good, func(b []byte) { b[ethLen] = 0x65 }), testGroup4, frameMalformed},
		{"IHL 4", mod(good, func(b []byte) { b[ethLen] = 0x44 }), testGroup4, frameMalformed},
		{"header checksum", mod(good, func(b []byte) { b[ethLen+10]++ }), testGroup4, frameMalformed},
		{"TCP", mod(good, func(b []byte) { b[ethLen+9] = 6 }), testGroup4, frameMalformed},
		{"more fragments", mod(good, func(b []byte) { b[ethLen+6] |= 0x20 }), testGroup4, frameMalformed},
		{"UDP length long", mod(good, func(b []byte) { b[ethLen+ipv4Len+5] += 1 }), testGroup4, frameMalformed},
		{"UDP length short", mod(good, func(b []byte) { b[ethLen+ipv4Len+4], b[ethLen+ipv4Len+5] = 0, 7 }), testGroup4, frameMalformed},
		{"multicast source", mod(good, func(b []byte) { b[ethLen+12] = 239 }), testGroup4, frameMalformed},
		{"other group", good, netip.MustParseAddrPort("239.77.1.2:45600"), frameForeign},
		{"other port", good, netip.MustParseAddrPort("239.77.1.1:45601"), frameForeign},
		{"IPv6 short", good6[:hdrLen6-1], testGroup6, frameMalformed},
		{"IPv6 next header", mod(good6, func(b []byte) { b[ethLen+6] = 0 }), testGroup6, frameMalformed},
		{"IPv6 payload length", mod(good6, func(b []byte) { b[ethLen+5]++ }), testGroup6, frameMalformed},
		{"IPv6 other group", good6, netip.MustParseAddrPort("[ff12::7:2]:45600"), frameForeign},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ferr := parseFrame(tc.frame, tc.group)
			require.Equal(t, tc.want, ferr)
		})
	}
	// Ethernet padding after the datagram (a short frame padded to 60
	// bytes) is not part of it.
	small := make([]byte, 128)
	n := tmpl.build(small, []byte{1, 2}, 0)
	p, ferr := parseFrame(small[:max(n, 60)], testGroup4)
	require.Equal(t, frameOK, ferr)
	require.Equal(t, 2, p.n)
}

func TestFrameNoAllocs(t *testing.T) {
	tmpl, err := newFrameTemplate(testMAC, testSrc4, testGroup4, 1)
	require.NoError(t, err)
	buf := make([]byte, 2048)
	payload := make([]byte, 1400)
	var sink int
	allocs := testing.AllocsPerRun(1000, func() {
		n := tmpl.build(buf, payload, 1)
		p, _ := parseFrame(buf[:n], testGroup4)
		sink += p.n
	})
	require.Zero(t, allocs)
	require.NotZero(t, sink)
}

// FuzzParseFrame: any bytes give a refusal or a payload inside the frame
// whose source and group are what the headers say.
func FuzzParseFrame(f *testing.F) {
	tmpl, _ := newFrameTemplate(testMAC, testSrc4, testGroup4, 1)
	tmpl6, _ := newFrameTemplate(testMAC, testSrc6, testGroup6, 1)
	buf := make([]byte, 256)
	f.Add(append([]byte(nil), buf[:tmpl.build(buf, []byte("seed payload"), 1)]...), false)
	f.Add(append([]byte(nil), buf[:tmpl6.build(buf, []byte("seed payload"), 1)]...), true)
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, frame []byte, v6 bool) {
		group := testGroup4
		if v6 {
			group = testGroup6
		}
		p, ferr := parseFrame(frame, group)
		if ferr != frameOK {
			return
		}
		if p.off < hdrLen4 || p.n < 0 || p.off+p.n > len(frame) {
			t.Fatalf("payload [%d:%d] outside a %d byte frame", p.off, p.off+p.n, len(frame))
		}
		if p.src.Addr().Is4() != group.Addr().Is4() || p.src.Addr().IsMulticast() {
			t.Fatalf("source %v for group %v", p.src, group)
		}
	})
}

// FuzzFrameRoundTrip: every frame built parses back to its payload and
// source, with valid checksums.
func FuzzFrameRoundTrip(f *testing.F) {
	f.Add([]byte("payload"), uint16(40001), uint16(45600), uint16(7), false)
	f.Add([]byte{}, uint16(1), uint16(65535), uint16(0xffff), true)
	f.Add([]byte{0xff, 0xff, 0xff}, uint16(0), uint16(1), uint16(0), false)
	buf := make([]byte, 4096)
	f.Fuzz(func(t *testing.T, payload []byte, sport, gport, id uint16, v6 bool) {
		if len(payload) > 3000 || gport == 0 {
			return
		}
		src, group := netip.AddrPortFrom(testSrc4.Addr(), sport), netip.AddrPortFrom(testGroup4.Addr(), gport)
		if v6 {
			src, group = netip.AddrPortFrom(testSrc6.Addr(), sport), netip.AddrPortFrom(testGroup6.Addr(), gport)
		}
		tmpl, err := newFrameTemplate(testMAC, src, group, 1)
		if err != nil {
			t.Fatal(err)
		}
		n := tmpl.build(buf, payload, id)
		if n != tmpl.headerLen()+len(payload) {
			t.Fatalf("built %d bytes for a %d byte payload", n, len(payload))
		}
		if c := refUDPChecksum(t, buf[:n]); c != 0 {
			t.Fatalf("UDP checksum off by %#x", c)
		}
		p, ferr := parseFrame(buf[:n], group)
		if ferr != frameOK || p.src != src || string(buf[p.off:p.off+p.n]) != string(payload) {
			t.Fatalf("parsed %v %+v, want the payload from %v", ferr, p, src)
		}
	})
}

func BenchmarkFrameBuild(b *testing.B) {
	for _, size := range []int{64, 1472} {
		b.Run(byteSize(size), func(b *testing.B) {
			tmpl, _ := newFrameTemplate(testMAC, testSrc4, testGroup4, 1)
			buf := make([]byte, 2048)
			payload := make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				tmpl.build(buf, payload, uint16(i))
			}
		})
	}
}

func BenchmarkFrameParse(b *testing.B) {
	tmpl, _ := newFrameTemplate(testMAC, testSrc4, testGroup4, 1)
	buf := make([]byte, 2048)
	n := tmpl.build(buf, make([]byte, 1472), 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseFrame(buf[:n], testGroup4); err != frameOK {
			b.Fatal(err)
		}
	}
}

func byteSize(n int) string { return fmt.Sprintf("%dB", n) }
