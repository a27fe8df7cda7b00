package engine

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine/transport"
	"github.com/nakcast/nakcast/wire"
)

// queue adds one outgoing datagram to the write batch, resolving a unicast
// destination through the routing table; a member without an address (a
// static member not bound yet) is reached through the group (every member
// decodes it and the protocol ignores what is not for it).
func (a *agent) queue(w *wbatch, to digest.Member, b *wire.Buffer) {
	var dst netip.AddrPort
	if !to.IsZero() {
		var ok bool
		if dst, ok = a.routes.lookup(to); !ok {
			a.m.ctr.unicastViaGroup.Add(1)
		}
	}
	w.q = append(w.q, b)
	w.b = append(w.b, b.Bytes())
	w.dsts = append(w.dsts, dst)
}

// takeOutbox moves the protocol's outbox into w (under the lock).
func (a *agent) takeOutbox(w *wbatch) {
	p := a.m.proto
	for _, o := range p.Outbox() {
		a.queue(w, o.To, o.Buf)
	}
	p.ClearOutbox()
}

// wbatch is one goroutine's batch of datagrams to write (q[i] is nil for a
// gms datagram, whose bytes gms owns).
type wbatch struct {
	q    []*wire.Buffer
	b    [][]byte
	dsts []netip.AddrPort
	max  int // the largest batch written (tests)
}

func (w *wbatch) init(n int) {
	w.q = make([]*wire.Buffer, 0, n)
	w.b = make([][]byte, 0, n)
	w.dsts = make([]netip.AddrPort, 0, n)
}

// queueGMS moves gms's outbox into the write batch: multicasts to the
// group, unicasts to the peer's unicast address. An address that does not
// parse, or that the transport's safety rules would refuse (which would
// fail the whole batch), is dropped and counted.
func (a *agent) queueGMS(w *wbatch) {
	m := a.m
	for _, o := range m.g.Outbox() {
		var dst netip.AddrPort
		if !o.To.IsZero() {
			var ok bool
			if dst, ok = a.gaddrs[o.To.Addr]; !ok {
				d, err := netip.ParseAddrPort(o.To.Addr)
				if err != nil || !a.unicastOK(d) {
					m.ctr.dropBadAddress.Add(1)
					m.log.rateLimited("membership address", fmt.Errorf("peer %v: address %q refused", o.To.Member, o.To.Addr))
					continue
				}
				if len(a.gaddrs) > 4*a.viewSize+64 {
					clear(a.gaddrs)
				}
				a.gaddrs[o.To.Addr], dst = d, d
			}
			a.routes.noteExchange(o.To.Member, dst)
		}
		w.q = append(w.q, nil)
		w.b = append(w.b, o.Data)
		w.dsts = append(w.dsts, dst)
	}
	m.g.ClearOutbox()
}

// unicastOK reports whether the transport may send to d.
func (a *agent) unicastOK(d netip.AddrPort) bool {
	ad := d.Addr()
	return d.Port() != 0 && !ad.IsMulticast() && !ad.IsUnspecified() && ad.Is4() == a.m.cfg.Group.Addr().Is4() &&
		(ad.IsLoopback() || a.m.cfg.AllowNonLoopback)
}

// write sends w (outside the protocol lock) and releases its buffers. With
// ThreadingDedicated both goroutines write; the transport's write state is
// not shared between calls, so they take turns on m.wmu.
func (a *agent) write(w *wbatch) {
	if len(w.q) == 0 {
		return
	}
	m := a.m
	if a.dedicated {
		m.wmu.Lock()
	}
	if m.sec != nil {
		m.sec.seal(w, m.pool, &m.ctr)
	}
	n, err := m.tr.WriteBatch(w.b, w.dsts)
	if a.dedicated {
		m.wmu.Unlock()
	}
	m.ctr.datagramsOut.Add(uint64(n))
	if n > 0 && a.peered {
		if k := peers.wake(a.peerGroup, m.q); k > 0 {
			m.ctr.peerWakes.Add(uint64(k))
		}
	}
	w.max = max(w.max, len(w.q))
	if err != nil && !errors.Is(err, transport.ErrClosed) {
		m.ctr.socketErrors.Add(1)
		m.ctr.dropSendFailed.Add(uint64(len(w.q) - n))
		m.log.rateLimited("write", err)
	}
	for i, b := range w.q {
		if b != nil {
			b.Release()
		}
		w.q[i] = nil
		w.b[i] = nil
	}
	w.q, w.b, w.dsts = w.q[:0], w.b[:0], w.dsts[:0]
}
