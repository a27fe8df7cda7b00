package transport

import (
	"encoding/binary"
	"net/netip"

	"golang.org/x/sys/unix"
)

// GSO bounds: segments in one message (the kernel's UDP_MAX_SEGMENTS is 64
// on older kernels, 128 since 5.x) and the UDP payload of the whole run
// (IPv4's limit; IPv6's is larger).
const (
	maxGSOSegments = 64
	maxGSOBytes    = 65507
)

// gsoCmsgSpace is the room of one UDP_SEGMENT control message (a uint16).
var gsoCmsgSpace = unix.CmsgSpace(2)

// gsoRun returns how many datagrams of bufs from index j go to the kernel
// as one message: with gso, the run of consecutive datagrams to j's
// destination, all of bufs[j]'s length but a shorter last one, within the
// kernel's bounds and the room (iovecs) left; else 1.
func gsoRun(bufs [][]byte, dsts []netip.AddrPort, group netip.AddrPort, j, room int, gso bool) int {
	seg := len(bufs[j])
	if !gso || seg == 0 {
		return 1
	}
	k, total := 1, seg
	for k < maxGSOSegments && k < room && j+k < len(bufs) {
		n := len(bufs[j+k])
		if n == 0 || n > seg || total+n > maxGSOBytes || !sameDst(dsts, group, j, j+k) {
			break
		}
		total += n
		k++
		if n < seg {
			break // a shorter datagram ends the run
		}
	}
	return k
}

// setSegment gives header cnt, a run of k datagrams of seg bytes, its
// UDP_SEGMENT control message (none for a single datagram).
func (w *writer) setSegment(cnt, k, seg int) {
	h := &w.hdrs[cnt].Hdr
	if k > 1 {
		c := w.ctrl[cnt*gsoCmsgSpace : (cnt+1)*gsoCmsgSpace]
		binary.NativeEndian.PutUint16(c[unix.CmsgLen(0):], uint16(seg))
		h.Control = &c[0]
		h.SetControllen(gsoCmsgSpace)
	} else {
		h.Control = nil
		h.SetControllen(0)
	}
	w.segs[cnt] = k
}

// sameDst reports whether datagrams a and b of a batch go to the same
// destination (a missing or invalid destination, or the group, is the
// group).
func sameDst(dsts []netip.AddrPort, group netip.AddrPort, a, b int) bool {
	da, db := group, group
	if a < len(dsts) && dsts[a].IsValid() {
		da = dsts[a]
	}
	if b < len(dsts) && dsts[b].IsValid() {
		db = dsts[b]
	}
	return da == db
}
