package stepped

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine"
	"github.com/nakcast/nakcast/engine/transport"
	"github.com/nakcast/nakcast/sim"
)

// maxCycles bounds the duty cycles of one step: a member that still has
// work after that many continues at its next deadline.
const maxCycles = 64

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// Node is one member on the simulated network: an engine.Member once
// opened (Cluster.Join), nothing before.
type Node struct {
	c    *Cluster
	id   uint64
	tr   simTransport
	m    *engine.Member
	app  *App
	next time.Duration
	// Events are the member's engine events, in order (PollEvents after
	// every duty cycle).
	Events []engine.Event
	// sent counts the messages TrySend accepted, per incarnation.
	sent map[digest.Member]uint64
	evs  [16]engine.Event
}

// Member implements sim.Node: the node's address on the virtual network.
func (n *Node) Member() digest.Member { return digest.Member{ID: n.id} }

// ID returns the node's member id.
func (n *Node) ID() uint64 { return n.id }

// Engine returns the member, nil before it is opened.
func (n *Node) Engine() *engine.Member { return n.m }

// App returns the node's application.
func (n *Node) App() *App { return n.app }

// Sent returns how many messages incarnation self had accepted for sending.
func (n *Node) Sent(self digest.Member) uint64 { return n.sent[self] }

// open opens the member at now: its join begins.
func (n *Node) open() error {
	cfg := engine.Config{
		Group:   n.tr.group,
		Self:    digest.Member{ID: n.id, Inc: 1},
		Handler: n.app,
		Logger:  discard,
		Transport: engine.TransportConfig{Open: func(transport.Config) (transport.Transport, error) {
			return &n.tr, nil
		}},
		Tuning: engine.TuningConfig{RingCapacity: 256, Window: 4096, PoolBytes: 16 << 20},
	}
	if n.c.cfg.Engine != nil {
		n.c.cfg.Engine(&cfg)
	}
	m, err := engine.OpenStepped(cfg, engine.Stepping{Now: n.c.s.Now, Seed: n.c.s.Seed() ^ n.id})
	if err != nil {
		return fmt.Errorf("member %d: %w", n.id, err)
	}
	n.m = m
	n.step()
	return nil
}

// step runs duty cycles until the member is idle (or maxCycles), or
// has closed (Cluster.Leave).
func (n *Node) step() {
	for range maxCycles {
		if n.m.StepClosed() {
			n.next = sim.Never
			return
		}
		work, next, err := n.m.Step()
		if err != nil {
			n.c.s.Fail(fmt.Errorf("member %d: %w", n.id, err))
			return
		}
		n.next = next
		n.pollEvents()
		if work == 0 && len(n.tr.in) == 0 {
			return
		}
	}
}

func (n *Node) pollEvents() {
	for {
		k := n.m.PollEvents(n.evs[:])
		for _, e := range n.evs[:k] {
			n.Events = append(n.Events, e)
			n.c.trace(n.id, 'e', e.Sender, uint64(e.Kind)<<32|uint64(len(e.Members)), e.View.Counter)
		}
		if k < len(n.evs) {
			return
		}
	}
}

// Receive implements sim.Node.
func (n *Node) Receive(from digest.Member, b []byte, now time.Duration) {
	if n.m == nil || (n.c.cfg.Drop != nil && n.c.cfg.Drop(from.ID, n.id, b)) {
		return
	}
	n.tr.in = append(n.tr.in, datagram{b: append([]byte(nil), b...), addr: n.c.addrOf(from.ID)})
	n.step()
}

// Tick implements sim.Node.
func (n *Node) Tick(now time.Duration) {
	if n.m != nil {
		n.step()
	}
}

// NextDeadline implements sim.Node.
func (n *Node) NextDeadline() time.Duration {
	if n.m == nil {
		return sim.Never
	}
	return n.next
}

// Drain implements sim.Node: the datagrams the member wrote, a unicast to
// an address no node has is dropped.
func (n *Node) Drain(send func(to digest.Member, datagram []byte)) {
	for _, d := range n.tr.out {
		var to digest.Member
		if d.addr.IsValid() {
			id, ok := n.c.idOf(d.addr)
			if !ok {
				continue
			}
			to = digest.Member{ID: id}
		}
		send(to, d.b)
	}
	clear(n.tr.out)
	n.tr.out = n.tr.out[:0]
}

// View returns the member's installed view (nil before it is opened).
func (n *Node) View() (digest.ViewID, []digest.Member) {
	if n.m == nil {
		return digest.ViewID{}, nil
	}
	return n.m.View()
}

// send offers one traffic message to the member, when it is in a view.
func (n *Node) send(k int) {
	if _, v := n.View(); len(v) == 0 {
		return
	}
	self := n.m.Self()
	if n.m.TrySend(payload(n.id, k)) == nil {
		if n.sent == nil {
			n.sent = map[digest.Member]uint64{}
		}
		n.sent[self]++
	}
	n.step()
}
