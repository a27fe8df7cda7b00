package ebpf

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"net"
	"net/netip"
)

// Frame sizes.
const (
	ethLen  = 14
	ipv4Len = 20
	ipv6Len = 40
	udpLen  = 8
	// hdrLen4 and hdrLen6 are the headers in front of a payload.
	hdrLen4 = ethLen + ipv4Len + udpLen
	hdrLen6 = ethLen + ipv6Len + udpLen

	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	protoUDP      = 17
)

// GroupMAC is the Ethernet address a multicast group maps to: 01:00:5e and
// the low 23 bits of an IPv4 group (RFC 1112), 33:33 and the low 32 bits
// of an IPv6 group (RFC 2464).
func GroupMAC(group netip.Addr) [6]byte {
	if group.Is4() {
		a := group.As4()
		return [6]byte{0x01, 0x00, 0x5e, a[1] & 0x7f, a[2], a[3]}
	}
	a := group.As16()
	return [6]byte{0x33, 0x33, a[12], a[13], a[14], a[15]}
}

// frameTemplate builds the frames one transport sends: Ethernet, IPv4 or
// IPv6, UDP, from its source (interface MAC, unicast address and port) to
// its group. The fixed header bytes and the fixed part of both checksums
// are worked out once; a frame costs a copy of the payload and its sum.
type frameTemplate struct {
	hdr  [hdrLen6]byte
	hlen int
	v6   bool
	// ipSum is the IPv4 header's sum without its length and ID;
	// udpSum the UDP checksum's sum over the pseudo-header's addresses and
	// protocol and the ports, without the lengths and the payload.
	ipSum  uint32
	udpSum uint32
}

// errFrameTemplate is returned for addresses a frame cannot carry.
var errFrameTemplate = errors.New("ebpf: frame source and group must be of one family, the group a multicast address")

// newFrameTemplate returns the template of frames from src (MAC, unicast
// address and port) to group, with the given TTL (hop limit).
func newFrameTemplate(srcMAC net.HardwareAddr, src, group netip.AddrPort, ttl int) (frameTemplate, error) {
	var t frameTemplate
	if len(srcMAC) != 6 || src.Addr().Is4() != group.Addr().Is4() || !group.Addr().IsMulticast() ||
		src.Addr().Is4In6() || group.Addr().Is4In6() || ttl < 0 || ttl > 255 {
		return t, errFrameTemplate
	}
	dmac := GroupMAC(group.Addr())
	h := t.hdr[:]
	copy(h[0:6], dmac[:])
	copy(h[6:12], srcMAC)
	t.v6 = !group.Addr().Is4()
	var u []byte
	if !t.v6 {
		t.hlen = hdrLen4
		binary.BigEndian.PutUint16(h[12:], etherTypeIPv4)
		ip := h[ethLen : ethLen+ipv4Len]
		ip[0] = 0x45
		ip[6] = 0x40 // don't fragment: a frame never exceeds the MTU
		ip[8] = byte(ttl)
		ip[9] = protoUDP
		s, g := src.Addr().As4(), group.Addr().As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], g[:])
		t.ipSum = sum16(ip, 0)
		t.udpSum = sum16(ip[12:20], protoUDP)
		u = h[ethLen+ipv4Len : hdrLen4]
	} else {
		t.hlen = hdrLen6
		binary.BigEndian.PutUint16(h[12:], etherTypeIPv6)
		ip := h[ethLen : ethLen+ipv6Len]
		ip[0] = 0x60
		ip[6] = protoUDP
		ip[7] = byte(ttl)
		s, g := src.Addr().As16(), group.Addr().As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], g[:])
		t.udpSum = sum16(ip[8:40], protoUDP)
		u = h[ethLen+ipv6Len : hdrLen6]
	}
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], group.Port())
	t.udpSum = sum16(u[0:4], t.udpSum)
	return t, nil
}

// headerLen is the length of the headers in front of the payload.
func (t *frameTemplate) headerLen() int { return t.hlen }

// build writes the frame carrying payload into dst, with IPv4 ID id, and
// returns its length, or 0 when dst is too short. It does not allocate.
func (t *frameTemplate) build(dst, payload []byte, id uint16) int {
	n := t.hlen + len(payload)
	if n > len(dst) || len(payload) > 0xffff-ipv6Len-udpLen {
		return 0
	}
	copy(dst, t.hdr[:t.hlen])
	copy(dst[t.hlen:n], payload)
	ulen := uint32(udpLen + len(payload))
	var u []byte
	if !t.v6 {
		ip := dst[ethLen : ethLen+ipv4Len]
		tot := uint32(ipv4Len) + ulen
		binary.BigEndian.PutUint16(ip[2:], uint16(tot))
		binary.BigEndian.PutUint16(ip[4:], id)
		binary.BigEndian.PutUint16(ip[10:], ^fold(t.ipSum+tot+uint32(id)))
		u = dst[ethLen+ipv4Len : n]
	} else {
		binary.BigEndian.PutUint16(dst[ethLen+4:], uint16(ulen))
		u = dst[ethLen+ipv6Len : n]
	}
	binary.BigEndian.PutUint16(u[4:], uint16(ulen))
	// The length counts twice: in the pseudo-header and in the UDP header.
	c := ^fold(sum16(payload, t.udpSum+2*ulen))
	if c == 0 {
		c = 0xffff // 0 means "no checksum" (IPv4) or is invalid (IPv6)
	}
	binary.BigEndian.PutUint16(u[6:], c)
	return n
}

// frameError says why a received frame was refused.
type frameError uint8

const (
	frameOK frameError = iota
	// frameMalformed: too short, inconsistent lengths, a bad IPv4 header
	// checksum, a fragment, or not IPv4/IPv6 UDP.
	frameMalformed
	// frameForeign: a well-formed UDP frame for another group or port
	// (the XDP program lets through only the group's, so this is rare).
	frameForeign
)

// parsedFrame locates a received datagram inside its frame.
type parsedFrame struct {
	off, n int // payload frame[off:off+n]
	src    netip.AddrPort
}

// parseFrame checks that frame is an Ethernet frame carrying an
// unfragmented UDP datagram to group and locates its payload. It does not
// allocate. The UDP checksum is not verified: a datagram sent by a socket
// over a veth pair carries a partial checksum (checksum offload), which
// only the receiving stack completes. The IPv4 header checksum is.
func parseFrame(frame []byte, group netip.AddrPort) (parsedFrame, frameError) {
	var p parsedFrame
	if len(frame) < hdrLen4 {
		return p, frameMalformed
	}
	var u []byte
	var dst netip.Addr
	switch binary.BigEndian.Uint16(frame[12:]) {
	case etherTypeIPv4:
		ip := frame[ethLen:]
		ihl := int(ip[0]&0x0f) * 4
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		switch {
		case ip[0]>>4 != 4 || ihl < ipv4Len || tot < ihl+udpLen || tot > len(ip):
			return p, frameMalformed
		case ip[9] != protoUDP || binary.BigEndian.Uint16(ip[6:])&0x3fff != 0: // MF or an offset
			return p, frameMalformed
		case fold(sum16(ip[:ihl], 0)) != 0xffff:
			return p, frameMalformed
		}
		p.src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), 0)
		dst = netip.AddrFrom4([4]byte(ip[16:20]))
		u = ip[ihl:tot]
		p.off = ethLen + ihl + udpLen
	case etherTypeIPv6:
		if len(frame) < hdrLen6 {
			return p, frameMalformed
		}
		ip := frame[ethLen:]
		pl := int(binary.BigEndian.Uint16(ip[4:]))
		if ip[0]>>4 != 6 || ip[6] != protoUDP || pl < udpLen || ipv6Len+pl > len(ip) {
			return p, frameMalformed
		}
		p.src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip[8:24])), 0)
		dst = netip.AddrFrom16([16]byte(ip[24:40]))
		u = ip[ipv6Len : ipv6Len+pl]
		p.off = ethLen + ipv6Len + udpLen
	default:
		return p, frameMalformed
	}
	ulen := int(binary.BigEndian.Uint16(u[4:]))
	if ulen < udpLen || ulen > len(u) {
		return p, frameMalformed
	}
	if sa := p.src.Addr(); sa.IsMulticast() || sa.IsUnspecified() {
		return p, frameMalformed
	}
	if dst != group.Addr() || binary.BigEndian.Uint16(u[2:]) != group.Port() {
		return p, frameForeign
	}
	p.src = netip.AddrPortFrom(p.src.Addr(), binary.BigEndian.Uint16(u[0:]))
	p.n = ulen - udpLen
	return p, frameOK
}

// sum16 adds b, as big-endian 16-bit words (an odd last byte padded with
// zero), to the one's complement sum acc and returns the sum folded to 16
// bits. It adds 64-bit words with end-around carry, four a step: 2^64-1 is
// a multiple of 2^16-1, so the folded result is the same.
func sum16(b []byte, acc uint32) uint32 {
	s, c := uint64(acc), uint64(0)
	for len(b) >= 32 {
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[8:]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[16:]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[24:]), c)
		b = b[32:]
	}
	for len(b) >= 8 {
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b), c)
		b = b[8:]
	}
	s, c = bits.Add64(s, c, 0)
	s += c
	var tail uint64
	if len(b) >= 4 {
		tail = uint64(binary.BigEndian.Uint32(b)) << 32
		b = b[4:]
	}
	if len(b) >= 2 {
		tail |= uint64(binary.BigEndian.Uint16(b)) << 16
		b = b[2:]
	}
	if len(b) == 1 {
		tail |= uint64(b[0]) << 8
	}
	s, c = bits.Add64(s, tail, 0)
	s += c
	t := (s >> 32) + (s & 0xffffffff)
	t = (t >> 32) + (t & 0xffffffff)
	return uint32(fold(uint32(t>>16) + uint32(t&0xffff)))
}

// fold folds a 32-bit one's complement sum to 16 bits.
func fold(s uint32) uint16 {
	s = (s >> 16) + (s & 0xffff)
	s = (s >> 16) + (s & 0xffff)
	return uint16(s)
}
