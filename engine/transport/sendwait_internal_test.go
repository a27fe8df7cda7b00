//go:build linux

package transport

import (
	"errors"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestSocketsOutsideGoPoller: both sockets are blocking-mode files, which
// os.NewFile keeps out of Go's poller (see UDP: registered, every datagram
// sent or queued woke a parked runtime thread). Reads and writes pass
// MSG_DONTWAIT instead, so blocking mode never blocks them.
func TestSocketsOutsideGoPoller(t *testing.T) {
	u, err := Open(Config{Group: netip.MustParseAddrPort("239.77.9.1:0"), BatchSize: 4})
	require.NoError(t, err)
	defer u.Close()
	for name, f := range map[string]*os.File{"group": u.gfile, "unicast": u.ufile} {
		var flags int
		var ferr error
		raw, err := f.SyscallConn()
		require.NoError(t, err)
		require.NoError(t, raw.Control(func(fd uintptr) { flags, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }))
		require.NoError(t, ferr)
		require.Zero(t, flags&unix.O_NONBLOCK, "%s socket is non-blocking: os.NewFile would register it with Go's poller", name)
	}
	// And a read with nothing queued still returns at once.
	bufs, sizes := [][]byte{make([]byte, 64)}, []int{0}
	n, err := u.TryReadBatch(bufs, sizes, nil)
	require.NoError(t, err)
	require.Zero(t, n)
}

// fullSocketUDP returns a UDP whose sending socket is one end of an AF_UNIX
// datagram socketpair whose peer never reads, filled until a send would
// block, and the peer's descriptor.
func fullSocketUDP(t *testing.T) (*UDP, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fds[1]) })
	require.NoError(t, unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 4096))
	for {
		_, err := unix.SendmsgN(fds[0], make([]byte, 512), nil, nil, unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EAGAIN) {
			break
		}
		require.NoError(t, err)
	}
	u := &UDP{ufile: os.NewFile(uintptr(fds[0]), "full")}
	u.uraw, err = u.ufile.SyscallConn()
	require.NoError(t, err)
	u.wr.boundSend = u.send
	u.wr.init(4)
	// saLen 0: no destination name, the socketpair's peer gets it.
	return u, fds[1]
}

// waitSendWaits spins until the writer has started waiting on a full buffer.
func waitSendWaits(t *testing.T, u *UDP) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for u.sendWaits.Load() == 0 {
		require.True(t, time.Now().Before(deadline), "the write never waited on the full buffer")
		runtime.Gosched()
	}
}

// TestSendWaitsForRoom: a write that finds the send buffer full waits
// (poll(2), the socket being outside Go's poller) and completes once the
// peer drains it; nothing is dropped or reported as an error.
func TestSendWaitsForRoom(t *testing.T) {
	u, peer := fullSocketUDP(t)
	defer u.Close()
	done := make(chan error, 1)
	go func() {
		n, err := u.WriteBatch([][]byte{make([]byte, 512), make([]byte, 512)}, nil)
		if err == nil && n != 2 {
			err = errors.New("short write")
		}
		done <- err
	}()
	waitSendWaits(t, u)
	buf := make([]byte, 1024)
	for { // drain everything queued, then the write's own datagrams
		if _, _, err := unix.Recvfrom(peer, buf, unix.MSG_DONTWAIT); err != nil {
			break
		}
	}
	require.NoError(t, <-done)
	require.Equal(t, uint64(u.sendWaits.Load()), u.Stats().SendWaits)
}

// TestCloseEndsSendWait: Close ends a write waiting on a full buffer with
// ErrClosed, within one poll step.
func TestCloseEndsSendWait(t *testing.T) {
	u, _ := fullSocketUDP(t)
	done := make(chan error, 1)
	go func() {
		_, err := u.WriteBatch([][]byte{make([]byte, 512)}, nil)
		done <- err
	}()
	waitSendWaits(t, u)
	require.NoError(t, u.Close())
	require.ErrorIs(t, <-done, ErrClosed)
}

// TestGSORefusedFallsBack: when the kernel refuses a segmented send (here
// EINVAL: the socket sends without UDP checksums, SO_NO_CHECK, which GSO
// needs), the transport sends the run again datagram by datagram, turns
// GSO off for good and counts it; nothing is lost or reported as an error.
func TestGSORefusedFallsBack(t *testing.T) {
	a, err := Open(Config{Group: netip.MustParseAddrPort("239.77.9.2:0"), BatchSize: 16})
	require.NoError(t, err)
	defer a.Close()
	b, err := Open(Config{Group: a.Group(), BatchSize: 16})
	require.NoError(t, err)
	defer b.Close()
	require.True(t, a.Stats().GSO)
	var serr error
	require.NoError(t, a.uraw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1)
	}))
	require.NoError(t, serr)
	out := make([][]byte, 6)
	for i := range out {
		out[i] = make([]byte, 500)
		out[i][0] = byte(i)
	}
	n, err := a.WriteBatch(out, nil)
	require.NoError(t, err)
	require.Equal(t, len(out), n)
	st := a.Stats()
	require.False(t, st.GSO)
	require.Equal(t, uint64(1), st.GSORefused)
	require.Zero(t, st.GSOSends)

	require.NoError(t, b.SetReadDeadline(time.Now().Add(10*time.Second)))
	bufs, sizes := make([][]byte, 8), make([]int, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 1000)
	}
	for got := 0; got < len(out); {
		k, err := b.ReadBatch(bufs, sizes, nil)
		require.NoError(t, err)
		for i := range k {
			require.Equal(t, 500, sizes[i])
			require.Equal(t, byte(got), bufs[i][0])
			got++
		}
	}
}
