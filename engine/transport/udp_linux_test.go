package transport_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/nakcast/nakcast/engine/transport"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/bpf"
)

// Each test uses its own group in 239.77.0.0/16 so that packages and tests
// running at the same time on this host never see each other's datagrams.
func group(last byte) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{239, 77, 1, last}), 0)
}

func open(t *testing.T, cfg transport.Config) *transport.UDP {
	t.Helper()
	u, err := transport.Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = u.Close() })
	return u
}

// member opens a transport on the port of first (or an ephemeral one).
func member(t *testing.T, g netip.AddrPort, first *transport.UDP) *transport.UDP {
	t.Helper()
	if first != nil {
		g = first.Group()
	}
	return open(t, transport.Config{Group: g, BatchSize: 16})
}

type batch struct {
	bufs  [][]byte
	sizes []int
	srcs  []netip.AddrPort
}

func newBatch(n, size int) *batch {
	b := &batch{bufs: make([][]byte, n), sizes: make([]int, n), srcs: make([]netip.AddrPort, n)}
	for i := range b.bufs {
		b.bufs[i] = make([]byte, size)
	}
	return b
}

// readN reads exactly n datagrams (blocking, with a deadline as a guard
// against a hung test) and returns copies of their payloads and sources.
func readN(t *testing.T, u transport.Transport, n int) ([][]byte, []netip.AddrPort) {
	t.Helper()
	require.NoError(t, u.SetReadDeadline(time.Now().Add(10*time.Second)))
	defer func() { _ = u.SetReadDeadline(time.Time{}) }()
	b := newBatch(u.BatchSize(), 2048)
	var got [][]byte
	var srcs []netip.AddrPort
	for len(got) < n {
		k, err := u.ReadBatch(b.bufs, b.sizes, b.srcs)
		require.NoError(t, err)
		require.Positive(t, k)
		for i := range k {
			got = append(got, append([]byte(nil), b.bufs[i][:b.sizes[i]]...))
			srcs = append(srcs, b.srcs[i])
		}
	}
	require.Len(t, got, n)
	return got, srcs
}

func numbered(from, n, size int) [][]byte {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
		binary.LittleEndian.PutUint64(bufs[i], uint64(from+i))
	}
	return bufs
}

func TestConfigErrors(t *testing.T) {
	good := group(1)
	tests := []struct {
		name  string
		cfg   transport.Config
		field string
	}{
		{"unset group", transport.Config{}, "Group"},
		{"unicast address as group", transport.Config{Group: netip.MustParseAddrPort("127.0.0.1:5000")}, "Group"},
		{"group outside 239/8", transport.Config{Group: netip.MustParseAddrPort("224.0.0.251:5353")}, "Group"},
		{"global IPv6 group", transport.Config{Group: netip.MustParseAddrPort("[ff0e::1]:5000")}, "Group"},
		{"site-local IPv6 group", transport.Config{Group: netip.MustParseAddrPort("[ff05::1]:5000")}, "Group"},
		{"prefix-based IPv6 group", transport.Config{Group: netip.MustParseAddrPort("[ff32::1]:5000")}, "Group"},
		{"IPv4-mapped group", transport.Config{Group: netip.MustParseAddrPort("[::ffff:239.1.1.1]:5000")}, "Group"},
		{"missing interface", transport.Config{Group: good, Interface: "nakcast-none0"}, "Interface"},
		{"non-loopback unicast", transport.Config{Group: good, Unicast: netip.MustParseAddrPort("10.1.2.3:0")}, "Unicast"},
		{"unicast of other family", transport.Config{Group: good, Unicast: netip.MustParseAddrPort("[::1]:0")}, "Unicast"},
		{"multicast unicast", transport.Config{Group: good, Unicast: netip.MustParseAddrPort("239.1.1.1:0")}, "Unicast"},
		{"negative TTL", transport.Config{Group: good, TTL: -1}, "TTL"},
		{"TTL above 1 on loopback", transport.Config{Group: good, TTL: 2}, "TTL"},
		{"TTL above 255", transport.Config{Group: good, TTL: 256, AllowNonLoopback: true}, "TTL"},
		{"negative RecvBuffer", transport.Config{Group: good, RecvBuffer: -1}, "RecvBuffer"},
		{"huge SendBuffer", transport.Config{Group: good, SendBuffer: 2 << 30}, "SendBuffer"},
		{"BatchSize above UIO_MAXIOV", transport.Config{Group: good, BatchSize: 1025}, "BatchSize"},
		{"negative BatchSize", transport.Config{Group: good, BatchSize: -1}, "BatchSize"},
		{"SendOnly without port", transport.Config{Group: good, SendOnly: true}, "Group"},
	}
	if name := nonLoopbackInterface(); name != "" {
		tests = append(tests, struct {
			name  string
			cfg   transport.Config
			field string
		}{"non-loopback interface", transport.Config{Group: good, Interface: name}, "Interface"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := transport.Open(tt.cfg)
			require.ErrorIs(t, err, transport.ErrInvalidConfig)
			require.Nil(t, u)
			require.Contains(t, err.Error(), tt.field)
		})
	}
	t.Run("valid", func(t *testing.T) {
		require.NoError(t, transport.Config{Group: good}.Validate())
		require.NoError(t, transport.Config{Group: netip.MustParseAddrPort("[ff12::1]:5000")}.Validate())
		require.NoError(t, transport.Config{Group: good, TTL: 1}.Validate())
	})
}

func nonLoopbackInterface() string {
	ifs, _ := net.Interfaces()
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagLoopback == 0 && ifi.Flags&net.FlagUp != 0 {
			return ifi.Name
		}
	}
	return ""
}

func TestOpenInfo(t *testing.T) {
	u := member(t, group(2), nil)
	info := u.Info()
	require.Equal(t, "lo", info.Interface)
	require.NotZero(t, u.Group().Port())
	require.Equal(t, u.Group(), info.Group)
	require.True(t, u.LocalAddr().Addr().IsLoopback())
	require.NotZero(t, u.LocalAddr().Port())
	require.Equal(t, 16, u.BatchSize())
	// Linux reports twice the size set; as root SO_RCVBUFFORCE gets past
	// net.core.rmem_max.
	require.Positive(t, info.GroupRecvBuffer)
	require.Positive(t, info.SendBuffer)
	if os.Geteuid() == 0 {
		require.False(t, info.BufferCapped, "%+v", info)
		require.Equal(t, 2*transport.DefaultBufferSize, info.GroupRecvBuffer)
		require.Equal(t, 2*transport.DefaultBufferSize, info.UnicastRecvBuffer)
		require.Equal(t, 2*transport.DefaultBufferSize, info.SendBuffer)
	}
	t.Logf("info: %+v", info)
}

func TestBufferAboveKernelMaximum(t *testing.T) {
	max, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err != nil {
		t.Skipf("no net.core.rmem_max: %v", err)
	}
	var rmemMax int
	_, err = fmt.Sscan(string(max), &rmemMax)
	require.NoError(t, err)
	want := 2 * rmemMax
	u := open(t, transport.Config{Group: group(17), RecvBuffer: want})
	info := u.Info()
	t.Logf("asked %d with rmem_max %d: %+v", want, rmemMax, info)
	if os.Geteuid() != 0 {
		require.True(t, info.BufferCapped)
		require.Equal(t, 2*rmemMax, info.GroupRecvBuffer)
		return
	}
	require.True(t, info.BufferForced, "SO_RCVBUFFORCE as root")
	require.False(t, info.BufferCapped)
	require.Equal(t, 2*want, info.GroupRecvBuffer)
}

func TestMulticastTwoReceivers(t *testing.T) {
	r1 := member(t, group(3), nil)
	r2 := member(t, group(3), r1)
	snd := open(t, transport.Config{Group: r1.Group(), SendOnly: true, BatchSize: 16})

	const n = 200 // more than one batch, fewer than the socket buffers hold
	bufs := numbered(0, n, 300)
	sent, err := snd.WriteBatch(bufs, nil)
	require.NoError(t, err)
	require.Equal(t, n, sent)

	for i, r := range []*transport.UDP{r1, r2} {
		got, srcs := readN(t, r, n)
		for k := range got {
			require.Equal(t, bufs[k], got[k], "receiver %d datagram %d", i, k)
			require.Equal(t, snd.LocalAddr(), srcs[k])
		}
		k, err := r.TryReadBatch(make([][]byte, 1), make([]int, 1), nil)
		require.NoError(t, err)
		require.Zero(t, k, "receiver %d: nothing beyond what was sent", i)
	}
}

func TestSenderReceivesOwnGroupTraffic(t *testing.T) {
	// A member that is not SendOnly gets its own multicasts (loop on), with
	// its own unicast address as the source, so it can tell them apart.
	u := member(t, group(4), nil)
	n, err := u.WriteBatch([][]byte{[]byte("self")}, []netip.AddrPort{{}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got, srcs := readN(t, u, 1)
	require.Equal(t, "self", string(got[0]))
	require.Equal(t, u.LocalAddr(), srcs[0])
}

func TestNoLoopback(t *testing.T) {
	// The option as the kernel reports it. (Its effect cannot be seen on
	// the loopback interface, where what is sent comes back through the
	// interface itself; the netns benchmark runs members with it on a
	// veth bridge.)
	on := open(t, transport.Config{Group: group(7), BatchSize: 16})
	require.True(t, on.Info().MulticastLoop)
	off := open(t, transport.Config{Group: on.Group(), BatchSize: 16, NoLoopback: true})
	require.False(t, off.Info().MulticastLoop)
}

func TestOtherGroupOnSamePortNotReceived(t *testing.T) {
	a := member(t, group(5), nil)
	b := open(t, transport.Config{Group: netip.AddrPortFrom(group(6).Addr(), a.Group().Port())})
	_, err := a.WriteBatch([][]byte{[]byte("to a")}, nil)
	require.NoError(t, err)
	readN(t, a, 1)
	k, err := b.TryReadBatch(make([][]byte, 1), make([]int, 1), nil)
	require.NoError(t, err)
	require.Zero(t, k)
}

func TestUnicast(t *testing.T) {
	a := member(t, group(7), nil)
	b := member(t, group(7), a)
	n, err := a.WriteBatch(numbered(0, 3, 64), []netip.AddrPort{b.LocalAddr(), b.LocalAddr(), b.LocalAddr()})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	got, srcs := readN(t, b, 3)
	for i := range got {
		require.Equal(t, uint64(i), binary.LittleEndian.Uint64(got[i]))
		require.Equal(t, a.LocalAddr(), srcs[i])
	}
	// Reply to the source; a did not get its own unicast.
	_, err = b.WriteBatch([][]byte{[]byte("pong")}, srcs[:1])
	require.NoError(t, err)
	got, _ = readN(t, a, 1)
	require.Equal(t, "pong", string(got[0]))
}

func TestMixedDestinationsInOneBatch(t *testing.T) {
	a := member(t, group(8), nil)
	b := member(t, group(8), a)
	bufs := [][]byte{[]byte("group"), []byte("unicast"), []byte("group-again")}
	_, err := a.WriteBatch(bufs, []netip.AddrPort{{}, b.LocalAddr(), a.Group()})
	require.NoError(t, err)
	got, _ := readN(t, b, 3)
	var s []string
	for _, g := range got {
		s = append(s, string(g))
	}
	require.ElementsMatch(t, []string{"group", "unicast", "group-again"}, s)
}

func TestWriteBatchRefusesUnsafeDestinations(t *testing.T) {
	u := member(t, group(9), nil)
	tests := []struct {
		name string
		dst  netip.AddrPort
	}{
		{"other group", netip.AddrPortFrom(group(10).Addr(), u.Group().Port())},
		{"group on other port", netip.AddrPortFrom(u.Group().Addr(), u.Group().Port()+1)},
		{"non-loopback unicast", netip.MustParseAddrPort("192.0.2.1:9")},
		{"other family", netip.MustParseAddrPort("[::1]:9")},
		{"port zero", netip.MustParseAddrPort("127.0.0.1:0")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := u.WriteBatch([][]byte{[]byte("ok"), []byte("bad")}, []netip.AddrPort{{}, tt.dst})
			require.ErrorIs(t, err, transport.ErrDestination)
			require.Zero(t, n)
		})
	}
	k, err := u.TryReadBatch(make([][]byte, 1), make([]int, 1), nil)
	require.NoError(t, err)
	require.Zero(t, k, "a refused batch sends nothing")
}

func TestReadDeadline(t *testing.T) {
	u := member(t, group(11), nil)
	require.NoError(t, u.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
	b := newBatch(4, 64)
	n, err := u.ReadBatch(b.bufs, b.sizes, b.srcs)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.Zero(t, n)
}

func TestCloseUnblocksReadBatch(t *testing.T) {
	u, err := transport.Open(transport.Config{Group: group(12)})
	require.NoError(t, err)
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		b := newBatch(4, 64)
		close(started)
		_, err := u.ReadBatch(b.bufs, b.sizes, b.srcs)
		done <- err
	}()
	<-started
	require.NoError(t, u.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, transport.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("ReadBatch still blocked after Close")
	}
	_, err = u.WriteBatch([][]byte{{1}}, nil)
	require.ErrorIs(t, err, transport.ErrClosed)
	_, err = u.TryReadBatch(make([][]byte, 1), make([]int, 1), nil)
	require.ErrorIs(t, err, net.ErrClosed)
	require.ErrorIs(t, u.Close(), transport.ErrClosed)
}

// TestBlockingReadWakesOnBothSockets ping-pongs, alternating group and
// unicast, with blocking reads on both sides: every datagram must wake the
// reader whichever socket it arrives on.
func TestBlockingReadWakesOnBothSockets(t *testing.T) {
	a := member(t, group(13), nil)
	b := member(t, group(13), a)
	rounds := wakeRounds
	errc := make(chan error, 1)
	go func() {
		bb := newBatch(4, 64)
		for i := 0; i < rounds; i++ {
			n, err := b.ReadBatch(bb.bufs, bb.sizes, bb.srcs)
			if err != nil {
				errc <- err
				return
			}
			if n != 1 || bb.srcs[0] != a.LocalAddr() {
				errc <- fmt.Errorf("round %d: got %d datagrams from %v", i, n, bb.srcs[0])
				return
			}
			if _, err := b.WriteBatch(bb.bufs[:1], bb.srcs[:1]); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	ab := newBatch(4, 64)
	for i := 0; i < rounds; i++ {
		dst := netip.AddrPort{} // group: a gets its own copy too
		if i%2 == 1 {
			dst = b.LocalAddr()
		}
		msg := binary.LittleEndian.AppendUint64(nil, uint64(i))
		_, err := a.WriteBatch([][]byte{msg}, []netip.AddrPort{dst})
		require.NoError(t, err)
		// Wait for b's unicast answer; skip a's own group copy.
		require.NoError(t, a.SetReadDeadline(time.Now().Add(10*time.Second)))
		for got := false; !got; {
			n, err := a.ReadBatch(ab.bufs, ab.sizes, ab.srcs)
			require.NoError(t, err, "round %d", i)
			for k := range n {
				if ab.srcs[k] == b.LocalAddr() {
					require.Equal(t, uint64(i), binary.LittleEndian.Uint64(ab.bufs[k]))
					got = true
				}
			}
		}
	}
	require.NoError(t, <-errc)
}

func TestTruncatedDatagramCounted(t *testing.T) {
	u := member(t, group(14), nil)
	_, err := u.WriteBatch([][]byte{make([]byte, 100)}, nil)
	require.NoError(t, err)
	require.NoError(t, u.SetReadDeadline(time.Now().Add(10*time.Second)))
	sizes := make([]int, 1)
	n, err := u.ReadBatch([][]byte{make([]byte, 10)}, sizes, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 10, sizes[0])
	require.Equal(t, uint64(1), u.Stats().Truncated)
}

func TestMaxDatagram(t *testing.T) {
	a := member(t, group(15), nil)
	b := open(t, transport.Config{Group: a.Group(), BatchSize: 2})
	big := make([]byte, transport.MaxUDPPayloadIPv4)
	for i := range big {
		big[i] = byte(i)
	}
	n, err := a.WriteBatch([][]byte{big, big}, []netip.AddrPort{b.LocalAddr(), {}})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	bufs := [][]byte{make([]byte, 1<<16), make([]byte, 1<<16)}
	sizes := make([]int, 2)
	require.NoError(t, b.SetReadDeadline(time.Now().Add(10*time.Second)))
	for got := 0; got < 2; {
		k, err := b.ReadBatch(bufs[got:], sizes[got:], nil)
		require.NoError(t, err)
		got += k
	}
	for i := range 2 {
		require.Equal(t, big, bufs[i][:sizes[i]])
	}
	// One byte more does not fit an IPv4 UDP datagram.
	n, err = a.WriteBatch([][]byte{make([]byte, transport.MaxUDPPayloadIPv4+1)}, nil)
	require.Error(t, err)
	require.Zero(t, n)
}

func TestIPv6OnLoopback(t *testing.T) {
	g := netip.MustParseAddrPort("[ff12::7a:1]:0")
	a, err := transport.Open(transport.Config{Group: g})
	if err != nil {
		t.Skipf("IPv6 group socket on lo not available here: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	b := member(t, g, a)
	require.Equal(t, netip.IPv6Loopback(), a.LocalAddr().Addr())

	// Unicast over ::1 works wherever IPv6 does.
	_, err = a.WriteBatch([][]byte{[]byte("v6 unicast")}, []netip.AddrPort{b.LocalAddr()})
	require.NoError(t, err)
	got, srcs := readN(t, b, 1)
	require.Equal(t, "v6 unicast", string(got[0]))
	require.Equal(t, a.LocalAddr(), srcs[0])

	// Group traffic needs a multicast route on lo (lo without the
	// MULTICAST flag has none: "network is unreachable").
	_, err = a.WriteBatch([][]byte{[]byte("v6 group")}, nil)
	if errors.Is(err, syscall.ENETUNREACH) {
		t.Skipf("IPv6 multicast on lo not available here (no IPv6 multicast route on lo; `ip -6 route add multicast ff00::/8 dev lo table local` adds one): %v", err)
	}
	require.NoError(t, err)
	got, srcs = readN(t, b, 1)
	require.Equal(t, "v6 group", string(got[0]))
	require.Equal(t, a.LocalAddr(), srcs[0])
}

func TestZeroAllocsSteadyState(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	a := member(t, group(16), nil)
	b := member(t, group(16), a)
	const k = 8
	out := numbered(0, k, 512)
	dsts := make([]netip.AddrPort, k)
	for i := range dsts {
		if i%2 == 1 {
			dsts[i] = b.LocalAddr()
		}
	}
	in := newBatch(k, 2048)
	roundTrip := func() {
		if n, err := a.WriteBatch(out, dsts); err != nil || n != k {
			t.Fatalf("WriteBatch: %d, %v", n, err)
		}
		for got := 0; got < k; {
			n, err := b.ReadBatch(in.bufs[got:], in.sizes[got:], in.srcs[got:])
			if err != nil {
				t.Fatalf("ReadBatch: %v", err)
			}
			got += n
		}
		// a's own group copies, read without blocking.
		for got := 0; got < k/2; {
			n, err := a.TryReadBatch(in.bufs, in.sizes, in.srcs)
			if err != nil {
				t.Fatalf("TryReadBatch: %v", err)
			}
			got += n
		}
	}
	roundTrip() // warm up
	allocs := testing.AllocsPerRun(200, roundTrip)
	require.Zero(t, allocs, "allocations per WriteBatch+ReadBatch+TryReadBatch round")
}

func TestBusyGroupDoesNotStarveUnicast(t *testing.T) {
	a := member(t, group(18), nil)
	b := open(t, transport.Config{Group: a.Group(), BatchSize: 4})
	_, err := a.WriteBatch(numbered(0, 64, 100), nil)
	require.NoError(t, err)
	_, err = a.WriteBatch([][]byte{[]byte("unicast")}, []netip.AddrPort{b.LocalAddr()})
	require.NoError(t, err)
	in := newBatch(4, 2048)
	require.NoError(t, b.SetReadDeadline(time.Now().Add(10*time.Second)))
	for call := 1; ; call++ {
		n, err := b.ReadBatch(in.bufs, in.sizes, in.srcs)
		require.NoError(t, err)
		for i := range n {
			if string(in.bufs[i][:in.sizes[i]]) == "unicast" {
				require.LessOrEqual(t, call, 4, "unicast is read at least every fourth call")
				return
			}
		}
		require.Less(t, call, 17, "unicast datagram never read")
	}
}

func TestGroupFilterDropsInKernel(t *testing.T) {
	// Drop datagrams whose payload starts with 'D' (offsets count from the
	// UDP header: the payload starts at 8); keep the rest whole.
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 8, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 'D', SkipTrue: 1},
		bpf.RetConstant{Val: 0xffffffff},
		bpf.RetConstant{Val: 0},
	})
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		g    netip.AddrPort
	}{
		{"ipv4", group(19)},
		{"ipv6", netip.MustParseAddrPort("[ff12::7719]:0")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := open(t, transport.Config{Group: tc.g, BatchSize: 16, GroupFilter: prog})
			plain := member(t, tc.g, u)
			msgs := [][]byte{[]byte("Drop 1"), []byte("keep 1"), []byte("Drop 2"), []byte("keep 2")}
			n, err := u.WriteBatch(msgs, nil)
			if tc.g.Addr().Is6() && errors.Is(err, syscall.ENETUNREACH) {
				t.Skipf("IPv6 multicast on lo not available here: %v", err)
			}
			require.NoError(t, err)
			require.Equal(t, len(msgs), n)
			// The unfiltered member gets all four, in order; by then the
			// filtered one has everything it will get.
			all, _ := readN(t, plain, 4)
			require.Equal(t, "keep 2", string(all[3]))
			got, _ := readN(t, u, 2)
			require.Equal(t, []string{"keep 1", "keep 2"}, []string{string(got[0]), string(got[1])})
			k, err := u.TryReadBatch(make([][]byte, 1), make([]int, 1), nil)
			require.NoError(t, err)
			require.Zero(t, k)
		})
	}
}

// dropFirstByte is a group filter that drops datagrams whose payload starts
// with c and keeps the rest whole.
func dropFirstByte(t *testing.T, c byte) []bpf.RawInstruction {
	t.Helper()
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 8, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(c), SkipTrue: 1},
		bpf.RetConstant{Val: 0xffffffff},
		bpf.RetConstant{Val: 0},
	})
	require.NoError(t, err)
	return prog
}

// TestSetGroupFilterReplaces: SetGroupFilter swaps the kernel filter of an
// open transport: what the old program dropped passes, what the new one
// refuses is dropped; an empty program removes the filter; after Close it
// returns ErrClosed.
func TestSetGroupFilterReplaces(t *testing.T) {
	u := open(t, transport.Config{Group: group(20), BatchSize: 16, GroupFilter: dropFirstByte(t, 'A')})
	plain := member(t, group(20), u)
	msgs := [][]byte{[]byte("A 1"), []byte("B 1"), []byte("C 1")}
	// round sends msgs and returns what u got of them: the unfiltered
	// member reads all three first, so by then u has everything it will get.
	round := func() []string {
		t.Helper()
		n, err := u.WriteBatch(msgs, nil)
		require.NoError(t, err)
		require.Equal(t, len(msgs), n)
		_, _ = readN(t, plain, len(msgs))
		b := newBatch(16, 64)
		k, err := u.TryReadBatch(b.bufs, b.sizes, nil)
		require.NoError(t, err)
		var got []string
		for i := range k {
			got = append(got, string(b.bufs[i][:b.sizes[i]]))
		}
		return got
	}
	require.Equal(t, []string{"B 1", "C 1"}, round())
	require.NoError(t, u.SetGroupFilter(dropFirstByte(t, 'B')))
	require.Equal(t, []string{"A 1", "C 1"}, round())
	require.NoError(t, u.SetGroupFilter(nil))
	require.Equal(t, []string{"A 1", "B 1", "C 1"}, round())
	require.NoError(t, u.SetGroupFilter(nil), "removing no filter")
	require.NoError(t, u.Close())
	require.ErrorIs(t, u.SetGroupFilter(dropFirstByte(t, 'A')), transport.ErrClosed)
	s := open(t, transport.Config{Group: plain.Group(), SendOnly: true, BatchSize: 16})
	require.NoError(t, s.SetGroupFilter(dropFirstByte(t, 'A')), "SendOnly: nothing to filter")
}

// TestTryReadBatchReachesUnicast: a poll reads the group socket every call
// and the unicast socket every fourth, so a queued unicast datagram shows
// within four calls, and a group datagram on the first.
func TestTryReadBatchReachesUnicast(t *testing.T) {
	a := member(t, group(9), nil)
	b := member(t, group(9), a)
	for round := range 6 {
		_, err := a.WriteBatch([][]byte{[]byte("u")}, []netip.AddrPort{b.LocalAddr()})
		require.NoError(t, err)
		calls, got := 0, 0
		for got == 0 && calls < 4 {
			k, err := b.TryReadBatch(make([][]byte, 1), make([]int, 1), nil)
			require.NoError(t, err)
			calls, got = calls+1, k
		}
		require.Equal(t, 1, got, "round %d: unicast datagram not read in %d calls", round, calls)
		_, err = a.WriteBatch([][]byte{[]byte("g")}, nil)
		require.NoError(t, err)
		readN(t, a, 1) // a's own copy
		buf := [][]byte{make([]byte, 8)}
		k, err := b.TryReadBatch(buf, make([]int, 1), nil)
		require.NoError(t, err)
		require.Equal(t, 1, k, "round %d: group datagram not read at once", round)
	}
}

// TestGSOKeepsDatagramBoundaries: with GSO (the default) runs of equal
// datagrams go to the kernel as single messages, and receivers still read
// each datagram on its own, in order, with its length: here runs broken by
// a shorter datagram, a longer one, a unicast destination and the 64
// segment bound. With NoGSO nothing is coalesced and the same arrives.
func TestGSOKeepsDatagramBoundaries(t *testing.T) {
	for _, noGSO := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoGSO=%v", noGSO), func(t *testing.T) {
			a := open(t, transport.Config{Group: group(30 + boolByte(noGSO)), BatchSize: 256, NoGSO: noGSO})
			b := open(t, transport.Config{Group: a.Group(), BatchSize: 256})
			var bufs [][]byte
			var dsts []netip.AddrPort
			add := func(size int, dst netip.AddrPort) {
				p := make([]byte, size)
				binary.LittleEndian.PutUint64(p, uint64(len(bufs)))
				for i := 8; i < size; i++ {
					p[i] = byte(len(bufs) + i)
				}
				bufs = append(bufs, p)
				dsts = append(dsts, dst)
			}
			for range 5 {
				add(1000, netip.AddrPort{})
			}
			add(600, netip.AddrPort{}) // shorter: ends the run
			add(1000, netip.AddrPort{})
			add(1200, netip.AddrPort{}) // longer: starts a new run
			add(1200, b.LocalAddr())    // unicast
			add(1200, b.LocalAddr())
			for range 70 { // more than one message's worth of segments
				add(500, a.Group())
			}
			n, err := a.WriteBatch(bufs, dsts)
			require.NoError(t, err)
			require.Equal(t, len(bufs), n)
			got, _ := readN(t, b, len(bufs))
			// Group and unicast come through two sockets: compare per
			// destination, in order.
			var wantG, wantU, gotG, gotU [][]byte
			for i, p := range bufs {
				if dsts[i] == b.LocalAddr() {
					wantU = append(wantU, p)
				} else {
					wantG = append(wantG, p)
				}
			}
			for _, p := range got {
				if i := binary.LittleEndian.Uint64(p); dsts[i] == b.LocalAddr() {
					gotU = append(gotU, p)
				} else {
					gotG = append(gotG, p)
				}
			}
			require.Equal(t, wantG, gotG)
			require.Equal(t, wantU, gotU)
			st := a.Stats()
			require.Zero(t, st.GSORefused)
			if noGSO {
				require.False(t, st.GSO)
				require.Zero(t, st.GSOSends)
			} else {
				require.True(t, st.GSO, "this kernel (Linux 4.18+) takes UDP_SEGMENT")
				// Coalesced: [5x1000, 600], [2x1200 unicast], [64x500],
				// [6x500]; 1000 and the group's 1200 go alone.
				require.Equal(t, uint64(4), st.GSOSends)
			}
		})
	}
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// TestGROSplitsRuns: a receiver with GRO reads a segmented send (a run of
// equal datagrams and a shorter last one) at once and hands the datagrams
// out one by one, in order, with their lengths, also when its batch has
// fewer slots than the run (the rest wait for the next call, which then
// does not block); datagrams sent one by one come through as before.
func TestGROSplitsRuns(t *testing.T) {
	a := open(t, transport.Config{Group: group(40), BatchSize: 64})
	b := open(t, transport.Config{Group: a.Group(), BatchSize: 64, GRO: true})
	var bufs [][]byte
	for i := range 20 {
		size := 1000
		if i == 19 {
			size = 300 // a shorter last datagram ends the run
		}
		p := make([]byte, size)
		binary.LittleEndian.PutUint64(p, uint64(i))
		for j := 8; j < size; j++ {
			p[j] = byte(i * j)
		}
		bufs = append(bufs, p)
	}
	n, err := a.WriteBatch(bufs, nil)
	require.NoError(t, err)
	require.Equal(t, len(bufs), n)
	require.Equal(t, uint64(1), a.Stats().GSOSends)
	// One by one too: a single datagram, then a run of two of another size.
	_, err = a.WriteBatch([][]byte{numbered(100, 1, 50)[0]}, nil)
	require.NoError(t, err)
	_, err = a.WriteBatch(numbered(101, 2, 700), nil)
	require.NoError(t, err)

	// Read with 3 slots at a time: 23 datagrams over 8 calls.
	require.NoError(t, b.SetReadDeadline(time.Now().Add(10*time.Second)))
	rb := newBatch(3, 2048)
	var got [][]byte
	for len(got) < 23 {
		k, err := b.ReadBatch(rb.bufs, rb.sizes, rb.srcs)
		require.NoError(t, err)
		for i := range k {
			got = append(got, append([]byte(nil), rb.bufs[i][:rb.sizes[i]]...))
			require.Equal(t, a.LocalAddr(), rb.srcs[i])
		}
	}
	require.Equal(t, bufs, got[:20])
	require.Equal(t, numbered(100, 1, 50)[0], got[20])
	require.Equal(t, numbered(101, 2, 700), got[21:])
	st := b.Stats()
	require.Zero(t, st.Truncated)
	require.True(t, st.GRO)
	require.Equal(t, uint64(2), st.GRORuns, "the runs of 20 and of 2 were each read at once")
	// Nothing left: a non-blocking read finds nothing.
	k, err := b.TryReadBatch(rb.bufs, rb.sizes, rb.srcs)
	require.NoError(t, err)
	require.Zero(t, k)
}

// TestGROTruncatesIntoSmallBuffers: a datagram of a run longer than the
// caller's slot is cut to it and counted, as a plain read would.
func TestGROTruncatesIntoSmallBuffers(t *testing.T) {
	a := open(t, transport.Config{Group: group(41), BatchSize: 64})
	b := open(t, transport.Config{Group: a.Group(), BatchSize: 64, GRO: true})
	_, err := a.WriteBatch(numbered(0, 4, 1000), nil)
	require.NoError(t, err)
	require.NoError(t, b.SetReadDeadline(time.Now().Add(10*time.Second)))
	rb := newBatch(8, 600)
	got := 0
	for got < 4 {
		k, err := b.ReadBatch(rb.bufs, rb.sizes, rb.srcs)
		require.NoError(t, err)
		for i := range k {
			require.Equal(t, 600, rb.sizes[i])
			require.Equal(t, uint64(got), binary.LittleEndian.Uint64(rb.bufs[i]))
			got++
		}
	}
	require.Equal(t, uint64(4), b.Stats().Truncated)
}

// TestZeroAllocsGSOAndGRO: a segmented send read back through GRO's
// staging allocates nothing either.
func TestZeroAllocsGSOAndGRO(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	a := open(t, transport.Config{Group: group(42), BatchSize: 64})
	b := open(t, transport.Config{Group: a.Group(), BatchSize: 64, GRO: true})
	const k = 16
	out := numbered(0, k, 1000)
	in := newBatch(5, 2048)
	roundTrip := func() {
		if n, err := a.WriteBatch(out, nil); err != nil || n != k {
			t.Fatalf("WriteBatch: %d, %v", n, err)
		}
		for got := 0; got < k; {
			n, err := b.ReadBatch(in.bufs, in.sizes, in.srcs)
			if err != nil {
				t.Fatalf("ReadBatch: %v", err)
			}
			got += n
		}
	}
	roundTrip() // warm up
	allocs := testing.AllocsPerRun(200, roundTrip)
	require.Zero(t, allocs, "allocations per segmented WriteBatch and GRO reads")
	require.Positive(t, b.Stats().GRORuns)
}
