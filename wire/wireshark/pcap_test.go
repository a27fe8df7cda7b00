package wireshark

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPcapWriterFramesUDP(t *testing.T) {
	var out bytes.Buffer
	w, err := NewPcapWriter(&out, 0)
	require.NoError(t, err)
	src := netip.MustParseAddrPort("10.199.0.2:40000")
	dst := netip.MustParseAddrPort("239.77.1.1:45600")
	payload := []byte("nakcast")
	ts := time.Unix(1700000000, 123456000)
	require.NoError(t, w.WriteUDP(ts, src, dst, payload, -1))
	require.NoError(t, w.WriteUDP(ts, src, dst, payload, 20))
	require.NoError(t, w.Flush())
	b := out.Bytes()
	require.Equal(t, uint32(pcapMagic), binary.LittleEndian.Uint32(b))
	require.Equal(t, uint32(linkTypeEthernet), binary.LittleEndian.Uint32(b[20:]))
	rec := b[24:]
	n := EthernetLen + IPv4Len + UDPLen + len(payload)
	require.Equal(t, []uint32{1700000000, 123456, uint32(n), uint32(n)},
		[]uint32{binary.LittleEndian.Uint32(rec), binary.LittleEndian.Uint32(rec[4:]),
			binary.LittleEndian.Uint32(rec[8:]), binary.LittleEndian.Uint32(rec[12:])})
	f := rec[16 : 16+n]
	require.Equal(t, []byte{0x01, 0x00, 0x5e, 0x4d, 0x01, 0x01}, f[:6], "multicast MAC of 239.77.1.1")
	ip := f[EthernetLen:]
	require.Equal(t, uint16(0), ipChecksum(ip[:IPv4Len]), "IPv4 header checksum")
	require.Equal(t, []byte{10, 199, 0, 2, 239, 77, 1, 1}, ip[12:20])
	udp := ip[IPv4Len:]
	require.Equal(t, []uint16{40000, 45600, uint16(UDPLen + len(payload))},
		[]uint16{binary.BigEndian.Uint16(udp), binary.BigEndian.Uint16(udp[2:]), binary.BigEndian.Uint16(udp[4:])})
	require.Equal(t, payload, udp[UDPLen:])
	rec = rec[16+n:]
	require.Equal(t, []uint32{20, uint32(n)}, []uint32{binary.LittleEndian.Uint32(rec[8:]), binary.LittleEndian.Uint32(rec[12:])},
		"a short capture records 20 bytes of the frame and its full length")
	require.Len(t, rec, 16+20)
}
