package memtransport

import (
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/bpf"

	"github.com/nakcast/nakcast/engine/transport"
)

var group = netip.MustParseAddrPort("239.77.0.1:5000")

func open(t *testing.T, n *Network, c transport.Config) transport.Transport {
	t.Helper()
	if !c.Group.IsValid() {
		c.Group = group
	}
	tr, err := n.Open(c)
	require.NoError(t, err)
	t.Cleanup(func() { tr.Close() })
	return tr
}

func bufs(n int) ([][]byte, []int, []netip.AddrPort) {
	b := make([][]byte, n)
	for i := range b {
		b[i] = make([]byte, 2048)
	}
	return b, make([]int, n), make([]netip.AddrPort, n)
}

// TestNetworkGroupAndUnicast: a group datagram reaches every member
// (the sender too, unless NoLoopback), a unicast only its destination,
// each with the sender's address as source.
func TestNetworkGroupAndUnicast(t *testing.T) {
	n := NewNetwork()
	a := open(t, n, transport.Config{})
	b := open(t, n, transport.Config{})
	c := open(t, n, transport.Config{NoLoopback: true})
	require.NotEqual(t, a.LocalAddr(), b.LocalAddr())

	_, err := a.WriteBatch([][]byte{[]byte("to all")}, nil)
	require.NoError(t, err)
	_, err = c.WriteBatch([][]byte{[]byte("from c")}, nil)
	require.NoError(t, err)
	_, err = a.WriteBatch([][]byte{[]byte("to b")}, []netip.AddrPort{b.LocalAddr()})
	require.NoError(t, err)

	bs, sizes, srcs := bufs(8)
	k, err := b.TryReadBatch(bs, sizes, srcs)
	require.NoError(t, err)
	require.Equal(t, 3, k)
	require.Equal(t, "to all", string(bs[0][:sizes[0]]))
	require.Equal(t, a.LocalAddr(), srcs[0])
	require.Equal(t, "from c", string(bs[1][:sizes[1]]))
	require.Equal(t, "to b", string(bs[2][:sizes[2]]))
	k, _ = a.TryReadBatch(bs, sizes, srcs)
	require.Equal(t, 2, k, "a hears itself and c")
	k, _ = c.TryReadBatch(bs, sizes, srcs)
	require.Equal(t, 1, k, "c does not hear itself")

	_, err = a.WriteBatch([][]byte{[]byte("x")}, []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:5")})
	require.ErrorIs(t, err, transport.ErrDestination)
}

// TestTransportDeadlineAndClose: a blocked read returns at its deadline,
// when the deadline moves into the past, and with ErrClosed on Close.
func TestTransportDeadlineAndClose(t *testing.T) {
	n := NewNetwork()
	a := open(t, n, transport.Config{})
	bs, sizes, srcs := bufs(4)
	require.NoError(t, a.SetReadDeadline(time.Now().Add(10*time.Millisecond)))
	_, err := a.ReadBatch(bs, sizes, srcs)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)

	require.NoError(t, a.SetReadDeadline(time.Time{}))
	done := make(chan error, 1)
	go func() { _, err := a.ReadBatch(bs, sizes, srcs); done <- err }()
	require.NoError(t, a.SetReadDeadline(time.Now().Add(-time.Second)))
	require.ErrorIs(t, <-done, os.ErrDeadlineExceeded)

	require.NoError(t, a.SetReadDeadline(time.Time{}))
	go func() { _, err := a.ReadBatch(bs, sizes, srcs); done <- err }()
	require.NoError(t, a.Close())
	require.True(t, errors.Is(<-done, transport.ErrClosed))
}

// TestTransportFilterAndOverflow: the group filter runs over group
// datagrams only; a full queue drops and counts.
func TestTransportFilterAndOverflow(t *testing.T) {
	n := NewNetwork()
	drop, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 8, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 'd', SkipTrue: 1},
		bpf.RetConstant{Val: 0xffffffff},
		bpf.RetConstant{Val: 0},
	})
	require.NoError(t, err)
	a := open(t, n, transport.Config{GroupFilter: drop, RecvBuffer: 13})
	b := open(t, n, transport.Config{})
	_, err = b.WriteBatch([][]byte{[]byte("drop"), []byte("keep"), []byte("d-unicast")}, []netip.AddrPort{{}, {}, a.LocalAddr()})
	require.NoError(t, err)
	_, err = b.WriteBatch([][]byte{[]byte("overflow")}, nil)
	require.NoError(t, err)
	bs, sizes, srcs := bufs(4)
	k, _ := a.TryReadBatch(bs, sizes, srcs)
	require.Equal(t, 2, k)
	require.Equal(t, "keep", string(bs[0][:sizes[0]]))
	require.Equal(t, "d-unicast", string(bs[1][:sizes[1]]))
	require.Equal(t, uint64(1), a.(*Transport).Filtered())
	require.Equal(t, uint64(1), a.(*Transport).Overflows())
}

// receiveAll sends count numbered datagrams from a to f's transport and
// returns what f delivers, in order.
func receiveAll(t *testing.T, f Faults, count int) ([]byte, FaultCounts) {
	n := NewNetwork()
	a := open(t, n, transport.Config{NoLoopback: true})
	fy := f.Wrap(open(t, n, transport.Config{BatchSize: 8}))
	for i := range count {
		_, err := a.WriteBatch([][]byte{{byte(i)}}, nil)
		require.NoError(t, err)
	}
	var got []byte
	bs, sizes, srcs := bufs(8)
	orig := make([]*byte, len(bs))
	for i := range bs {
		orig[i] = &bs[i][0]
	}
	for {
		k, err := fy.TryReadBatch(bs, sizes, srcs)
		require.NoError(t, err)
		for i := range bs {
			require.Same(t, orig[i], &bs[i][0], "buffers stay at their index (the engine knows them by index)")
		}
		if k == 0 {
			break
		}
		for i := range k {
			got = append(got, bs[i][0])
		}
	}
	return got, fy.Counts()
}

// TestFaultsDeterministic: the same seed makes the same faults; each
// kind happens about as often as asked; nothing is invented.
func TestFaultsDeterministic(t *testing.T) {
	f := Faults{Loss: 0.1, Duplicate: 0.1, Reorder: 0.1, Seed: 42}
	require.NoError(t, f.Validate())
	a, ca := receiveAll(t, f, 200)
	b, cb := receiveAll(t, f, 200)
	require.Equal(t, a, b)
	require.Equal(t, ca, cb)
	for _, c := range []uint64{ca.Dropped, ca.Duplicated, ca.Reordered} {
		require.InDelta(t, 20, float64(c), 15)
	}
	require.Equal(t, 200-int(ca.Dropped)+int(ca.Duplicated), len(a))
	seen := map[byte]int{}
	inOrder := true
	for i, x := range a {
		seen[x]++
		if i > 0 && x < a[i-1] {
			inOrder = false
		}
	}
	require.False(t, inOrder, "reordered")
	require.Len(t, seen, 200-int(ca.Dropped))

	c, _ := receiveAll(t, Faults{Loss: 0.1, Duplicate: 0.1, Reorder: 0.1, Seed: 43}, 200)
	require.NotEqual(t, a, c, "another seed, other faults")
	clean, cc := receiveAll(t, Faults{}, 50)
	require.Len(t, clean, 50)
	require.Zero(t, cc)
}

func TestFaultsValidate(t *testing.T) {
	for _, f := range []Faults{{Loss: 1}, {Duplicate: -0.1}, {Reorder: 2}} {
		require.Error(t, f.Validate())
	}
}
