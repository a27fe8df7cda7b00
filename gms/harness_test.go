package gms

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/sim"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// fakeApp is the application of a test member: per sender, a hash chain of
// what was delivered (a replicated log folded into a few numbers), checked
// for FIFO exactly-once delivery; it is also the StateApp.
type fakeApp struct {
	state     map[digest.Member]*senderFold
	delivered map[digest.Member][]uint64 // this incarnation's deliveries, in order
	lost      map[digest.Member][]Range
	errs      []string
}

type senderFold struct{ last, hash, count uint64 }

func newFakeApp() *fakeApp {
	return &fakeApp{state: map[digest.Member]*senderFold{}, delivered: map[digest.Member][]uint64{},
		lost: map[digest.Member][]Range{}}
}

func (a *fakeApp) fold(m digest.Member, from uint64) *senderFold {
	st := a.state[m]
	if st == nil {
		st = &senderFold{last: from - 1}
		a.state[m] = st
	}
	if from != st.last+1 {
		a.errs = append(a.errs, fmt.Sprintf("sender %v: got %d after %d", m, from, st.last))
	}
	return st
}

func (a *fakeApp) deliver(m digest.Member, seq uint64, payload []byte) {
	st := a.fold(m, seq)
	h := fnv.New64a()
	h.Write(payload)
	st.last, st.hash, st.count = seq, st.hash*1099511628211^h.Sum64(), st.count+1
	a.delivered[m] = append(a.delivered[m], seq)
}

func (a *fakeApp) lostRange(m digest.Member, from, to uint64) {
	st := a.fold(m, from)
	st.last = to
	st.hash = st.hash*31 + to - from + 1
	a.lost[m] = append(a.lost[m], Range{From: from, To: to})
}

// State serialises the folds in member order.
func (a *fakeApp) State() ([]byte, error) {
	var b []byte
	for _, m := range sortedKeys(a.state) {
		st := a.state[m]
		b = appendMemberB(b, m)
		b = binary.LittleEndian.AppendUint64(b, st.last)
		b = binary.LittleEndian.AppendUint64(b, st.hash)
		b = binary.LittleEndian.AppendUint64(b, st.count)
	}
	return b, nil
}

func (a *fakeApp) SetState(b []byte) error {
	if len(b)%36 != 0 {
		return fmt.Errorf("bad state length %d", len(b))
	}
	clear(a.state)
	for ; len(b) > 0; b = b[36:] {
		a.state[getMember(b)] = &senderFold{last: binary.LittleEndian.Uint64(b[12:]),
			hash: binary.LittleEndian.Uint64(b[20:]), count: binary.LittleEndian.Uint64(b[28:])}
	}
	return nil
}

// The gms test harness: members (nodes) on one sim.Sim, each a GMS over
// either protocol a harness chooses: fakeProto (newHarness), a small model
// for tests of gms alone, or the real nakack through NakackProtocol
// (newNakHarness). A node's network address is its member id with
// incarnation 0; every incarnation maps to it. Every incarnation gets a
// fresh protocol and a fresh application (fakeApp).
type harness struct {
	t     testing.TB
	s     *sim.Sim
	nodes []*node
	nak   bool // the nodes run the real nakack (else fakeProto)
	tweak func(*Config)
	ntw   func(*nakack.Config) // with nak: tweaks each incarnation's nakack.Config
	// drop, if set, discards a datagram from→to on arrival, before to's
	// Receive: one-way or per-type outages the network model has no
	// knob for.
	drop func(from, to digest.Member, b []byte) bool
}

// node is one member of a harness.
type node struct {
	h      *harness
	id     uint64
	g      *GMS
	app    *fakeApp   // the current incarnation's application
	apps   []*fakeApp // every incarnation's application, oldest first
	views  []View
	left   []error
	states []error
	susp   []suspicion
	unsusp []suspicion
	rejoin bool

	// With fakeProto.
	fp   *fakeProto   // the current incarnation's (nil once left)
	incs []*fakeProto // every incarnation's, oldest first

	// With the real nakack.
	pool *wire.Pool
	nk   *NakackProtocol
	nks  []*NakackProtocol
	hide map[digest.Member]bool // the protocol's digest omits these (seed 002)
	caps map[uint64]capRec      // captures the current incarnation holds
}

// suspicion is one Listener.Suspected (or Unsuspected) call: the member
// named and the view installed when it was made.
type suspicion struct {
	m    digest.Member
	view View
}

// newHarness returns a harness whose nodes run fakeProto.
func newHarness(t testing.TB, seed uint64, net sim.NetConfig) *harness {
	return &harness{t: t, s: sim.New(seed, net)}
}

// newNakHarness returns a harness whose nodes run the real nakack.
func newNakHarness(t testing.TB, seed uint64, net sim.NetConfig) *harness {
	return &harness{t: t, s: sim.New(seed, net), nak: true}
}

// newRealNode adds a real-nakack node with the given id to s.
func newRealNode(t *testing.T, s *sim.Sim, id uint64) *node {
	h := &harness{t: t, s: s, nak: true}
	return h.add(id)
}

func addrOf(id uint64) string { return strconv.FormatUint(id, 10) }

// joinedThree returns a loss-free fakeProto harness (seed 1) whose members
// A, B and C (ids 1-3) have joined, A founding and coordinating, and gone
// quiet.
func joinedThree(t testing.TB) (h *harness, a, b, c *node) {
	h = newHarness(t, 1, sim.NetConfig{})
	a, b, c = h.add(1), h.add(2), h.add(3)
	h.join(0, a)
	h.join(60*time.Millisecond, b, c)
	h.runUntil(func() bool { return converged(a, b, c) && quiet(a, b, c) }, 5*time.Second, "joined")
	return h, a, b, c
}

func (h *harness) add(id uint64) *node {
	n := &node{h: h, id: id, app: newFakeApp()}
	cfg := Config{
		Group: 7, ID: id, Addr: addrOf(id), Seed: h.s.Seed() ^ id, CreateGroup: id == 1,
		NewProtocol: n.newFakeProto, Listener: n, App: stateAppOf{n}, Logger: discardLogger,
	}
	if h.nak {
		n.pool, n.hide, n.caps = wire.NewPool(8<<10, 0), map[digest.Member]bool{}, map[uint64]capRec{}
		cfg.NewProtocol = n.newNakack
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

// newFakeProto is a fakeProto node's Config.NewProtocol.
func (n *node) newFakeProto(self digest.Member, now time.Duration) (Protocol, error) {
	n.app = newFakeApp()
	n.apps = append(n.apps, n.app)
	n.fp = newFakeProto(self, n.app, now)
	n.incs = append(n.incs, n.fp)
	return n.fp, nil
}

// newNakack is a real-nakack node's Config.NewProtocol.
func (n *node) newNakack(self digest.Member, now time.Duration) (Protocol, error) {
	nc := nakack.Config{Self: self, Group: 7, Pool: n.pool, Seed: n.h.s.Seed() ^ n.id, Logger: discardLogger,
		StableInterval: 50 * time.Millisecond}
	if n.h.ntw != nil {
		n.h.ntw(&nc)
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
}

// hidingProto hides digest entries of a real nakack, as if it had installed
// a view without yet setting those members' entries (seed 002), and records
// every capture it hands out until released (for the stability checks).
type hidingProto struct {
	*NakackProtocol
	n *node
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

// stateAppOf routes StateApp calls to the node's current application.
type stateAppOf struct{ n *node }

func (s stateAppOf) State() ([]byte, error)  { return s.n.app.State() }
func (s stateAppOf) SetState(b []byte) error { return s.n.app.SetState(b) }

func (n *node) ViewInstalled(v View)     { n.views = append(n.views, v) }
func (n *node) StateInstalled(err error) { n.states = append(n.states, err) }
func (n *node) Suspected(m digest.Member) {
	n.susp = append(n.susp, suspicion{m, n.g.View()})
}
func (n *node) Unsuspected(m digest.Member) {
	n.unsusp = append(n.unsusp, suspicion{m, n.g.View()})
}
func (n *node) Left(err error) {
	n.left = append(n.left, err)
	n.fp = nil
	if n.rejoin && err == ErrExcluded {
		n.h.do(n.h.s.Now(), n, func(now time.Duration) { _ = n.g.Join(now) })
	}
}

// Deliver and Lost are the real nakack's delivery handler.
func (n *node) Deliver(s digest.Member, seq uint64, payload []byte) {
	n.app.deliver(s, seq, payload)
}
func (n *node) Lost(s digest.Member, from, to uint64) { n.app.lostRange(s, from, to) }

func (n *node) Member() digest.Member { return digest.Member{ID: n.id} }

func (n *node) self() digest.Member { return n.g.Self().Member }

// cur returns the current incarnation's fakeProto, nil when not a member.
func (n *node) cur() *fakeProto {
	if n.g.Protocol() == nil {
		return nil
	}
	return n.fp
}

// p returns the current incarnation's nakack, nil when not a member.
func (n *node) p() *nakack.Protocol {
	if n.g.Protocol() == nil || n.nk == nil {
		return nil
	}
	return n.nk.P
}

// sent is how many seqnos the current nakack incarnation has sent.
func (n *node) sent() uint64 { return n.nk.P.NextSeq() - 1 }

// poll delivers what the current protocol holds.
func (n *node) poll() {
	if p := n.p(); p != nil {
		for p.Poll(n, 64) > 0 {
		}
	}
	if p := n.cur(); p != nil {
		p.poll()
	}
}

func (n *node) Receive(from digest.Member, b []byte, now time.Duration) {
	if n.h.drop != nil && n.h.drop(from, n.Member(), b) {
		return
	}
	switch {
	case n.h.nak && len(b) > 2 && IsMembership(wire.Type(b[2])):
		_ = n.g.Receive(b, now)
	case n.h.nak:
		if p := n.p(); p != nil {
			buf := n.pool.Get(len(b))
			if buf == nil {
				return
			}
			buf.N = copy(buf.B, b)
			_ = p.Receive(buf, now)
			buf.Release()
		}
	case len(b) > 0 && b[0] == fakeMagic:
		if p := n.cur(); p != nil {
			p.receive(b, now)
		}
	default:
		_ = n.g.Receive(b, now)
	}
	n.poll()
}

func (n *node) Tick(now time.Duration) {
	n.g.Tick(now)
	if p := n.p(); p != nil {
		p.Tick(now)
	}
	if p := n.cur(); p != nil {
		p.tick(now)
	}
	n.poll()
}

func (n *node) NextDeadline() time.Duration {
	d := n.g.NextDeadline()
	if p := n.p(); p != nil {
		if nd := p.NextDeadline(); nd != nakack.NoDeadline {
			d = min(d, nd)
		}
	}
	if p := n.cur(); p != nil {
		d = min(d, p.nextDeadline())
	}
	return d
}

func (n *node) Drain(send func(to digest.Member, datagram []byte)) {
	for _, o := range n.g.Outbox() {
		var to digest.Member
		if !o.To.IsZero() {
			id, err := strconv.ParseUint(o.To.Addr, 10, 64)
			if err != nil {
				continue
			}
			to = digest.Member{ID: id}
		}
		send(to, o.Data)
	}
	n.g.ClearOutbox()
	for _, p := range n.incs {
		for _, o := range p.out {
			if p == n.cur() {
				send(digest.Member{ID: o.to.ID}, o.data)
			}
		}
		p.out = p.out[:0]
	}
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

// do runs fn on n at virtual time at.
func (h *harness) do(at time.Duration, n *node, fn func(now time.Duration)) {
	require.NoError(h.t, h.s.Do(at, n.Member(), fn))
}

func (h *harness) join(at time.Duration, ns ...*node) {
	for _, n := range ns {
		h.do(at, n, func(now time.Duration) { require.NoError(h.t, n.g.Join(now)) })
	}
}

// traffic makes n send one message every `every` from start until stop
// while it is a member (with nakack, a refused Send is simply not retried).
func (h *harness) traffic(n *node, start, stop, every time.Duration) {
	var step func(now time.Duration)
	step = func(now time.Duration) {
		if n.g.Status() == StatusMember {
			if p := n.p(); p != nil {
				_, _ = p.Send(fmt.Appendf(nil, "%v/%d", n.self(), p.NextSeq()), now)
				p.Flush(now)
			}
			if p := n.cur(); p != nil {
				p.send(fmt.Appendf(nil, "%v/%d", p.self, p.seq+1))
			}
			n.poll()
		}
		if now+every < stop {
			h.do(now+every, n, step)
		}
	}
	h.do(start, n, step)
}

func (h *harness) run(until time.Duration) {
	require.NoError(h.t, h.s.RunUntil(until), "seed %d", h.s.Seed())
}

// runUntil runs until cond holds, checking every 10ms, failing at limit.
func (h *harness) runUntil(cond func() bool, limit time.Duration, what string) {
	done, err := h.s.RunWhile(func() bool { return !cond() }, 10*time.Millisecond, limit)
	require.NoError(h.t, err)
	require.True(h.t, done, "seed %d: %s not reached by %v\n%s", h.s.Seed(), what, limit, h.dump())
}

// dump describes every node, for failure messages.
func (h *harness) dump() string {
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

// up returns the nodes that have not crashed.
func (h *harness) up() []*node {
	var ns []*node
	for _, n := range h.nodes {
		if h.s.Up(n.Member()) {
			ns = append(ns, n)
		}
	}
	return ns
}

// converged: every node in ns is a member of one and the same view of
// exactly ns.
func converged(ns ...*node) bool {
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

// quiet: no membership task is pending anywhere (view changes, cuts,
// merges, transfers; with nakack, open cuts too) and the protocol holds no
// capture (with nakack, a node has a protocol).
func quiet(ns ...*node) bool {
	for _, n := range ns {
		g := n.g
		if g.coord.vc != nil || g.merge != nil || g.hold != nil || g.xfer != nil || len(g.prov) > 0 {
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
		if n.h.nak {
			if p := n.p(); len(g.open) > 0 || p == nil || p.Captures() > 0 {
				return false
			}
		} else if p := n.cur(); p != nil && len(p.captures) > 0 {
			return false
		}
	}
	return true
}

// noErrors fails on any error recorded by the fake protocols and the
// applications (FIFO, exactly once).
func (h *harness) noErrors() {
	for _, n := range h.nodes {
		for _, p := range n.incs {
			require.Empty(h.t, p.errs, "seed %d node %d", h.s.Seed(), n.id)
		}
		for _, a := range n.apps {
			require.Empty(h.t, a.errs, "seed %d node %d", h.s.Seed(), n.id)
		}
	}
}

// noNotFound: no nakack ever sent MSG_NOT_FOUND (no forced purge anywhere).
func (h *harness) noNotFound() {
	for _, n := range h.nodes {
		for _, nk := range n.nks {
			require.Zero(h.t, nk.P.Stats().MsgNotFoundSent, "seed %d node %d", h.s.Seed(), n.id)
		}
	}
}

// drained: every open gap is closed at every fakeProto member
// (retransmission traffic has nothing left to ask for).
func drained(ns ...*node) bool {
	for _, n := range ns {
		p := n.cur()
		if p == nil {
			return false
		}
		for _, m := range sortedKeys(p.wins) {
			w := p.wins[m]
			if len(w.gaps(nil)) > 0 || w.hd < w.hr {
				return false
			}
		}
	}
	return true
}

// sameDelivered: every fakeProto node in ns holds, for every sender the
// others also have a window for, the same highest delivered.
func sameDelivered(ns ...*node) bool {
	for _, a := range ns {
		for _, b := range ns {
			pa, pb := a.cur(), b.cur()
			for m, w := range pa.wins {
				if wb, ok := pb.wins[m]; ok && wb.hd != w.hd {
					return false
				}
			}
		}
	}
	return true
}

// allDelivered: every nakack node in ns delivered (or was told lost) every
// seqno every sender in ns sent, and has no gap left.
func allDelivered(ns ...*node) bool {
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

func sortedNodes(ns []*node) []*node {
	return slices.SortedFunc(slices.Values(ns), func(a, b *node) int { return int(a.id) - int(b.id) })
}
