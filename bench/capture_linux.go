package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nakcast/nakcast/wire/wireshark"
)

// Capture records the frames of one interface in a network namespace into
// a pcap file: an AF_PACKET socket opened inside the namespace, read by a
// goroutine of this process until Stop. UDP segmentation offload
// super-packets (what the engine sends with GSO, seen before the kernel
// splits them) are written as the datagrams they carry, so a capture shows
// what a receiver's socket gets.
type Capture struct {
	f    *os.File // the packet socket, in the runtime's poller
	out  *os.File
	w    *wireshark.PcapWriter
	done chan error

	stats CaptureStats // the reading goroutine's until done
}

// virtio_net_hdr, which PACKET_VNET_HDR puts before every frame.
const (
	vnetHdrLen      = 10
	vnetNeedsCsum   = 1
	vnetGSOUDPL4    = 5
	captureReadSize = 256 << 10
)

// StartCapture opens a capture of iface in namespace netns (a name under
// /run/netns, as ip netns makes them) into a new pcap file at path, keeping
// at most snapLen bytes of each frame (0: all).
func StartCapture(netns, iface, path string, snapLen int) (*Capture, error) {
	fd, err := packetSocketIn(netns, iface)
	if err != nil {
		return nil, fmt.Errorf("bench: capture %s in %s: %w", iface, netns, err)
	}
	f := os.NewFile(uintptr(fd), "packet:"+netns+":"+iface)
	if err := f.SetReadDeadline(time.Time{}); err != nil { // Stop needs a pollable socket
		f.Close()
		return nil, fmt.Errorf("bench: capture %s in %s: %w", iface, netns, err)
	}
	out, err := os.Create(path)
	if err != nil {
		f.Close()
		return nil, err
	}
	w, err := wireshark.NewPcapWriter(out, snapLen)
	if err != nil {
		f.Close()
		out.Close()
		return nil, err
	}
	c := &Capture{f: f, out: out, w: w, done: make(chan error, 1)}
	go func() { c.done <- c.read() }()
	return c, nil
}

// packetSocketIn opens a non-blocking AF_PACKET socket bound to iface
// inside namespace netns. A socket keeps the namespace it was made in, so
// only its creation runs on a thread moved into the namespace; the thread
// moves back, or, if it cannot, dies with its locked goroutine.
func packetSocketIn(netns, iface string) (int, error) {
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := func() (int, error) {
			self, err := os.Open("/proc/thread-self/ns/net")
			if err != nil {
				return -1, err
			}
			defer self.Close()
			target, err := os.Open(filepath.Join("/run/netns", netns))
			if err != nil {
				return -1, err
			}
			defer target.Close()
			if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
				return -1, fmt.Errorf("setns: %w", err)
			}
			fd, err := packetSocket(iface)
			if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
				if fd >= 0 {
					unix.Close(fd)
				}
				return -2, fmt.Errorf("setns back: %w", err) // the thread stays locked and exits
			}
			return fd, err
		}()
		if fd != -2 {
			runtime.UnlockOSThread()
		}
		ch <- result{fd, err}
	}()
	r := <-ch
	return r.fd, r.err
}

// packetSocket opens the socket in the calling thread's namespace.
func packetSocket(iface string) (int, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return -1, err
	}
	proto := htons(unix.ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return -1, err
	}
	for _, o := range []struct{ level, opt, v int }{
		{unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1},
		{unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1},
		{unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64 << 20},
	} {
		if err := unix.SetsockoptInt(fd, o.level, o.opt, o.v); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("setsockopt %d/%d: %w", o.level, o.opt, err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// read writes every frame until the socket is closed, then drains what the
// socket still holds.
func (c *Capture) read() error {
	rc, err := c.f.SyscallConn()
	if err != nil {
		return err
	}
	buf := make([]byte, captureReadSize)
	oob := make([]byte, 128)
	var n, oobn int
	var rerr error
	recv := func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, 0)
		return rerr != unix.EAGAIN
	}
	for {
		err := rc.Read(recv)
		if err == nil && rerr == nil {
			if werr := c.record(buf[:n], oob[:oobn]); werr != nil {
				return werr
			}
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break // Stop: drain below
		}
		if err != nil {
			return err
		}
		return rerr
	}
	var werr error
	_ = rc.Control(func(fd uintptr) {
		for werr == nil {
			if n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, 0); rerr != nil {
				return
			}
			werr = c.record(buf[:n], oob[:oobn])
		}
	})
	return werr
}

// record writes one frame read with its virtio_net_hdr.
func (c *Capture) record(b, oob []byte) error {
	if len(b) < vnetHdrLen {
		return nil
	}
	ts := timestamp(oob)
	flags, gsoType := b[0], b[1]
	gsoSize := int(binary.LittleEndian.Uint16(b[4:]))
	frame := b[vnetHdrLen:]
	if gsoType == vnetGSOUDPL4 && gsoSize > 0 {
		if n, ok := c.writeSegments(ts, frame, gsoSize); ok {
			c.stats.Frames += n
			c.stats.Split++
			return nil
		}
	}
	if flags&vnetNeedsCsum != 0 {
		zeroUDPChecksum(frame)
	}
	c.stats.Frames++
	return c.w.WriteFrame(ts, frame, len(frame))
}

// ipv4UDP returns the offsets of the IPv4 and UDP headers of an Ethernet
// frame carrying IPv4 UDP, or ok false.
func ipv4UDP(frame []byte) (ip, udp int, ok bool) {
	const eth = wireshark.EthernetLen
	if len(frame) < eth+wireshark.IPv4Len+wireshark.UDPLen || binary.BigEndian.Uint16(frame[12:]) != 0x0800 ||
		frame[eth]>>4 != 4 || frame[eth+9] != 17 {
		return 0, 0, false
	}
	udp = eth + int(frame[eth]&0x0f)*4
	return eth, udp, udp+wireshark.UDPLen <= len(frame)
}

// zeroUDPChecksum clears the UDP checksum of an IPv4 UDP frame whose
// checksum the kernel had not computed yet (0: none, valid over IPv4).
func zeroUDPChecksum(frame []byte) {
	if _, udp, ok := ipv4UDP(frame); ok {
		binary.BigEndian.PutUint16(frame[udp+6:], 0)
	}
}

// writeSegments writes a UDP GSO super-packet as its datagrams of size
// bytes each (the last may be shorter), with their own IPv4 and UDP
// headers, as the kernel would have split it. ok is false for what it
// cannot split (not IPv4 UDP with options-free header).
func (c *Capture) writeSegments(ts time.Time, frame []byte, size int) (uint64, bool) {
	ipOff, udp, ok := ipv4UDP(frame)
	if !ok || udp != ipOff+wireshark.IPv4Len {
		return 0, false
	}
	payload := frame[udp+wireshark.UDPLen:]
	src := [4]byte(frame[ipOff+12 : ipOff+16])
	dst := [4]byte(frame[ipOff+16 : ipOff+20])
	id := binary.BigEndian.Uint16(frame[ipOff+4:])
	seg := make([]byte, udp+wireshark.UDPLen+size)
	var n uint64
	for i := 0; len(payload) > 0; i++ {
		k := min(size, len(payload))
		s := seg[:udp+wireshark.UDPLen+k]
		copy(s, frame[:udp+wireshark.UDPLen])
		wireshark.PutIPv4UDP(s[ipOff:], netip.AddrFrom4(src), netip.AddrFrom4(dst), id+uint16(i), wireshark.UDPLen+k)
		binary.BigEndian.PutUint16(s[udp+4:], uint16(wireshark.UDPLen+k))
		binary.BigEndian.PutUint16(s[udp+6:], 0)
		copy(s[udp+wireshark.UDPLen:], payload[:k])
		if err := c.w.WriteFrame(ts, s, len(s)); err != nil {
			return n, true
		}
		payload = payload[k:]
		n++
	}
	return n, true
}

// timestamp reads the SCM_TIMESTAMPNS control message, or returns now.
func timestamp(oob []byte) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Now()
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_TIMESTAMPNS {
			continue
		}
		switch len(m.Data) {
		case 16:
			return time.Unix(int64(binary.NativeEndian.Uint64(m.Data)), int64(binary.NativeEndian.Uint64(m.Data[8:])))
		case 8:
			return time.Unix(int64(int32(binary.NativeEndian.Uint32(m.Data))), int64(int32(binary.NativeEndian.Uint32(m.Data[4:]))))
		}
	}
	return time.Now()
}

// Stop ends the capture: it writes what the socket still holds, closes the
// socket and the file, and returns what was written.
func (c *Capture) Stop() (CaptureStats, error) {
	var dropped uint64
	if rc, err := c.f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			if st, err := unix.GetsockoptTpacketStats(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
				dropped = uint64(st.Drops)
			}
		})
	}
	_ = c.f.SetReadDeadline(time.Now())
	err := <-c.done
	err = errors.Join(err, c.f.Close(), c.w.Flush(), c.out.Close())
	c.stats.Dropped = dropped
	return c.stats, err
}
