package ebpf_test

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/bpf"
	"golang.org/x/net/ipv4"

	"github.com/nakcast/nakcast/bench"
	"github.com/nakcast/nakcast/ebpf"
	"github.com/nakcast/nakcast/engine/transport"
)

var (
	group4 = netip.MustParseAddrPort("239.77.18.1:45618")
	group6 = netip.MustParseAddrPort("[ff12::18:1]:45618")
)

// TestXDPExchange: an AF_XDP member (native and generic XDP) and a UDP
// member (with its segmentation offload: in generic mode its runs, longer
// than the MTU here, reach the hook whole and go to the stack, which cuts
// them for the group socket) exchange group and unicast datagrams both
// ways, IPv4 and IPv6: every datagram arrives once, in order, with the
// sender's unicast address as its source.
func TestXDPExchange(t *testing.T) {
	for _, tc := range []struct {
		mode  string
		group netip.AddrPort
	}{{ebpf.ModeNative, group4}, {ebpf.ModeNative, group6}, {ebpf.ModeGeneric, group4}, {ebpf.ModeGeneric, group6}} {
		group := tc.group
		t.Run(tc.mode+map[bool]string{true: "/IPv4", false: "/IPv6"}[group.Addr().Is4()], func(t *testing.T) {
			ns := newXDPNetns(t, 2)
			x := ns.openXDP(0, group, ebpf.Options{Mode: tc.mode})
			u := ns.openUDP(1, group)
			st := x.Stats().XDP
			t.Logf("AF_XDP: mode %s, zero-copy %v, busy poll %v, %d socket(s)", st.Mode, st.ZeroCopy, st.BusyPoll, st.Sockets)

			toXDP := payloads("udp->xdp", 500, 100)
			writeAll(t, u, toXDP, netip.AddrPort{})
			got, from := readN(t, x, len(toXDP), 10*time.Second)
			require.Equal(t, asStrings(toXDP), got)
			require.Equal(t, u.LocalAddr(), from[0], "a group datagram's source is the sender's unicast address")

			toUDP := payloads("xdp->udp", 500, 1400)
			writeAll(t, x, toUDP, netip.AddrPort{})
			got, from = readN(t, u, len(toUDP), 10*time.Second)
			require.Equal(t, asStrings(toUDP), got)
			require.Equal(t, x.LocalAddr(), from[0])

			uni := payloads("unicast", 10, 50)
			writeAll(t, x, uni, u.LocalAddr())
			got, _ = readN(t, u, len(uni), 10*time.Second)
			require.Equal(t, asStrings(uni), got)
			writeAll(t, u, uni, x.LocalAddr())
			got, from = readN(t, x, len(uni), 10*time.Second)
			require.Equal(t, asStrings(uni), got)
			require.Equal(t, u.LocalAddr(), from[0])

			st = x.Stats().XDP
			require.Zero(t, st.Malformed+st.Foreign+st.RxDropped+st.RxRingFull+st.RxInvalidDescs+st.TxInvalidDescs, "%+v", st)
			require.NoError(t, x.Close())
			require.Empty(t, ns.attached(), "Close detaches the program")
		})
	}
}

// TestXDPPassesOtherTraffic: with the program attached, every frame that
// is not the group's reaches the stack as before: unicast UDP to the
// member's address, the same group on another port, another group on the
// same port.
func TestXDPPassesOtherTraffic(t *testing.T) {
	ns := newXDPNetns(t, 2)
	x := ns.openXDP(0, group4, ebpf.Options{})
	otherPort := netip.AddrPortFrom(group4.Addr(), group4.Port()+1)
	otherGroup := netip.AddrPortFrom(netip.MustParseAddr("239.77.18.2"), group4.Port())
	for _, g := range []netip.AddrPort{otherPort, otherGroup} {
		rx := ns.openUDP(0, g) // an ordinary group socket beside the AF_XDP member
		tx := ns.openUDP(1, g)
		want := payloads("other "+g.String(), 20, 64)
		writeAll(t, tx, want, netip.AddrPort{})
		got, _ := readN(t, rx, len(want), 10*time.Second)
		require.Equal(t, asStrings(want), got)
	}
	// Plain unicast UDP to the member's address, on a socket of its own.
	rx := ns.openUDP(0, otherPort)
	tx := ns.openUDP(1, otherPort)
	want := payloads("plain unicast", 5, 64)
	writeAll(t, tx, want, rx.LocalAddr())
	got, _ := readN(t, rx, len(want), 10*time.Second)
	require.Equal(t, asStrings(want), got)
	st := x.Stats().XDP
	require.Zero(t, st.Malformed+st.Foreign, "the program redirected only the group's frames: %+v", st)
}

// TestXDPBothEnds: AF_XDP members only, one sending to two others (one of
// them busy polling), in rounds (each round read before the next is sent,
// so no receiver is ever more than a round behind): every datagram
// arrives once, in order, at each; the kernel counts no drop.
//
// A round is 200 datagrams, sent without flow control, so it must fit the
// queues between the sockets while the softirqs that drain them wait for
// a busy CPU: a veth whose peer runs an XDP program queues at most 256
// frames (VETH_RING_SIZE) and a CPU's backlog netdev_max_backlog (1,000
// by default).
func TestXDPBothEnds(t *testing.T) {
	ns := newXDPNetns(t, 3)
	tx := ns.openXDP(0, group4, ebpf.Options{})
	rxs := []*ebpf.XDP{ns.openXDP(1, group4, ebpf.Options{}), ns.openXDP(2, group4, ebpf.Options{BusyPoll: 20 * time.Microsecond})}
	require.True(t, rxs[1].Stats().XDP.BusyPoll, "the kernel takes SO_BUSY_POLL as root")
	const rounds, per = 50, 200
	for r := range rounds {
		want := payloads(fmt.Sprintf("round %d", r), per, 1472)
		writeAll(t, tx, want, netip.AddrPort{})
		for _, rx := range rxs {
			got, from := readN(t, rx, per, 20*time.Second)
			require.Equal(t, asStrings(want), got)
			require.Equal(t, tx.LocalAddr(), from[per-1])
		}
	}
	for _, x := range append(rxs, tx) {
		st := x.Stats().XDP
		require.Zero(t, st.RxDropped+st.RxRingFull+st.FillRingEmpty+st.Malformed, "%+v", st)
	}
	t.Logf("sender: %d kicks, %d waits for send frames", tx.Stats().XDP.TxKicks, tx.Stats().XDP.TxWaits)
}

// TestXDPGroupFilter: the group filter (the engine's self filter)
// drops what it refuses before the caller sees it, and counts it;
// SetGroupFilter replaces it and an empty program removes it.
func TestXDPGroupFilter(t *testing.T) {
	ns := newXDPNetns(t, 2)
	x := ns.openXDP(0, group4, ebpf.Options{})
	u := ns.openUDP(1, group4)
	// Drop datagrams whose first payload byte is 'X' (offsets from the
	// UDP header, as on a UDP group socket).
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 8, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 'X', SkipTrue: 1},
		bpf.RetConstant{Val: 0xffffffff},
		bpf.RetConstant{Val: 0},
	})
	require.NoError(t, err)
	require.NoError(t, x.SetGroupFilter(prog))
	writeAll(t, u, [][]byte{[]byte("X dropped"), []byte("kept 1"), []byte("X dropped"), []byte("kept 2")}, netip.AddrPort{})
	got, _ := readN(t, x, 2, 10*time.Second)
	require.Equal(t, []string{"kept 1", "kept 2"}, got)
	require.Equal(t, uint64(2), x.Stats().XDP.Filtered)
	require.NoError(t, x.SetGroupFilter(nil))
	writeAll(t, u, [][]byte{[]byte("X kept")}, netip.AddrPort{})
	got, _ = readN(t, x, 1, 10*time.Second)
	require.Equal(t, []string{"X kept"}, got)
}

// TestXDPMalformedCounted: frames to the group's address and port that
// are not well-formed datagrams (a bad IPv4 header checksum, a UDP length
// beyond the frame), sent raw from another namespace, are counted and
// dropped; good ones around them arrive, and a lone first fragment goes
// to the stack (which waits in vain for the rest).
func TestXDPMalformedCounted(t *testing.T) {
	ns := newXDPNetns(t, 2)
	x := ns.openXDP(0, group4, ebpf.Options{})
	var frames [][]byte
	good := rawFrame(t, ns.Addrs[1], "good", nil)
	frames = append(frames, good,
		rawFrame(t, ns.Addrs[1], "bad checksum", func(f []byte) { f[14+10] ^= 0xff }),
		rawFrame(t, ns.Addrs[1], "first fragment", func(f []byte) { f[14+6] |= 0x20; fixIPChecksum(f) }),
		rawFrame(t, ns.Addrs[1], "udp length", func(f []byte) { f[14+20+4] = 0x7f }),
		good)
	// With br_netfilter loaded the bridge validates IPv4 headers and
	// would drop the bad checksum itself: not in this bridge.
	require.NoError(t, bench.InNetns(ns.Bridge(), func() error {
		err := os.WriteFile("/proc/sys/net/bridge/bridge-nf-call-iptables", []byte("0"), 0)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}))
	ns.in(1, func() error { return sendRaw(frames) })
	got, _ := readN(t, x, 2, 10*time.Second)
	require.Equal(t, []string{"good", "good"}, got)
	require.Equal(t, uint64(2), x.Stats().XDP.Malformed)
}

// TestXDPFragmentsThroughTheStack: a datagram larger than the MTU, which
// the sender's stack fragments, goes past the XDP program to the stack,
// which reassembles it for the group socket: it arrives whole, between
// the small datagrams around it, in order.
func TestXDPFragmentsThroughTheStack(t *testing.T) {
	ns := newXDPNetns(t, 2)
	x := ns.openXDP(0, group4, ebpf.Options{})
	big := payloads("fragmented", 1, 3000)[0]
	var from netip.AddrPort
	ns.in(1, func() error {
		// A plain socket: the UDP transport refuses a datagram above the
		// MTU (it sends with path MTU discovery on).
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ns.Addrs[1], 0)))
		if err != nil {
			return err
		}
		defer c.Close()
		from = c.LocalAddr().(*net.UDPAddr).AddrPort()
		p := ipv4.NewPacketConn(c)
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		if err := p.SetMulticastInterface(ifi); err != nil {
			return err
		}
		for _, b := range [][]byte{[]byte("before"), big, []byte("after")} {
			if _, err := c.WriteToUDPAddrPort(b, group4); err != nil {
				return err
			}
		}
		return nil
	})
	bufs, sizes, srcs := [][]byte{make([]byte, 4096)}, []int{0}, []netip.AddrPort{{}}
	var got []string
	require.NoError(t, x.SetReadDeadline(time.Now().Add(10*time.Second)))
	for len(got) < 3 {
		n, err := x.ReadBatch(bufs, sizes, srcs)
		require.NoError(t, err, "after %v", got)
		if n == 1 {
			got = append(got, string(bufs[0][:sizes[0]]))
			require.Equal(t, from, srcs[0])
		}
	}
	require.ElementsMatch(t, []string{"before", string(big), "after"}, got)
	require.Zero(t, x.Stats().XDP.Malformed)
}

// TestXDPDeadlineAndClose: a read deadline ends a blocked ReadBatch with
// os.ErrDeadlineExceeded; Close wakes a blocked ReadBatch with ErrClosed,
// detaches the program, and later calls return ErrClosed.
func TestXDPDeadlineAndClose(t *testing.T) {
	ns := newXDPNetns(t, 1)
	x := ns.openXDP(0, group4, ebpf.Options{})
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	require.NoError(t, x.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, err := x.ReadBatch(bufs, sizes, nil)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.NoError(t, x.SetReadDeadline(time.Time{}))
	done := make(chan error, 1)
	go func() {
		_, err := x.ReadBatch(bufs, sizes, nil)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let it block (it must wake either way)
	require.NoError(t, x.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, transport.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not wake the blocked ReadBatch")
	}
	require.Empty(t, ns.attached())
	_, err = x.WriteBatch([][]byte{[]byte("late")}, nil)
	require.ErrorIs(t, err, transport.ErrClosed)
	require.ErrorIs(t, x.Close(), transport.ErrClosed)
}

// TestXDPZeroAllocs: steady-state WriteBatch, ReadBatch and TryReadBatch
// allocate nothing, group and unicast alike.
func TestXDPZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	ns := newXDPNetns(t, 2)
	a := ns.openXDP(0, group4, ebpf.Options{})
	b := ns.openXDP(1, group4, ebpf.Options{})
	const k = 8
	out := payloads("alloc", k, 512)
	dsts := make([]netip.AddrPort, k)
	for i := range dsts {
		if i%4 == 3 {
			dsts[i] = b.LocalAddr()
		}
	}
	bufs, sizes, srcs := make([][]byte, k), make([]int, k), make([]netip.AddrPort, k)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	round := func() {
		if n, err := a.WriteBatch(out, dsts); err != nil || n != k {
			t.Fatalf("WriteBatch: %d, %v", n, err)
		}
		for got := 0; got < k; {
			var n int
			var err error
			if got%2 == 0 {
				n, err = b.ReadBatch(bufs[got:], sizes[got:], srcs[got:])
			} else {
				n, err = b.TryReadBatch(bufs[got:], sizes[got:], srcs[got:])
			}
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			got += n
		}
	}
	round()
	require.Zero(t, testing.AllocsPerRun(200, round))
}

// TestXDPQueues: an interface with four receive queues gets four AF_XDP
// sockets; datagrams of many flows (spread over the queues by the
// sender's transmit queue choice) all arrive.
func TestXDPQueues(t *testing.T) {
	needXDP(t)
	name := fmt.Sprintf("nakcast-%d-q", os.Getpid())
	ip := func(args ...string) {
		t.Helper()
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
	}
	ip("netns", "add", name)
	t.Cleanup(func() {
		require.NoError(t, bench.InNetns(name, func() error {
			att, err := ebpf.AttachedPrograms()
			require.Empty(t, att)
			return err
		}))
		_ = exec.Command("ip", "netns", "del", name).Run()
	})
	ip("-n", name, "link", "add", "qa", "numtxqueues", "4", "numrxqueues", "4", "type", "veth", "peer", "name", "qb", "numtxqueues", "4", "numrxqueues", "4")
	ip("-n", name, "addr", "add", "10.199.9.1/24", "dev", "qa")
	ip("-n", name, "addr", "add", "10.199.9.2/24", "dev", "qb")
	ip("-n", name, "link", "set", "qa", "up")
	ip("-n", name, "link", "set", "qb", "up")
	var x *ebpf.XDP
	require.NoError(t, bench.InNetns(name, func() (err error) {
		x, err = ebpf.Open(ebpf.Config{Config: transport.Config{Group: group4, Interface: "qa",
			Unicast: netip.MustParseAddrPort("10.199.9.1:0"), TTL: 1, AllowNonLoopback: true}})
		return err
	}))
	defer x.Close()
	require.Equal(t, 4, x.Stats().XDP.Sockets)
	const flows, per = 16, 20
	for f := range flows {
		var u *transport.UDP
		require.NoError(t, bench.InNetns(name, func() (err error) {
			u, err = transport.Open(transport.Config{Group: group4, Interface: "qb", SendOnly: true,
				Unicast: netip.MustParseAddrPort("10.199.9.2:0"), TTL: 1, AllowNonLoopback: true})
			return err
		}))
		writeAll(t, u, payloads(fmt.Sprintf("flow %02d", f), per, 64), netip.AddrPort{})
		require.NoError(t, u.Close())
	}
	got, _ := readN(t, x, flows*per, 10*time.Second)
	require.Len(t, got, flows*per)
	require.NoError(t, x.Close())
}

// TestProbeNamesWhatIsMissing: the probe's refusals name the reason and
// wrap ErrUnavailable.
func TestProbeNamesWhatIsMissing(t *testing.T) {
	lo := transport.Config{Group: group4, Interface: "lo", TTL: 1}
	err := ebpf.Probe(ebpf.Config{Config: lo})
	require.ErrorIs(t, err, ebpf.ErrUnavailable)
	require.ErrorContains(t, err, "loopback")
	lo.TTL = 0
	err = ebpf.Probe(ebpf.Config{Config: lo})
	require.ErrorIs(t, err, ebpf.ErrUnavailable)
	require.ErrorContains(t, err, "TTL 0")
	err = ebpf.Probe(ebpf.Config{Config: transport.Config{Group: group4, Interface: "lo", TTL: 1}, Options: ebpf.Options{Mode: "turbo"}})
	require.ErrorIs(t, err, transport.ErrInvalidConfig)
}

// TestXDPOneMemberPerInterface: a second AF_XDP transport on an
// interface that has one is refused, naming why (the probe says so too).
func TestXDPOneMemberPerInterface(t *testing.T) {
	ns := newXDPNetns(t, 1)
	ns.openXDP(0, group4, ebpf.Options{})
	ns.in(0, func() error {
		_, err := ebpf.Open(ebpf.Config{Config: ns.config(0, group4)})
		require.ErrorIs(t, err, ebpf.ErrUnavailable)
		require.ErrorContains(t, err, "already has an XDP program")
		err = ebpf.Probe(ebpf.Config{Config: ns.config(0, group4)})
		require.ErrorContains(t, err, "already has an XDP program")
		return nil
	})
	require.Len(t, ns.attached(), 1)
}

// TestXDPKilledMemberLeavesNoProgram: a process with an AF_XDP transport
// open, killed with SIGKILL (no Close, no cleanup of its own), leaves no
// XDP program on its interface: the program hangs on a bpf_link whose
// only holder was the process.
func TestXDPKilledMemberLeavesNoProgram(t *testing.T) {
	ns := newXDPNetns(t, 1)
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := ns.Command(0, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), xdpChildEnv+"="+netip.AddrPortFrom(ns.Addrs[0], 0).String())
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "child: %s", stderr.String())
	require.Equal(t, xdpChildReady, strings.TrimSpace(line))
	att := ns.attached()
	require.Len(t, att, 1, "the child's program is attached")
	t.Logf("attached before the kill: %v", att)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	ns.requireNoXDP()
}
