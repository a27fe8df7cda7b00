package ebpf

import (
	"net"
	"net/netip"
)

// BuildTestFrame builds the frame a transport from src (MAC, address, port)
// to group sends for payload, for tests outside the package.
func BuildTestFrame(mac net.HardwareAddr, src, group netip.AddrPort, payload []byte) []byte {
	t, err := newFrameTemplate(mac, src, group, 1)
	if err != nil {
		panic(err)
	}
	b := make([]byte, t.headerLen()+len(payload))
	t.build(b, payload, 1)
	return b
}
