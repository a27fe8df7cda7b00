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
	"github.com/nakcast/nakcast/sim"
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

func (a *fakeApp) resync(*fakeProto) {}

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

// node runs a GMS and its fakeProto as a sim.Node. Its network address is
// the member id with incarnation 0; every incarnation maps to it.
type node struct {
	h      *harness
	id     uint64
	g      *GMS
	p      *fakeProto
	app    *fakeApp
	incs   []*fakeProto // every incarnation's protocol, oldest first
	views  []View
	left   []error
	states []error
	susp   []suspicion
	unsusp []suspicion
	rejoin bool
}

// suspicion is one Listener.Suspected (or Unsuspected) call: the member
// named and the view installed when it was made.
type suspicion struct {
	m    digest.Member
	view View
}

type harness struct {
	t     testing.TB
	s     *sim.Sim
	nodes []*node
	tweak func(*Config)
	// drop, if set, discards a datagram from→to on arrival, before to's
	// Receive: one-way or per-type outages the network model has no
	// knob for.
	drop func(from, to digest.Member, b []byte) bool
}

func newHarness(t testing.TB, seed uint64, net sim.NetConfig) *harness {
	return &harness{t: t, s: sim.New(seed, net)}
}

func addrOf(id uint64) string { return strconv.FormatUint(id, 10) }

// joinedThree returns a loss-free harness (seed 1) whose members A, B and C
// (ids 1-3) have joined, A founding and coordinating, and gone quiet.
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
		NewProtocol: func(self digest.Member, now time.Duration) (Protocol, error) {
			n.app = newFakeApp()
			n.p = newFakeProto(self, n.app, now)
			n.incs = append(n.incs, n.p)
			return n.p, nil
		},
		Listener: n,
		Logger:   discardLogger,
	}
	cfg.App = stateAppOf{n}
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
	n.p = nil
	if n.rejoin && err == ErrExcluded {
		n.h.s.Do(n.h.s.Now(), n.Member(), func(now time.Duration) { _ = n.g.Join(now) })
	}
}

func (n *node) Member() digest.Member { return digest.Member{ID: n.id} }

func (n *node) cur() *fakeProto {
	if n.g.Protocol() == nil {
		return nil
	}
	return n.p
}

func (n *node) Receive(from digest.Member, b []byte, now time.Duration) {
	if n.h.drop != nil && n.h.drop(from, n.Member(), b) {
		return
	}
	if len(b) > 0 && b[0] == fakeMagic {
		if p := n.cur(); p != nil {
			p.receive(b, now)
			p.poll()
		}
		return
	}
	_ = n.g.Receive(b, now)
	if p := n.cur(); p != nil {
		p.poll()
	}
}

func (n *node) Tick(now time.Duration) {
	n.g.Tick(now)
	if p := n.cur(); p != nil {
		p.tick(now)
		p.poll()
	}
}

func (n *node) NextDeadline() time.Duration {
	d := n.g.NextDeadline()
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
// while it is a member.
func (h *harness) traffic(n *node, start, stop, every time.Duration) {
	var step func(now time.Duration)
	step = func(now time.Duration) {
		if p := n.cur(); p != nil && n.g.Status() == StatusMember {
			payload := fmt.Appendf(nil, "%v/%d", p.self, p.seq+1)
			p.send(payload)
			p.poll()
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
		b = fmt.Appendf(b, "node %d up=%v %v %v view=%v coord=%v vc=%v susp=%v cuts=%d mcuts=%d merge=%v hold=%v xfer=%v\n",
			n.id, h.s.Up(n.Member()), g.Self().Member, g.Status(), g.View(), g.IsCoordinator(), g.coord.vc != nil,
			g.suspects(), len(g.cuts), len(g.mcuts), g.merge != nil, g.hold != nil, g.xfer != nil)
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
		if n.g.Status() != StatusMember || !n.g.View().Equal(v) || !v.Contains(n.g.Self().Member) {
			return false
		}
	}
	return true
}

// quiet: no membership task is pending anywhere (view changes, cuts,
// merges, transfers) and the protocol holds no capture.
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
		if p := n.cur(); p != nil && len(p.captures) > 0 {
			return false
		}
	}
	return true
}

// noErrors fails on any error recorded by the fakes and applications.
func (h *harness) noErrors() {
	for _, n := range h.nodes {
		for _, p := range n.incs {
			require.Empty(h.t, p.errs, "seed %d node %d", h.s.Seed(), n.id)
			require.Empty(h.t, p.app.errs, "seed %d node %d", h.s.Seed(), n.id)
		}
	}
}

// drained: every open gap is closed at every member (retransmission
// traffic has nothing left to ask for).
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

// sameDeliveries: every node in ns holds, for every sender the others also
// have a window for, the same highest delivered.
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

func (n *node) self() digest.Member { return n.g.Self().Member }

func sortedNodes(ns []*node) []*node {
	return slices.SortedFunc(slices.Values(ns), func(a, b *node) int { return int(a.id) - int(b.id) })
}
