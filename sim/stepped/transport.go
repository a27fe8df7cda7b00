package stepped

import (
	"net/netip"
	"os"
	"time"

	"github.com/nakcast/nakcast/engine/transport"
)

// batchSize is the simulated transport's batch: datagrams per read.
const batchSize = 16

// datagram is one datagram queued in the simulated transport.
type datagram struct {
	b    []byte
	addr netip.AddrPort // the source (read) or destination (written; zero: the group)
}

// simTransport is a member's transport on the simulated network: the
// simulator fills in (Node.Receive) and empties out (Node.Drain); the
// member's duty cycle reads and writes them. It never blocks: a stepped
// member does not idle.
type simTransport struct {
	local, group netip.AddrPort
	in, out      []datagram
	closed       bool
}

var _ transport.Transport = (*simTransport)(nil)

func (t *simTransport) ReadBatch(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (int, error) {
	n, err := t.TryReadBatch(bufs, sizes, srcs)
	if n == 0 && err == nil {
		return 0, os.ErrDeadlineExceeded
	}
	return n, err
}

func (t *simTransport) TryReadBatch(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (int, error) {
	if t.closed {
		return 0, transport.ErrClosed
	}
	n := min(len(bufs), len(sizes), len(t.in), batchSize)
	for i := range n {
		sizes[i] = copy(bufs[i], t.in[i].b)
		if i < len(srcs) {
			srcs[i] = t.in[i].addr
		}
	}
	t.in = append(t.in[:0], t.in[n:]...)
	return n, nil
}

func (t *simTransport) WriteBatch(bufs [][]byte, dsts []netip.AddrPort) (int, error) {
	if t.closed {
		return 0, transport.ErrClosed
	}
	for i, b := range bufs {
		var dst netip.AddrPort
		if i < len(dsts) {
			dst = dsts[i]
		}
		if dst.IsValid() && dst != t.group && !dst.Addr().IsLoopback() {
			return i, transport.ErrDestination
		}
		if dst == t.group {
			dst = netip.AddrPort{}
		}
		t.out = append(t.out, datagram{b: append([]byte(nil), b...), addr: dst})
	}
	return len(bufs), nil
}

func (t *simTransport) SetReadDeadline(time.Time) error { return nil }
func (t *simTransport) LocalAddr() netip.AddrPort       { return t.local }
func (t *simTransport) Group() netip.AddrPort           { return t.group }
func (t *simTransport) BatchSize() int                  { return batchSize }

func (t *simTransport) Close() error {
	if t.closed {
		return transport.ErrClosed
	}
	t.closed = true
	return nil
}
