package engine

import (
	"errors"
	"net/netip"
	"os"
	"time"

	"github.com/nakcast/nakcast/engine/transport"
	"github.com/nakcast/nakcast/gms"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/wire"
)

// recvState is the receive part's state (see agent).
type recvState struct {
	rbufs []*wire.Buffer
	// unfilled bounds the read slots that may hold no buffer: slots from
	// it on do, so fill looks only at rbufs[:unfilled] (a read of n
	// datagrams can empty only its first n slots). A spinning agent fills
	// before every read, mostly after reads that found nothing.
	unfilled  int
	rbytes    [][]byte
	sizes     []int
	srcs      []netip.AddrPort
	nread     int
	routes    *routes     // who may send what from where, and where unicasts go (routes.go)
	held      []heldDgram // datagrams of static members not bound yet (admit.go)
	heldBytes int
	group     uint32
	small     int           // datagrams up to this size are copied into a smaller buffer
	readAt    time.Duration // a busy sender's next read (see busyReadInterval)
	readLast  bool          // the last cycle read (see readDue)
}

// read reads a batch of datagrams into the read slots without blocking,
// unless the last read's are still to process or this cycle sends first
// (readDue).
func (a *agent) read() {
	m := a.m
	if a.nread != 0 || !a.readDue() || !a.fill() {
		return
	}
	n, err := m.tr.TryReadBatch(a.rbytes, a.sizes, a.srcs)
	a.readErr(err)
	a.nread = n
	if n == 0 && !a.dedicated && a.sending {
		a.readAt = m.now() + busyReadInterval
	}
}

// receive hands what read read to the protocol (receiveOne) and, in push
// mode, delivers between datagrams: a STABLE that the protocol sends from
// inside Receive then reports what was delivered up to the previous
// datagram, not up to the previous read batch (up to 4 MiB behind).
func (a *agent) receive(now time.Duration) int {
	m := a.m
	n := a.nread
	if n == 0 {
		return 0
	}
	a.nread = 0
	a.unfilled = max(a.unfilled, n)
	m.ctr.datagramsIn.Add(uint64(n))
	push := m.cfg.Handler != nil
	for i := 0; i < n; i++ {
		a.receiveOne(i, now)
		if p := m.proto; push && p != nil {
			d := p.Poll(a.pushH, m.cfg.DeliverBatch)
			m.ctr.delivered.Add(uint64(d))
		}
	}
	return n
}

// maxDeliverRounds bounds the delivery batches of one push-mode cycle.
const maxDeliverRounds = 16

// deliver is the delivery part: in push mode it keeps up with what this
// cycle sent and received (one batch a cycle let the member's own
// messages, a whole ring of which can be sent in one cycle, pile up
// undelivered, and since stability waits for every member's delivered,
// own included, the sender's window filled and it stalled), bounded so
// that a flood cannot hold the lock for ever; in pull mode it fills the
// delivery ring Poll reads (deliverPull), and a closing member discards
// what the application no longer polls.
func (a *agent) deliver(p *nakack.Protocol, closing bool) (work int) {
	m := a.m
	switch {
	case m.cfg.Handler != nil:
		for range maxDeliverRounds {
			n := p.Poll(a.pushH, m.cfg.DeliverBatch)
			m.ctr.delivered.Add(uint64(n))
			work += n
			if n < m.cfg.DeliverBatch {
				break
			}
		}
	case closing:
		n := p.Poll(a.drop, m.cfg.DeliverBatch)
		m.ctr.discardedOnClose.Add(uint64(n))
		work += n
	default:
		work += a.deliverPull(p)
	}
	return work
}

// deliverPull is the delivery part in pull mode: what waits in the spill
// moves into the delivery ring, then the protocol delivers into the ring
// as far as it has room. When it runs out of room the agent stalls: the
// Poll that makes room wakes it (delivery.stall).
func (a *agent) deliverPull(p *nakack.Protocol) (work int) {
	d := a.dlv
	d.begin()
	work = d.flush()
	for range maxDeliverRounds {
		room := d.room()
		if !d.idle() || room == 0 {
			break
		}
		lim := min(room, a.m.cfg.DeliverBatch)
		n := p.Poll(a.pullH, lim)
		work += n
		if n < lim {
			break
		}
	}
	work += d.flush()
	d.r.Publish()
	if !d.idle() || d.room() == 0 {
		d.stall()
	}
	return work
}

// fill makes sure every read slot holds a buffer. It reports false when the
// pool is over budget (the read is skipped this iteration and counted).
func (a *agent) fill() bool {
	for i, b := range a.rbufs[:a.unfilled] {
		if b == nil {
			b = a.m.pool.Get(a.m.cfg.MaxDatagram)
			if b == nil {
				a.m.ctr.dropNoBuffer.Add(1)
				return false
			}
			a.rbufs[i] = b
			a.rbytes[i] = b.B[:a.m.cfg.MaxDatagram]
		}
	}
	a.unfilled = 0
	return true
}

// busyReadInterval is how long a busy sender waits, after a read found
// both sockets empty, before it reads again. A sender streaming its own
// messages mostly finds nothing to read (its own datagrams are filtered
// out in the kernel; what arrives is the odd STABLE or NAK), and each empty
// read is two recvmmsg system calls: about 12 ns a message of 64 B before
// this limit. Control messages so wait at most this long while the agent
// is busy sending; an agent that is not sending reads every iteration.
const busyReadInterval = 20 * time.Microsecond

// readDue reports whether this iteration reads the sockets.
// (a.sending belongs to the sender goroutine with ThreadingDedicated,
// whose receiver goroutine always reads.)
//
// An iteration that finds messages in the log buffer (or an open
// bundle: ThreadingInvoked's TrySendBatch writes into it) right after an
// iteration that read sends them first, without reading: a reply the
// application committed after the last iteration (ThreadingInvoked's
// TrySend between two DoWork calls, or a producer woken by a delivery)
// goes out without waiting for a recvmmsg that, in a request-reply
// exchange, finds the socket empty: one system call less per hop of a
// ping-pong. The next iteration reads, so reads at worst alternate with
// sends while the ring stays busy.
func (a *agent) readDue() bool {
	if a.dedicated {
		return true
	}
	if a.readLast && (a.unflushed || a.m.q.pending()) {
		a.readLast = false
		return false
	}
	a.readLast = !a.sending || a.m.now() >= a.readAt
	return a.readLast
}

func (a *agent) readErr(err error) {
	switch {
	case err == nil:
	case errors.Is(err, os.ErrDeadlineExceeded):
	case errors.Is(err, transport.ErrClosed):
	default:
		a.m.ctr.socketErrors.Add(1)
		a.m.log.rateLimited("read", err)
	}
}

// receiveOne hands datagram i to the protocol: the routing table's check
// of its source (admit), small-datagram compaction.
func (a *agent) receiveOne(i int, now time.Duration) {
	m := a.m
	b := a.rbufs[i]
	n := a.sizes[i]
	h, body, err := wire.DecodeHeader(b.B[:n], a.group)
	if err != nil {
		// Dropped before the protocol; the buffer stays in its slot.
		if errors.Is(err, wire.ErrForeignGroup) {
			m.ctr.dropForeignGroup.Add(1)
		} else {
			m.ctr.dropMalformed.Add(1)
		}
		return
	}
	if (m.sec != nil || h.Auth()) && !a.verify(b.B[:n], h, now) {
		return // counted by reason; the buffer stays in its slot
	}
	if !a.admit(h, b.B[:n], body, a.srcs[i], now) {
		return // counted; the buffer stays in its slot
	}
	if gms.IsMembership(h.Type) {
		// gms copies what it keeps: the buffer stays in its slot.
		m.ctr.membershipIn.Add(1)
		if err := m.g.Receive(b.B[:n], now); err != nil {
			m.ctr.dropMalformed.Add(1)
		}
		return
	}
	if m.proto == nil {
		m.ctr.dropNotJoined.Add(1)
		return
	}
	a.rbufs[i] = nil
	b.N = n
	// A small datagram (a lone message, a control message) would pin a
	// MaxDatagram buffer while the window retains it: copy it to its size
	// class and reuse the big one.
	if n <= a.small {
		if c := m.pool.Get(n); c != nil {
			c.N = copy(c.B, b.B[:n])
			a.rbufs[i] = b
			b = c
		}
	}
	if err := m.proto.Receive(b, now); err != nil {
		m.ctr.receiveErrors.Add(1)
	}
	b.Release()
}
