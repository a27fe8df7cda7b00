package members

import (
	"fmt"
	"strconv"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/gms"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/wire"
)

// Node is one member process on the simulated network: a gms.GMS and, for
// each incarnation (a join, or founding a group), a nakack.Protocol and an
// App. Its network address is digest.Member{ID: ID} (incarnation 0), which
// every incarnation shares; gms addresses it as strconv.FormatUint(ID).
// Membership datagrams go to gms, every other one to the current
// incarnation's protocol.
type Node struct {
	c  *Cluster
	ID uint64
	// GMS is the membership state machine; tests may call it inside
	// Cluster.Do so that its output is sent.
	GMS  *gms.GMS
	pool *wire.Pool
	incs []*Incarnation
	cur  *Incarnation

	// What gms's Listener told, in order.
	Views        []gms.View
	Lefts        []error
	States       []error
	Suspicions   []digest.Member
	Unsuspicions []digest.Member

	// Rejoin: after leaving the group (excluded, or a graceful leave
	// when RejoinAfterLeave is set) the node joins again at once.
	Rejoin, RejoinAfterLeave bool
	// Stalled: the application consumes nothing while set (a slow
	// receiver): what arrives waits in the protocol's windows.
	Stalled bool
	// leaving: the node has called Leave (its traffic stops).
	leaving bool
	// wantOut: the node left for good (no rejoin): not a member of the
	// final view.
	wantOut bool
}

// Incarnation is one incarnation of a node: its member id, protocol and
// application, and what the protocol tap recorded.
type Incarnation struct {
	Node   *Node
	Member digest.Member
	// NP is the gms adapter of P; P the protocol.
	NP  *gms.NakackProtocol
	P   *nakack.Protocol
	App *App
	// Episodes are the departures of senders from this member's view, in
	// order: the survivors of one cut share its dropping view.
	Episodes []*Episode
	// MergeLow is, per sender, the highest Low a merge digest installed
	// here gave it: a merge reports lost at most that (and the message it
	// ends inside).
	MergeLow map[digest.Member]uint64
	// Installs are the state transfers this incarnation installed.
	Installs []Install
}

// Episode is one departure of a sender from a member's view: the view
// that dropped it, where this member's stream of it stood then, the cut
// gms fixed (its last fix) and how it ended.
type Episode struct {
	Sender  digest.Member
	Dropped digest.ViewID
	From    uint64
	Cut     uint64
	HasCut  bool
	Lost    string // the last fix's lost ranges, printed (fixKey)
	// Closed: the window was closed after the cut (ClosedBy: the
	// coordinator of the view it was closed in); Back: a view brought the
	// sender back before that.
	Closed, Back bool
	ClosedBy     digest.Member
}

// open returns sender's episode under way (not closed, not back), or nil.
func (inc *Incarnation) open(sender digest.Member) *Episode {
	for i := len(inc.Episodes) - 1; i >= 0; i-- {
		if ep := inc.Episodes[i]; ep.Sender == sender {
			if ep.Closed || ep.Back {
				return nil
			}
			return ep
		}
	}
	return nil
}

// Install is one state transfer installed by a requester.
type Install struct {
	At       time.Duration
	Provider digest.Member
	Digest   digest.Digest
}

// Member implements sim.Node: the node's network address.
func (n *Node) Member() digest.Member { return digest.Member{ID: n.ID} }

// Self returns the current incarnation's member id (zero before the first
// join).
func (n *Node) Self() digest.Member { return n.GMS.Self().Member }

// Cur returns the current incarnation, nil when the node is not a member.
func (n *Node) Cur() *Incarnation {
	if n.GMS.Protocol() == nil {
		return nil
	}
	return n.cur
}

// Incarnations returns every incarnation, oldest first.
func (n *Node) Incarnations() []*Incarnation { return n.incs }

// Up reports whether the node has not crashed.
func (n *Node) Up() bool { return n.c.Sim.Up(n.Member()) }

// newProtocol is gms's Config.NewProtocol: a fresh nakack and App for
// incarnation self.
func (n *Node) newProtocol(self digest.Member, now time.Duration) (gms.Protocol, error) {
	nc := nakack.Config{Self: self, Group: n.c.cfg.Group, Pool: n.pool,
		Seed: n.c.Sim.Seed()*1_000_003 ^ n.ID<<20 ^ uint64(self.Inc), Logger: discardLogger,
		StableInterval: 50 * time.Millisecond}
	if n.c.cfg.Nakack != nil {
		n.c.cfg.Nakack(n.ID, &nc)
	}
	p, err := nakack.New(nc)
	if err != nil {
		return nil, err
	}
	inc := &Incarnation{Node: n, Member: self, NP: &gms.NakackProtocol{P: p}, P: p,
		MergeLow: map[digest.Member]uint64{}}
	inc.App = newApp(inc)
	n.incs = append(n.incs, inc)
	n.cur = inc
	var gp gms.Protocol = &tap{NakackProtocol: inc.NP, inc: inc}
	if n.c.cfg.WrapProtocol != nil {
		gp = n.c.cfg.WrapProtocol(inc, gp)
	}
	return gp, nil
}

// Listener (gms).

// ViewInstalled implements gms.Listener.
func (n *Node) ViewInstalled(v gms.View) { n.Views = append(n.Views, v) }

// StateInstalled implements gms.Listener.
func (n *Node) StateInstalled(err error) { n.States = append(n.States, err) }

// Suspected implements gms.Listener.
func (n *Node) Suspected(m digest.Member) { n.Suspicions = append(n.Suspicions, m) }

// Unsuspected implements gms.Listener.
func (n *Node) Unsuspected(m digest.Member) { n.Unsuspicions = append(n.Unsuspicions, m) }

// Left implements gms.Listener: a node set to rejoin joins again.
func (n *Node) Left(err error) {
	n.Lefts = append(n.Lefts, err)
	n.leaving = false
	if (err == gms.ErrExcluded && n.Rejoin) || (err == nil && n.RejoinAfterLeave) {
		n.c.Do(n.c.Sim.Now(), n, func(now time.Duration) { _ = n.GMS.Join(now) })
		return
	}
	if err == nil {
		n.wantOut = true
	}
}

// Driving (sim.Node).

// Receive implements sim.Node.
func (n *Node) Receive(from digest.Member, b []byte, now time.Duration) {
	if n.c.cfg.Drop != nil && n.c.cfg.Drop(from, n.Member(), b) {
		return
	}
	if len(b) > 2 && gms.IsMembership(wire.Type(b[2])) {
		_ = n.GMS.Receive(b, now)
	} else if inc := n.Cur(); inc != nil {
		buf := n.pool.Get(len(b))
		if buf == nil {
			return
		}
		buf.N = copy(buf.B, b)
		_ = inc.P.Receive(buf, now)
		buf.Release()
	}
	n.poll()
}

// Tick implements sim.Node.
func (n *Node) Tick(now time.Duration) {
	n.GMS.Tick(now)
	if inc := n.Cur(); inc != nil {
		inc.P.Tick(now)
	}
	n.poll()
}

// NextDeadline implements sim.Node.
func (n *Node) NextDeadline() time.Duration {
	d := n.GMS.NextDeadline()
	if inc := n.Cur(); inc != nil {
		if nd := inc.P.NextDeadline(); nd != nakack.NoDeadline {
			d = min(d, nd)
		}
	}
	return d
}

// Drain implements sim.Node: gms's outbox, then the current incarnation's
// (an earlier incarnation's datagrams are released unsent).
func (n *Node) Drain(send func(to digest.Member, datagram []byte)) {
	for _, o := range n.GMS.Outbox() {
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
	n.GMS.ClearOutbox()
	cur := n.Cur()
	for _, inc := range n.incs {
		for _, o := range inc.P.Outbox() {
			if inc == cur {
				to := digest.Member{}
				if !o.To.IsZero() {
					to = digest.Member{ID: o.To.ID}
				}
				send(to, o.Buf.Bytes())
			}
			o.Buf.Release()
		}
		inc.P.ClearOutbox()
	}
}

// poll delivers everything deliverable to the current App.
func (n *Node) poll() {
	if inc := n.Cur(); inc != nil && !n.Stalled {
		for inc.P.Poll(inc.App, 64) > 0 {
		}
	}
}

// Send sends payload from the current incarnation and records it in the
// ledger. It returns nakack's error (ErrBackPressure, ErrNoView...) or one
// when the node is not a member.
func (n *Node) Send(payload []byte, now time.Duration) error {
	inc := n.Cur()
	if inc == nil || n.GMS.Status() != gms.StatusMember || n.leaving {
		return errNotMember
	}
	first, err := inc.P.Send(payload, now)
	if err != nil {
		return err
	}
	if err := n.c.Ledger.Record(inc.Member, first, inc.P.NextSeq()-1, payload); err != nil {
		n.c.Sim.Fail(err)
		return err
	}
	return nil
}

// Leave flushes what the node holds back and leaves gracefully (its traffic
// stops first, as gms requires).
func (n *Node) Leave(now time.Duration) error {
	inc := n.Cur()
	if inc == nil {
		return errNotMember
	}
	inc.P.Flush(now)
	n.leaving = true
	if err := n.GMS.Leave(now); err != nil {
		n.leaving = false
		return err
	}
	return nil
}

// String names the node and its current incarnation.
func (n *Node) String() string { return fmt.Sprintf("node %d (%v)", n.ID, n.Self()) }

// tap is the gms.Protocol of an incarnation: nakack's adapter, recording
// what gms asks of it for the checks (and telling the App where its
// streams start). CutPending is promoted from the adapter.
type tap struct {
	*gms.NakackProtocol
	inc *Incarnation
}

// viewChange starts an episode for every sender with a window here that v
// drops, and ends as Back the episodes of senders v brings back.
func (t *tap) viewChange(v gms.View) {
	inc := t.inc
	for _, m := range inc.P.View().Members {
		if m != inc.Member && !v.Contains(m) && inc.open(m) == nil {
			inc.Episodes = append(inc.Episodes, &Episode{Sender: m, Dropped: v.ID, From: inc.App.next(m)})
		}
	}
	for _, p := range v.Members {
		if ep := inc.open(p.Member); ep != nil {
			ep.Back = true
		}
	}
}

// InstallView implements gms.Protocol: a joiner's streams start at its
// join digest.
func (t *tap) InstallView(v gms.View, joinDigest digest.Digest, now time.Duration) {
	t.viewChange(v)
	t.NakackProtocol.InstallView(v, joinDigest, now)
	for _, e := range joinDigest.Entries() {
		if e.Member != t.inc.Member {
			t.inc.App.start(e.Member, e.Delivered)
		}
	}
}

// InstallMergeView implements gms.Protocol.
func (t *tap) InstallMergeView(v gms.View, d digest.Digest, now time.Duration) {
	t.viewChange(v)
	for _, e := range d.Entries() {
		t.inc.MergeLow[e.Member] = max(t.inc.MergeLow[e.Member], e.Low)
		if e.Member == t.inc.Member || !v.Contains(e.Member) {
			continue
		}
		// A view member met for the first time: its stream starts at the
		// holder's Low, as a joiner's at its join digest.
		if _, ok := t.P.WindowState(e.Member); !ok {
			if _, closed := t.P.ClosedWindow(e.Member); !closed {
				t.inc.App.start(e.Member, e.Low)
			}
		}
	}
	t.NakackProtocol.InstallMergeView(v, d, now)
}

// OverwriteDigest implements gms.Protocol: the App takes the state gms
// handed it (SetState, just before) at the digest's points.
func (t *tap) OverwriteDigest(d digest.Digest, now time.Duration) error {
	if err := t.NakackProtocol.OverwriteDigest(d, now); err != nil {
		t.inc.App.pending = nil
		return err
	}
	t.inc.App.installState(d)
	return nil
}

// CompleteCut implements gms.Protocol.
func (t *tap) CompleteCut(sender digest.Member, cut uint64, lost []gms.Range, now time.Duration) {
	if ep := t.inc.open(sender); ep != nil {
		ep.Cut, ep.HasCut = cut, true
		ep.Lost = fmt.Sprint(lost)
	}
	t.NakackProtocol.CompleteCut(sender, cut, lost, now)
}

// CloseWindow implements gms.Protocol.
func (t *tap) CloseWindow(sender digest.Member, now time.Duration) {
	if ep := t.inc.open(sender); ep != nil {
		ep.Closed = true
		if ms := t.inc.P.View().Members; len(ms) > 0 {
			ep.ClosedBy = ms[0]
		}
	}
	t.NakackProtocol.CloseWindow(sender, now)
}
