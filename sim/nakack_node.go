package sim

import (
	"fmt"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/wire"
)

// NakackNode runs one *nakack.Protocol as a Node: every datagram is copied
// into a buffer from the node's own wire.Pool before Receive (as the engine
// does with a received datagram), and after every call into the protocol the
// application polls everything deliverable into its Recorder.
type NakackNode struct {
	// P is the protocol; tests may call it directly (inside Sim.Do so that
	// its output is sent).
	P *nakack.Protocol
	// Rec is the node's application.
	Rec *Recorder
	// Pool is the node's buffer pool.
	Pool *wire.Pool

	sim      *Sim
	member   digest.Member
	handler  recorderHandler
	recvErrs uint64
	noBuf    uint64
	stalled  bool
}

// recorderHandler adapts a Recorder to nakack.Handler.
type recorderHandler struct{ r *Recorder }

func (h recorderHandler) Deliver(sender digest.Member, seq uint64, payload []byte) {
	h.r.Deliver(sender, seq, payload)
}

func (h recorderHandler) Lost(sender digest.Member, from, to uint64) { h.r.Lost(sender, from, to) }

// pollLimit is how many deliveries one Poll call may make; the node polls
// until nothing is left, so a limit that ends inside a run is exercised.
const pollLimit = 64

// NewNakackNode makes a node for cfg (cfg.Pool is created if nil, with
// maxDatagram 8 KiB and no budget) recording into a new Recorder over ledger.
func NewNakackNode(s *Sim, cfg nakack.Config, ledger *Ledger) (*NakackNode, error) {
	if cfg.Pool == nil {
		cfg.Pool = wire.NewPool(8<<10, 0)
	}
	p, err := nakack.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("sim: node %v: %w", cfg.Self, err)
	}
	n := &NakackNode{P: p, Pool: cfg.Pool, sim: s, member: cfg.Self, Rec: NewRecorder(s, cfg.Self, ledger)}
	n.handler = recorderHandler{n.Rec}
	return n, nil
}

// Member implements Node.
func (n *NakackNode) Member() digest.Member { return n.member }

// Receive implements Node: the datagram is copied into a pooled buffer (a
// datagram the pool refuses is dropped and counted, as the engine would).
func (n *NakackNode) Receive(from digest.Member, datagram []byte, now time.Duration) {
	buf := n.Pool.Get(len(datagram))
	if buf == nil {
		n.noBuf++
		return
	}
	buf.N = copy(buf.B, datagram)
	if err := n.P.Receive(buf, now); err != nil {
		n.recvErrs++
	}
	buf.Release()
	n.poll()
}

// Tick implements Node.
func (n *NakackNode) Tick(now time.Duration) {
	n.P.Tick(now)
	n.poll()
}

// NextDeadline implements Node.
func (n *NakackNode) NextDeadline() time.Duration {
	if d := n.P.NextDeadline(); d != nakack.NoDeadline {
		return d
	}
	return Never
}

// Drain implements Node: it hands every outgoing datagram to send and
// releases the outbox's reference.
func (n *NakackNode) Drain(send func(to digest.Member, datagram []byte)) {
	out := n.P.Outbox()
	if len(out) == 0 {
		return
	}
	for _, o := range out {
		send(o.To, o.Buf.Bytes())
		o.Buf.Release()
	}
	n.P.ClearOutbox()
}

// Send implements Sender.
func (n *NakackNode) Send(payload []byte, now time.Duration) (first, last uint64, err error) {
	first, err = n.P.Send(payload, now)
	if err != nil {
		return 0, 0, err
	}
	return first, n.P.NextSeq() - 1, nil
}

// Flush implements Sender.
func (n *NakackNode) Flush(now time.Duration) {
	n.P.Flush(now)
	n.poll()
}

// poll delivers everything deliverable to the recorder, unless the
// application is stalled.
func (n *NakackNode) poll() {
	for !n.stalled && n.P.Poll(n.handler, pollLimit) > 0 {
	}
}

// Stall stops (true) or resumes (false) the node's application: a stalled
// one delivers nothing, like an application that stopped consuming, and
// one that resumes delivers what waits at once. Call it inside Sim.Do.
func (n *NakackNode) Stall(stalled bool) {
	n.stalled = stalled
	n.poll()
}

// ReceiveErrors returns how many datagrams Receive rejected with an error.
func (n *NakackNode) ReceiveErrors() uint64 { return n.recvErrs }

// NoBuffer returns how many datagrams were dropped because the pool refused
// a buffer.
func (n *NakackNode) NoBuffer() uint64 { return n.noBuf }
