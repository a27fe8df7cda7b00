package gms

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/sim"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// realNode runs a GMS over the real nakack (through NakackProtocol) as a
// sim.Node: membership datagrams go to gms, the rest to nakack. Every
// incarnation gets a fresh nakack and a fresh application (fakeApp: FIFO
// exactly-once checks and the replicated fold used for state transfer).
type realNode struct {
	h      *rharness
	id     uint64
	g      *GMS
	pool   *wire.Pool
	nk     *NakackProtocol
	app    *fakeApp
	apps   []*fakeApp // every incarnation's application, oldest first
	nks    []*NakackProtocol
	hide   map[digest.Member]bool // the protocol's digest omits these (seed 002)
	caps   map[uint64]capRec      // captures the current incarnation holds
	views  []View
	left   []error
	states []error
	susp   []suspicion
	unsusp []suspicion
	rejoin bool
}

// hidingProto hides digest entries of a real nakack, as if it had installed
// a view without yet setting those members' entries (seed 002), and records
// every capture it hands out until released (for the stability checks).
type hidingProto struct {
	*NakackProtocol
	n *realNode
}

// capRec is a capture held by a node: its digest and whether it holds
// stability at Low (merge) or at Delivered.
type capRec struct {
	d     digest.Digest
	merge bool
}

func (h hidingProto) filter(d digest.Digest) digest.Digest {
	var es []digest.Entry
	for _, e := range d.Entries() {
		if !h.n.hide[e.Member] {
			es = append(es, e)
		}
	}
	return digest.New(es)
}

func (h hidingProto) Digest() digest.Digest { return h.filter(h.NakackProtocol.Digest()) }

func (h hidingProto) CaptureDigest(now time.Duration) (uint64, digest.Digest) {
	id, d := h.NakackProtocol.CaptureDigest(now)
	h.n.caps[id] = capRec{d: d}
	return id, h.filter(d)
}

func (h hidingProto) CaptureMergeDigest(now time.Duration) (uint64, digest.Digest) {
	id, d := h.NakackProtocol.CaptureMergeDigest(now)
	h.n.caps[id] = capRec{d: d, merge: true}
	return id, d
}

func (h hidingProto) ReleaseCapture(id uint64, now time.Duration) {
	delete(h.n.caps, id)
	h.NakackProtocol.ReleaseCapture(id, now)
}

func (n *realNode) Member() digest.Member { return digest.Member{ID: n.id} }

func (n *realNode) self() digest.Member { return n.g.Self().Member }

// p returns the current incarnation's nakack, nil when not a member.
func (n *realNode) p() *nakack.Protocol {
	if n.g.Protocol() == nil {
		return nil
	}
	return n.nk.P
}

// sent is how many seqnos the current incarnation has sent.
func (n *realNode) sent() uint64 { return n.nk.P.NextSeq() - 1 }

func (n *realNode) Deliver(s digest.Member, seq uint64, payload []byte) {
	n.app.deliver(s, seq, payload)
}
func (n *realNode) Lost(s digest.Member, from, to uint64) { n.app.lostRange(s, from, to) }

func (n *realNode) ViewInstalled(v View)     { n.views = append(n.views, v) }
func (n *realNode) StateInstalled(err error) { n.states = append(n.states, err) }
func (n *realNode) Suspected(m digest.Member) {
	n.susp = append(n.susp, suspicion{m, n.g.View()})
}
func (n *realNode) Unsuspected(m digest.Member) {
	n.unsusp = append(n.unsusp, suspicion{m, n.g.View()})
}
func (n *realNode) Left(err error) {
	n.left = append(n.left, err)
	if n.rejoin && err == ErrExcluded && n.h != nil {
		n.h.do(n.h.s.Now(), n, func(now time.Duration) { _ = n.g.Join(now) })
	}
}

// realApp routes StateApp calls to the node's current application.
type realApp struct{ n *realNode }

func (a realApp) State() ([]byte, error)  { return a.n.app.State() }
func (a realApp) SetState(b []byte) error { return a.n.app.SetState(b) }

func (n *realNode) poll() {
	if p := n.p(); p != nil {
		for p.Poll(n, 64) > 0 {
		}
	}
}

func (n *realNode) Receive(from digest.Member, b []byte, now time.Duration) {
	if n.h != nil && n.h.drop != nil && n.h.drop(from, n.Member(), b) {
		return
	}
	if len(b) > 2 && IsMembership(wire.Type(b[2])) {
		_ = n.g.Receive(b, now)
	} else if p := n.p(); p != nil {
		buf := n.pool.Get(len(b))
		if buf == nil {
			return
		}
		buf.N = copy(buf.B, b)
		_ = p.Receive(buf, now)
		buf.Release()
	}
	n.poll()
}

func (n *realNode) Tick(now time.Duration) {
	n.g.Tick(now)
	if p := n.p(); p != nil {
		p.Tick(now)
	}
	n.poll()
}

func (n *realNode) NextDeadline() time.Duration {
	d := n.g.NextDeadline()
	if p := n.p(); p != nil {
		if nd := p.NextDeadline(); nd != nakack.NoDeadline {
			d = min(d, nd)
		}
	}
	return d
}

func (n *realNode) Drain(send func(to digest.Member, datagram []byte)) {
	for _, o := range n.g.Outbox() {
		var to digest.Member
		if !o.To.IsZero() {
			id, _ := strconv.ParseUint(o.To.Addr, 10, 64)
			to = digest.Member{ID: id}
		}
		send(to, o.Data)
	}
	n.g.ClearOutbox()
	for _, nk := range n.nks {
		for _, o := range nk.P.Outbox() {
			if nk == n.nk && n.g.Protocol() != nil {
				send(digest.Member{ID: o.To.ID}, o.Buf.Bytes())
			}
			o.Buf.Release()
		}
		nk.P.ClearOutbox()
	}
}

// rharness runs realNodes on one Sim.
type rharness struct {
	t     testing.TB
	s     *sim.Sim
	nodes []*realNode
	tweak func(*Config)
	ntw   func(*nakack.Config)
	// drop, if set, discards a datagram from→to on arrival (as harness's).
	drop func(from, to digest.Member, b []byte) bool
}

func newRHarness(t testing.TB, seed uint64, net sim.NetConfig) *rharness {
	return &rharness{t: t, s: sim.New(seed, net)}
}

func (h *rharness) add(id uint64) *realNode {
	n := &realNode{h: h, id: id, pool: wire.NewPool(8<<10, 0), app: newFakeApp(), hide: map[digest.Member]bool{},
		caps: map[uint64]capRec{}}
	seed := h.s.Seed() ^ id
	cfg := Config{
		Group: 7, ID: id, Addr: strconv.FormatUint(id, 10), Seed: seed, CreateGroup: id == 1, Logger: discardLogger,
		Listener: n, App: realApp{n},
		NewProtocol: func(self digest.Member, now time.Duration) (Protocol, error) {
			nc := nakack.Config{Self: self, Group: 7, Pool: n.pool, Seed: seed, Logger: discardLogger,
				StableInterval: 50 * time.Millisecond}
			if h.ntw != nil {
				h.ntw(&nc)
			}
			p, err := nakack.New(nc)
			if err != nil {
				return nil, err
			}
			n.nk = &NakackProtocol{P: p}
			n.nks = append(n.nks, n.nk)
			n.app = newFakeApp()
			n.apps = append(n.apps, n.app)
			clear(n.caps)
			return hidingProto{n.nk, n}, nil
		},
	}
	if h.tweak != nil {
		h.tweak(&cfg)
	}
	g, err := New(cfg)
	require.NoError(h.t, err)
	n.g = g
	h.nodes = append(h.nodes, n)
	require.NoError(h.t, h.s.AddNode(n))
	return n
}

func newRealNode(t *testing.T, s *sim.Sim, id uint64) *realNode {
	h := &rharness{t: t, s: s}
	n := h.add(id)
	n.h = nil
	return n
}

// joinFour adds members 1..4, member 1 founding and the others joining
// 60ms later, and runs until they share one view and are quiet.
func (h *rharness) joinFour() []*realNode {
	all := []*realNode{h.add(1), h.add(2), h.add(3), h.add(4)}
	h.join(0, all[0])
	h.join(60*time.Millisecond, all[1:]...)
	h.runUntil(func() bool { return rConverged(all...) && rQuiet(all...) }, 5*time.Second, "joined")
	return all
}

// others returns ns without x.
func others(ns []*realNode, x *realNode) []*realNode {
	var out []*realNode
	for _, n := range ns {
		if n != x {
			out = append(out, n)
		}
	}
	return out
}

func (h *rharness) do(at time.Duration, n *realNode, fn func(now time.Duration)) {
	require.NoError(h.t, h.s.Do(at, n.Member(), fn))
}

func (h *rharness) join(at time.Duration, ns ...*realNode) {
	for _, n := range ns {
		h.do(at, n, func(now time.Duration) { require.NoError(h.t, n.g.Join(now)) })
	}
}

// traffic makes n send one message every `every` from start until stop
// while it is a member (a refused Send is simply not retried).
func (h *rharness) traffic(n *realNode, start, stop, every time.Duration) {
	var step func(now time.Duration)
	step = func(now time.Duration) {
		if p := n.p(); p != nil && n.g.Status() == StatusMember {
			_, _ = p.Send(fmt.Appendf(nil, "%v/%d", n.self(), p.NextSeq()), now)
			p.Flush(now)
			n.poll()
		}
		if now+every < stop {
			h.do(now+every, n, step)
		}
	}
	h.do(start, n, step)
}

func (h *rharness) run(until time.Duration) {
	require.NoError(h.t, h.s.RunUntil(until), "seed %d", h.s.Seed())
}

// runUntil runs until cond holds, checking every 10ms, failing at limit.
func (h *rharness) runUntil(cond func() bool, limit time.Duration, what string) {
	done, err := h.s.RunWhile(func() bool { return !cond() }, 10*time.Millisecond, limit)
	require.NoError(h.t, err)
	require.True(h.t, done, "seed %d: %s not reached by %v\n%s", h.s.Seed(), what, limit, h.dump())
}

func (h *rharness) dump() string {
	var b []byte
	for _, n := range h.nodes {
		g := n.g
		b = fmt.Appendf(b, "node %d up=%v %v %v view=%v coord=%v vc=%v susp=%v cuts=%d mcuts=%d open=%v merge=%v hold=%v xfer=%v\n",
			n.id, h.s.Up(n.Member()), g.Self().Member, g.Status(), g.View(), g.IsCoordinator(), g.coord.vc != nil,
			g.suspects(), len(g.cuts), len(g.mcuts), sortedKeys(g.open), g.merge != nil, g.hold != nil, g.xfer != nil)
		for _, m := range sortedKeys(g.cuts) {
			c := g.cuts[m]
			b = fmt.Appendf(b, "    cut %v fixed=%v closed=%v cut=%d acks=%v\n", m, c.fixed, c.closed, c.cut, c.acks)
		}
		for _, m := range sortedKeys(g.mcuts) {
			b = fmt.Appendf(b, "    mcut %v cut=%d acked=%v coord=%v\n", m, g.mcuts[m].cut, g.mcuts[m].acked, g.mcuts[m].coord.Member)
		}
		if p := n.p(); p != nil {
			for _, e := range p.Digest().Entries() {
				b = fmt.Appendf(b, "    %v low=%d delivered=%d received=%d gaps=%v\n", e.Member, e.Low, e.Delivered, e.Received, p.Gaps(e.Member, nil))
			}
		}
	}
	return string(b)
}

// rConverged: every node in ns is a member of one and the same view of
// exactly ns.
func rConverged(ns ...*realNode) bool {
	v := ns[0].g.View()
	if ns[0].g.Status() != StatusMember || len(v.Members) != len(ns) {
		return false
	}
	for _, n := range ns {
		if n.g.Status() != StatusMember || !n.g.View().Equal(v) || !v.Contains(n.self()) {
			return false
		}
	}
	return true
}

// rQuiet: no membership task is pending anywhere (view changes, cuts,
// merges, transfers) and the protocol holds no capture.
func rQuiet(ns ...*realNode) bool {
	for _, n := range ns {
		g := n.g
		if g.coord.vc != nil || g.merge != nil || g.hold != nil || g.xfer != nil || len(g.prov) > 0 || len(g.open) > 0 {
			return false
		}
		for _, c := range g.cuts {
			if !c.closed {
				return false
			}
		}
		for _, mc := range g.mcuts {
			if mc.cut != ^uint64(0) {
				return false
			}
		}
		if p := n.p(); p == nil || p.Captures() > 0 {
			return false
		}
	}
	return true
}

// rAllDelivered: every node in ns delivered (or was told lost) every seqno
// every sender in ns sent, and has no gap left.
func rAllDelivered(ns ...*realNode) bool {
	for _, n := range ns {
		p := n.p()
		if p == nil {
			return false
		}
		for _, s := range ns {
			e, ok := p.WindowState(s.self())
			if !ok || e.Delivered != s.sent() || len(p.Gaps(s.self(), nil)) > 0 {
				return false
			}
		}
	}
	return true
}

// noErrors fails on any FIFO/exactly-once error any application recorded.
func (h *rharness) noErrors() {
	for _, n := range h.nodes {
		for _, a := range n.apps {
			require.Empty(h.t, a.errs, "seed %d node %d", h.s.Seed(), n.id)
		}
	}
}

// noNotFound: no member ever sent MSG_NOT_FOUND (no forced purge anywhere).
func (h *rharness) noNotFound() {
	for _, n := range h.nodes {
		for _, nk := range n.nks {
			require.Zero(h.t, nk.P.Stats().MsgNotFoundSent, "seed %d node %d", h.s.Seed(), n.id)
		}
	}
}

// TestJoinUnderTrafficNoLoss: members join (on the real nakack) while every
// member sends under loss, duplication and reordering; stability suspension
// (the JoinRsp capture) means no lost range and no MSG_NOT_FOUND ever, and
// every member delivers every message from its join digest on.
func TestJoinUnderTrafficNoLoss(t *testing.T) {
	for seed := range uint64(seeds(200, 20)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s := sim.New(seed, lossyNet(seed, 0.1))
			var ns []*realNode
			for id := uint64(1); id <= 5; id++ {
				ns = append(ns, newRealNode(t, s, id))
			}
			r := rand.New(rand.NewPCG(seed, 5))
			join := func(at time.Duration, n *realNode) {
				require.NoError(t, s.Do(at, n.Member(), func(now time.Duration) { require.NoError(t, n.g.Join(now)) }))
			}
			join(0, ns[0])
			join(60*time.Millisecond, ns[1])
			join(60*time.Millisecond, ns[2])
			sent := map[uint64]uint64{}
			for _, n := range ns[:3] {
				every := time.Duration(1+r.IntN(3)) * time.Millisecond
				var step func(now time.Duration)
				step = func(now time.Duration) {
					if n.g.Status() == StatusMember {
						if _, err := n.nk.P.Send(fmt.Appendf(nil, "%d/%d", n.id, sent[n.id]+1), now); err == nil {
							sent[n.id]++
						}
						n.nk.P.Flush(now)
						n.poll()
					}
					if now+every < 1200*time.Millisecond {
						require.NoError(t, s.Do(now+every, n.Member(), step))
					}
				}
				require.NoError(t, s.Do(300*time.Millisecond, n.Member(), step))
			}
			join(400*time.Millisecond+time.Duration(r.IntN(300))*time.Millisecond, ns[3])
			join(400*time.Millisecond+time.Duration(r.IntN(300))*time.Millisecond, ns[4])
			done, err := s.RunWhile(func() bool {
				v := ns[0].g.View()
				for _, n := range ns {
					if n.g.Status() != StatusMember || !n.g.View().Equal(v) || len(v.Members) != 5 || n.nk.P.Captures() > 0 || n.g.coord.vc != nil {
						return true
					}
				}
				return false
			}, 10*time.Millisecond, 10*time.Second)
			require.NoError(t, err)
			require.True(t, done, "seed %d: not joined", seed)
			require.NoError(t, s.RunUntil(max(s.Now(), 1300*time.Millisecond)))
			s.SetNet(sim.NetConfig{})
			done, err = s.RunWhile(func() bool {
				for _, n := range ns {
					for _, snd := range ns[:3] {
						if e, ok := n.nk.P.WindowState(snd.g.Self().Member); !ok || e.Delivered != sent[snd.id] {
							return true
						}
					}
				}
				return false
			}, 10*time.Millisecond, 20*time.Second)
			require.NoError(t, err)
			require.True(t, done, "seed %d: not all delivered", seed)
			for _, n := range ns {
				st := n.nk.P.Stats()
				require.Zero(t, st.MsgNotFoundSent, "seed %d", seed)
				require.Zero(t, st.LostRanges, "seed %d", seed)
				require.Empty(t, n.app.errs, "seed %d node %d", seed, n.id)
				require.Empty(t, n.app.lost)
			}
		})
	}
}
