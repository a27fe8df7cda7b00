package wireshark

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"
)

// Classic pcap (not pcapng): a 24-byte file header, then per frame a 16-byte
// record header and the frame's bytes. Microsecond timestamps, little-endian.
const (
	pcapMagic        = 0xa1b2c3d4
	linkTypeEthernet = 1
	// DefaultSnapLen is the snapshot length written when none is given: large
	// enough for any UDP datagram in one Ethernet frame, GSO or not.
	DefaultSnapLen = 262144
)

// Sizes of the framing WriteUDP puts before a UDP payload.
const (
	EthernetLen = 14
	IPv4Len     = 20
	UDPLen      = 8
	// MaxUDPPayload is the largest payload WriteUDP frames (IPv4 total
	// length is 16 bits).
	MaxUDPPayload = 65535 - IPv4Len - UDPLen
)

// PcapWriter writes a pcap capture file of Ethernet frames. It is not safe
// for concurrent use.
type PcapWriter struct {
	w    *bufio.Writer
	snap int
	ipID uint16
	rec  [16]byte
}

// NewPcapWriter writes the file header to w and returns a writer that keeps
// at most snapLen bytes of each frame (0: DefaultSnapLen). Call Flush before
// closing w.
func NewPcapWriter(w io.Writer, snapLen int) (*PcapWriter, error) {
	if snapLen <= 0 {
		snapLen = DefaultSnapLen
	}
	p := &PcapWriter{w: bufio.NewWriterSize(w, 1<<16), snap: snapLen}
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], pcapMagic)
	binary.LittleEndian.PutUint16(h[4:], 2) // version 2.4
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], uint32(snapLen))
	binary.LittleEndian.PutUint32(h[20:], linkTypeEthernet)
	if _, err := p.w.Write(h[:]); err != nil {
		return nil, err
	}
	return p, nil
}

// WriteFrame records an Ethernet frame seen at ts whose length on the wire
// was origLen (at least len(frame); less is taken as len(frame)). Bytes
// beyond the snapshot length are not written.
func (p *PcapWriter) WriteFrame(ts time.Time, frame []byte, origLen int) error {
	origLen = max(origLen, len(frame))
	if len(frame) > p.snap {
		frame = frame[:p.snap]
	}
	us := ts.UnixMicro()
	binary.LittleEndian.PutUint32(p.rec[0:], uint32(us/1e6))
	binary.LittleEndian.PutUint32(p.rec[4:], uint32(us%1e6))
	binary.LittleEndian.PutUint32(p.rec[8:], uint32(len(frame)))
	binary.LittleEndian.PutUint32(p.rec[12:], uint32(origLen))
	if _, err := p.w.Write(p.rec[:]); err != nil {
		return err
	}
	_, err := p.w.Write(frame)
	return err
}

// WriteUDP records an IPv4 UDP datagram from src to dst carrying payload,
// framed in Ethernet (a multicast destination gets its multicast MAC). The
// UDP checksum is 0 (none). captured, if at least 0 and below the frame's
// length, cuts the recorded frame there, as a capture with a short snapshot
// length would.
func (p *PcapWriter) WriteUDP(ts time.Time, src, dst netip.AddrPort, payload []byte, captured int) error {
	frame, err := p.udpFrame(src, dst, payload)
	if err != nil {
		return err
	}
	n := len(frame)
	if captured >= 0 && captured < n {
		frame = frame[:captured]
	}
	return p.WriteFrame(ts, frame, n)
}

func (p *PcapWriter) udpFrame(src, dst netip.AddrPort, payload []byte) ([]byte, error) {
	if !src.Addr().Is4() || !dst.Addr().Is4() {
		return nil, errors.New("wireshark: WriteUDP frames IPv4 only")
	}
	if len(payload) > MaxUDPPayload {
		return nil, fmt.Errorf("wireshark: UDP payload of %d bytes (at most %d)", len(payload), MaxUDPPayload)
	}
	f := make([]byte, EthernetLen+IPv4Len+UDPLen+len(payload))
	PutEthernet(f, src.Addr(), dst.Addr())
	ip := f[EthernetLen:]
	p.ipID++
	PutIPv4UDP(ip, src.Addr(), dst.Addr(), p.ipID, UDPLen+len(payload))
	u := ip[IPv4Len:]
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(UDPLen+len(payload)))
	copy(u[UDPLen:], payload)
	return f, nil
}

// PutEthernet writes an Ethernet II header for IPv4 from src to dst at
// f[:EthernetLen]: a multicast dst maps to 01:00:5e and its low 23 bits,
// other addresses to locally administered MACs 02:00 and the address.
func PutEthernet(f []byte, src, dst netip.Addr) {
	d, s := dst.As4(), src.As4()
	if dst.IsMulticast() {
		copy(f[0:6], []byte{0x01, 0x00, 0x5e, d[1] & 0x7f, d[2], d[3]})
	} else {
		copy(f[0:6], []byte{0x02, 0x00, d[0], d[1], d[2], d[3]})
	}
	copy(f[6:12], []byte{0x02, 0x00, s[0], s[1], s[2], s[3]})
	binary.BigEndian.PutUint16(f[12:], 0x0800)
}

// PutIPv4UDP writes a 20-byte IPv4 header for a UDP packet of udpLen bytes
// (UDP header included) from src to dst at ip, with TTL 1 and its checksum.
func PutIPv4UDP(ip []byte, src, dst netip.Addr, id uint16, udpLen int) {
	s, d := src.As4(), dst.As4()
	ip[0] = 0x45
	ip[1] = 0
	binary.BigEndian.PutUint16(ip[2:], uint16(IPv4Len+udpLen))
	binary.BigEndian.PutUint16(ip[4:], id)
	binary.BigEndian.PutUint16(ip[6:], 0)
	ip[8] = 1
	ip[9] = 17
	binary.BigEndian.PutUint16(ip[10:], 0)
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip[:IPv4Len]))
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// Flush writes buffered records to the underlying writer.
func (p *PcapWriter) Flush() error { return p.w.Flush() }
