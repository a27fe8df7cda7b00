package ebpf_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/nakcast/nakcast/bench"
	"github.com/nakcast/nakcast/ebpf"
	"github.com/nakcast/nakcast/engine/transport"
)

// The namespace tests run AF_XDP sockets for real: members in network
// namespaces of their own on a bridge (bench.SetupNetns: veth pairs, MTU
// 1500, 10.199.0.0/24 and, added here, fd00:199::/64, nothing outside the
// namespaces), the transports opened on threads moved into them. They
// need root and skip otherwise. Every test checks at its end that no XDP
// program is left on any interface of any of its namespaces.

// xdpNetns is a test's namespaces.
type xdpNetns struct {
	*bench.Netns
	t testing.TB
}

// needXDP skips the test unless it runs as root with iproute2.
func needXDP(t testing.TB) {
	t.Helper()
	if err := bench.CheckNetns(); err != nil {
		t.Skipf("skipping the AF_XDP namespace test: %v", err)
	}
}

// newXDPNetns makes n member namespaces with IPv4 and IPv6 addresses;
// at cleanup it checks that no XDP program is left on any interface and
// deletes them.
func newXDPNetns(t testing.TB, n int) *xdpNetns {
	t.Helper()
	needXDP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := bench.SetupNetns(ctx, n, 1500)
	require.NoError(t, err, "creating the namespaces")
	x := &xdpNetns{Netns: ns, t: t}
	t.Cleanup(func() {
		x.requireNoXDP()
		if err := ns.Close(); err != nil {
			t.Errorf("deleting the namespaces: %v", err)
		}
	})
	for i, m := range ns.Members {
		out, err := exec.Command("ip", "-n", m, "-6", "addr", "add", addr6(i).String()+"/64", "dev", "eth0", "nodad").CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	return x
}

// addr6 is member i's IPv6 address.
func addr6(i int) netip.Addr { return netip.MustParseAddr(fmt.Sprintf("fd00:199::%d", i+1)) }

// requireNoXDP fails the test if any interface of any namespace has an
// XDP program, polling a while: the kernel detaches a dead process's
// program as it closes its files, which may trail its exit a little.
func (x *xdpNetns) requireNoXDP() {
	x.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := x.attached()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			x.t.Errorf("XDP programs left attached: %v", left)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// attached lists the XDP programs of every namespace.
func (x *xdpNetns) attached() []string {
	var left []string
	for _, name := range append([]string{x.Bridge()}, x.Members...) {
		err := bench.InNetns(name, func() error {
			att, err := ebpf.AttachedPrograms()
			for _, a := range att {
				left = append(left, fmt.Sprintf("%s/%s: program %d (%s)", name, a.Interface, a.ProgramID, a.Mode))
			}
			return err
		})
		require.NoError(x.t, err)
	}
	return left
}

// in runs f in member i's namespace.
func (x *xdpNetns) in(i int, f func() error) {
	x.t.Helper()
	require.NoError(x.t, bench.InNetns(x.Members[i], f))
}

// config is member i's transport config for group (IPv4 or IPv6).
func (x *xdpNetns) config(i int, group netip.AddrPort) transport.Config {
	u := netip.AddrPortFrom(x.Addrs[i], 0)
	if group.Addr().Is6() {
		u = netip.AddrPortFrom(addr6(i), 0)
	}
	return transport.Config{Group: group, Interface: "eth0", Unicast: u, TTL: 1, AllowNonLoopback: true}
}

// openXDP opens an AF_XDP transport in member i's namespace, closed at
// cleanup.
func (x *xdpNetns) openXDP(i int, group netip.AddrPort, o ebpf.Options) *ebpf.XDP {
	x.t.Helper()
	var tr *ebpf.XDP
	x.in(i, func() (err error) {
		tr, err = ebpf.Open(ebpf.Config{Config: x.config(i, group), Options: o})
		return err
	})
	x.t.Logf("member %d: AF_XDP in %s mode", i, tr.Mode())
	x.t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// openUDP opens a UDP transport in member i's namespace, closed at
// cleanup.
func (x *xdpNetns) openUDP(i int, group netip.AddrPort) *transport.UDP {
	x.t.Helper()
	var tr *transport.UDP
	x.in(i, func() (err error) {
		c := x.config(i, group)
		c.NoLoopback = true
		tr, err = transport.Open(c)
		return err
	})
	x.t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// readN reads until n datagrams arrived (or the deadline), returning
// their payloads and sources.
func readN(t *testing.T, tr transport.Transport, n int, within time.Duration) ([]string, []netip.AddrPort) {
	t.Helper()
	bufs := make([][]byte, tr.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, len(bufs))
	srcs := make([]netip.AddrPort, len(bufs))
	var got []string
	var from []netip.AddrPort
	require.NoError(t, tr.SetReadDeadline(time.Now().Add(within)))
	for len(got) < n {
		k, err := tr.ReadBatch(bufs, sizes, srcs)
		if err != nil {
			if s, ok := tr.(interface{ Stats() transport.Stats }); ok {
				t.Logf("transport stats: %+v", s.Stats())
			}
			// The CPUs' backlog drops: the second column, in hex.
			if b, err := os.ReadFile("/proc/net/softnet_stat"); err == nil {
				t.Logf("/proc/net/softnet_stat:\n%s", b)
			}
		}
		require.NoError(t, err, "after %d of %d datagrams", len(got), n)
		for i := range k {
			got = append(got, string(bufs[i][:sizes[i]]))
			from = append(from, srcs[i])
		}
	}
	require.NoError(t, tr.SetReadDeadline(time.Time{}))
	return got, from
}

// payloads returns n numbered payloads with a prefix.
func payloads(prefix string, n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		p := fmt.Appendf(nil, "%s %06d ", prefix, i)
		for len(p) < size {
			p = append(p, byte('a'+len(p)%26))
		}
		out[i] = p[:max(size, len(fmt.Sprintf("%s %06d ", prefix, i)))]
	}
	return out
}

func asStrings(b [][]byte) []string {
	out := make([]string, len(b))
	for i, p := range b {
		out[i] = string(p)
	}
	return out
}

// writeAll writes bufs in batches of the transport's size.
func writeAll(t *testing.T, tr transport.Transport, bufs [][]byte, dst netip.AddrPort) {
	t.Helper()
	dsts := make([]netip.AddrPort, len(bufs))
	for i := range dsts {
		dsts[i] = dst
	}
	for off := 0; off < len(bufs); {
		end := min(off+tr.BatchSize(), len(bufs))
		n, err := tr.WriteBatch(bufs[off:end], dsts[off:end])
		require.NoError(t, err)
		off += n
	}
}

// rawFrame is a well-formed IPv4 frame from src:40000 to group4 with
// payload, then damaged by edit (if not nil).
func rawFrame(t *testing.T, src netip.Addr, payload string, edit func([]byte)) []byte {
	t.Helper()
	f := ebpf.BuildTestFrame(net.HardwareAddr{2, 0, 0, 0, 0, 9}, netip.AddrPortFrom(src, 40000), group4, []byte(payload))
	if edit != nil {
		edit(f)
	}
	return f
}

// fixIPChecksum recomputes an IPv4 frame's header checksum.
func fixIPChecksum(f []byte) {
	ip := f[14:34]
	ip[10], ip[11] = 0, 0
	var s uint32
	for i := 0; i < 20; i += 2 {
		s += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	ip[10], ip[11] = byte(^s>>8), byte(^s)
}

// sendRaw sends frames as they are on eth0 of the calling namespace
// (AF_PACKET).
func sendRaw(frames [][]byte) error {
	ifi, err := net.InterfaceByName("eth0")
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for _, f := range frames {
		if err := unix.Sendto(fd, f, 0, &unix.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6, Addr: [8]byte(append(f[0:6:6], 0, 0))}); err != nil {
			return err
		}
	}
	return nil
}

// xdpChildEnv makes the test binary a member process that opens an
// AF_XDP transport in the namespace it runs in, prints xdpChildReady and
// waits for its standard input to close (it is killed first).
const (
	xdpChildEnv   = "NAKCAST_EBPF_XDP_CHILD"
	xdpChildReady = "xdp child ready"
)

func TestMain(m *testing.M) {
	if unicast := os.Getenv(xdpChildEnv); unicast != "" {
		tr, err := ebpf.Open(ebpf.Config{Config: transport.Config{Group: group4, Interface: "eth0",
			Unicast: netip.MustParseAddrPort(unicast), TTL: 1, AllowNonLoopback: true}})
		if err != nil {
			fmt.Fprintln(os.Stderr, "xdp child:", err)
			os.Exit(1)
		}
		fmt.Println(xdpChildReady)
		_, _ = io.Copy(io.Discard, os.Stdin)
		_ = tr.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}
