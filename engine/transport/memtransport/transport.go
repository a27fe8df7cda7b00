package memtransport

import (
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/bpf"

	"github.com/nakcast/nakcast/engine/transport"
)

// Transport is one endpoint of a Network: a receive queue bounded like a
// socket buffer, fed by the other endpoints' writes. It implements
// transport.Transport with its concurrency contract, and
// transport.GroupFilterSetter.
type Transport struct {
	net   *Network
	cfg   transport.Config
	local netip.AddrPort

	mu       sync.Mutex
	queue    []datagram
	queued   int // bytes in queue
	deadline time.Time
	closed   bool
	// changed is closed (and replaced) whenever a blocked reader may have
	// something to do: a datagram queued, the deadline moved, Close.
	changed chan struct{}
	filter  *bpf.VM

	overflows atomic.Uint64
	filtered  atomic.Uint64
}

type datagram struct {
	b   []byte
	src netip.AddrPort
}

func newTransport(n *Network, c transport.Config) *Transport {
	return &Transport{net: n, cfg: c, changed: make(chan struct{})}
}

// enqueue queues a copy of b from src, unless the group filter refuses a
// group datagram or the queue holds RecvBuffer bytes already.
func (t *Transport) enqueue(b []byte, src netip.AddrPort, group bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if group && t.filter != nil && !t.pass(b) {
		t.filtered.Add(1)
		return
	}
	if t.queued+len(b) > t.cfg.RecvBuffer {
		t.overflows.Add(1)
		return
	}
	t.queue = append(t.queue, datagram{b: append([]byte(nil), b...), src: src})
	t.queued += len(b)
	t.signal()
}

// pass runs the group filter over b behind an 8-byte UDP header, as the
// kernel runs SO_ATTACH_FILTER programs.
func (t *Transport) pass(b []byte) bool {
	pkt := make([]byte, 8+len(b))
	copy(pkt[8:], b)
	n, err := t.filter.Run(pkt)
	return err != nil || n > 0
}

// signal wakes blocked readers; t.mu is held.
func (t *Transport) signal() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// ReadBatch implements transport.Transport.
func (t *Transport) ReadBatch(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (int, error) {
	for {
		t.mu.Lock()
		n, err := t.take(bufs, sizes, srcs)
		if n > 0 || err != nil {
			t.mu.Unlock()
			return n, err
		}
		if !t.deadline.IsZero() && !time.Now().Before(t.deadline) {
			t.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		changed, deadline := t.changed, t.deadline
		t.mu.Unlock()
		if deadline.IsZero() {
			<-changed
			continue
		}
		timer := time.NewTimer(time.Until(deadline))
		select {
		case <-changed:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// TryReadBatch implements transport.Transport.
func (t *Transport) TryReadBatch(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.take(bufs, sizes, srcs)
}

// take moves up to a batch of queued datagrams into bufs; t.mu is held.
func (t *Transport) take(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (int, error) {
	if t.closed {
		return 0, transport.ErrClosed
	}
	n := min(len(bufs), len(sizes), t.cfg.BatchSize, len(t.queue))
	for i := range n {
		d := t.queue[i]
		sizes[i] = copy(bufs[i], d.b)
		if i < len(srcs) {
			srcs[i] = d.src
		}
		t.queued -= len(d.b)
	}
	t.queue = append(t.queue[:0], t.queue[n:]...)
	return n, nil
}

// WriteBatch implements transport.Transport: every datagram is delivered
// (or dropped by a full receiver) before it returns.
func (t *Transport) WriteBatch(bufs [][]byte, dsts []netip.AddrPort) (int, error) {
	for i := range bufs {
		if i < len(dsts) && dsts[i].IsValid() && !transport.DestinationAllowed(dsts[i], t.cfg.Group, t.cfg.AllowNonLoopback) {
			return 0, transport.ErrDestination
		}
	}
	if t.isClosed() {
		return 0, transport.ErrClosed
	}
	for i, b := range bufs {
		var dst netip.AddrPort
		if i < len(dsts) {
			dst = dsts[i]
		}
		t.net.deliver(t, b, dst)
	}
	return len(bufs), nil
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// SetReadDeadline implements transport.Transport.
func (t *Transport) SetReadDeadline(d time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.deadline = d
	t.signal()
	return nil
}

// SetGroupFilter implements transport.GroupFilterSetter: prog runs over
// every group datagram queued from now on.
func (t *Transport) SetGroupFilter(prog []bpf.RawInstruction) error {
	var vm *bpf.VM
	if len(prog) > 0 {
		insts, ok := bpf.Disassemble(prog)
		if !ok {
			return transport.ErrInvalidConfig
		}
		var err error
		if vm, err = bpf.NewVM(insts); err != nil {
			return err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.filter = vm
	return nil
}

// LocalAddr implements transport.Transport.
func (t *Transport) LocalAddr() netip.AddrPort { return t.local }

// Group implements transport.Transport.
func (t *Transport) Group() netip.AddrPort { return t.cfg.Group }

// BatchSize implements transport.Transport.
func (t *Transport) BatchSize() int { return t.cfg.BatchSize }

// Info describes the transport as the UDP backend's Info does (no socket
// buffers: RecvBuffer is the queue's bound).
func (t *Transport) Info() transport.Info {
	return transport.Info{Interface: t.cfg.Interface, Group: t.cfg.Group, Local: t.local, BatchSize: t.cfg.BatchSize,
		GroupRecvBuffer: t.cfg.RecvBuffer, UnicastRecvBuffer: t.cfg.RecvBuffer, MulticastLoop: !t.cfg.NoLoopback}
}

// Overflows returns the datagrams dropped because the queue was full.
func (t *Transport) Overflows() uint64 { return t.overflows.Load() }

// Filtered returns the group datagrams the group filter dropped.
func (t *Transport) Filtered() uint64 { return t.filtered.Load() }

// Close implements transport.Transport.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return transport.ErrClosed
	}
	t.closed = true
	t.queue, t.queued = nil, 0
	t.signal()
	t.mu.Unlock()
	t.net.remove(t)
	return nil
}
