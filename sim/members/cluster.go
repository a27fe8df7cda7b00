package members

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/gms"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/sim"
	"github.com/nakcast/nakcast/wire"
)

var (
	discardLogger = replayLogger()
	errNotMember  = errors.New("members: node is not a member")
)

// replayLogger is every node's logger: silent, or gms's and nakack's logs
// at Debug on stderr with NAKCAST_SIM_LOG=1 (replaying one seed; the
// times are the wall clock's, the order is the simulation's).
func replayLogger() *slog.Logger {
	if os.Getenv("NAKCAST_SIM_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Config configures a Cluster. Zero values take the defaults noted.
type Config struct {
	// Seed decides everything (the network, gms's and nakack's
	// randomness).
	Seed uint64
	Net  sim.NetConfig
	// Group is the wire group id (7 if zero).
	Group uint32
	// MaxDatagram is each node's pool's largest datagram (8 KiB if zero).
	MaxDatagram int
	// GMS, if set, adjusts node id's gms.Config after the harness filled
	// it in (Group, ID, Addr, Seed, NewProtocol, App, Listener, Logger;
	// CreateGroup for id 1).
	GMS func(id uint64, cfg *gms.Config)
	// Nakack, if set, adjusts node id's nakack.Config for every
	// incarnation after Self, Group, Pool, Seed, Logger and
	// StableInterval (50ms) are filled in.
	Nakack func(id uint64, cfg *nakack.Config)
	// WrapProtocol, if set, wraps the gms.Protocol of every incarnation
	// (tests that hide digest entries or watch captures).
	WrapProtocol func(inc *Incarnation, p gms.Protocol) gms.Protocol
	// Drop, if set, discards a datagram from→to on arrival, before to's
	// Receive: one-way or per-type outages the network model has no knob
	// for.
	Drop func(from, to digest.Member, datagram []byte) bool
}

// Cluster is one simulated group of whole members.
type Cluster struct {
	cfg    Config
	Sim    *sim.Sim
	Ledger *sim.Ledger
	Meter  *sim.Meter
	nodes  []*Node
}

// New returns an empty cluster on a new simulation.
func New(cfg Config) *Cluster {
	if cfg.Group == 0 {
		cfg.Group = 7
	}
	if cfg.MaxDatagram == 0 {
		cfg.MaxDatagram = 8 << 10
	}
	s := sim.New(cfg.Seed, cfg.Net)
	return &Cluster{cfg: cfg, Sim: s, Ledger: sim.NewLedger(), Meter: sim.NewMeter(s, cfg.Group)}
}

// Add puts a new node with member id id on the network (not joined yet:
// see Join). Node 1 founds a group when its discovery finds none.
func (c *Cluster) Add(id uint64) (*Node, error) {
	n := &Node{c: c, ID: id, pool: wire.NewPool(c.cfg.MaxDatagram, 0)}
	gc := gms.Config{
		Group: c.cfg.Group, ID: id, Addr: strconv.FormatUint(id, 10), Seed: c.Sim.Seed()*7919 ^ id,
		CreateGroup: id == 1, NewProtocol: n.newProtocol, App: stateApp{n}, Listener: n, Logger: discardLogger,
	}
	if c.cfg.GMS != nil {
		c.cfg.GMS(id, &gc)
	}
	g, err := gms.New(gc)
	if err != nil {
		return nil, err
	}
	n.GMS = g
	if err := c.Sim.AddNode(n); err != nil {
		return nil, err
	}
	c.nodes = append(c.nodes, n)
	return n, nil
}

// stateApp routes gms's StateApp calls to the current incarnation's App.
type stateApp struct{ n *Node }

func (s stateApp) State() ([]byte, error) {
	if inc := s.n.Cur(); inc != nil {
		return inc.App.State()
	}
	return nil, errNotMember
}

func (s stateApp) SetState(b []byte) error {
	if inc := s.n.Cur(); inc != nil {
		return inc.App.SetState(b)
	}
	return errNotMember
}

// Nodes returns every node ever added, in order.
func (c *Cluster) Nodes() []*Node { return slices.Clone(c.nodes) }

// Node returns the node with id, or nil.
func (c *Cluster) Node(id uint64) *Node {
	for _, n := range c.nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Do runs fn on n at virtual time at (if n is up then), sending what it
// produced. A failure to schedule fails the simulation.
func (c *Cluster) Do(at time.Duration, n *Node, fn func(now time.Duration)) {
	if err := c.Sim.Do(at, n.Member(), fn); err != nil {
		c.Sim.Fail(err)
	}
}

// Join makes every node in ns join at at.
func (c *Cluster) Join(at time.Duration, ns ...*Node) {
	for _, n := range ns {
		c.Do(at, n, func(now time.Duration) {
			if err := n.GMS.Join(now); err != nil {
				c.Sim.Fail(fmt.Errorf("%v: join: %w", n, err))
			}
		})
	}
}

// Crash crashes n at at.
func (c *Cluster) Crash(at time.Duration, n *Node) {
	c.Sim.Schedule(at, func(time.Duration) { c.Sim.Crash(n.Member()) })
}

// Form founds a group with ns[0] at the current time and joins the others
// 60ms later, and runs until they are in one view with nothing pending (or
// limit, an error then).
func (c *Cluster) Form(limit time.Duration, ns ...*Node) error {
	now := c.Sim.Now()
	c.Join(now, ns[0])
	c.Join(now+60*time.Millisecond, ns[1:]...)
	return c.RunUntil(func() bool { return Converged(ns...) && Quiet(ns...) }, limit, "formed")
}

// RunUntil runs until cond holds (checked every 10ms of virtual time) and
// returns nil, or returns an error at limit or on the simulation's failure.
func (c *Cluster) RunUntil(cond func() bool, limit time.Duration, what string) error {
	done, err := c.Sim.RunWhile(func() bool { return !cond() }, 10*time.Millisecond, limit)
	if err != nil {
		return err
	}
	if !done {
		return fmt.Errorf("seed %d: %s not reached by %v\n%s", c.Sim.Seed(), what, limit, c.Dump())
	}
	return nil
}

// Final returns the nodes that should be members at the end: up, and not
// left for good.
func (c *Cluster) Final() []*Node {
	var ns []*Node
	for _, n := range c.nodes {
		if n.Up() && !n.wantOut && (len(n.incs) > 0 || n.GMS.Status() != gms.StatusIdle) {
			ns = append(ns, n)
		}
	}
	return ns
}

// Converged reports whether every node in ns is a member of one and the
// same view of exactly ns.
func Converged(ns ...*Node) bool {
	if len(ns) == 0 {
		return true
	}
	v := ns[0].GMS.View()
	if len(v.Members) != len(ns) {
		return false
	}
	for _, n := range ns {
		if n.GMS.Status() != gms.StatusMember || !n.GMS.View().Equal(v) || !v.Contains(n.Self()) {
			return false
		}
	}
	return true
}

// Quiet reports whether no node in ns has a membership task under way or
// a capture held, and every one is a member.
func Quiet(ns ...*Node) bool {
	for _, n := range ns {
		inc := n.Cur()
		if inc == nil || !n.GMS.Tasks().Idle() || inc.P.Captures() > 0 {
			return false
		}
	}
	return true
}

// Delivered reports whether every node in ns delivered (or was told lost)
// everything every member of its view sent.
func Delivered(ns ...*Node) bool {
	for _, n := range ns {
		inc := n.Cur()
		if inc == nil {
			return false
		}
		for _, m := range inc.P.View().Members {
			if inc.App.next(m) <= n.c.Ledger.Highest(m) {
				return false
			}
		}
	}
	return true
}

// purgedPoint is the highest seqno of sender a member may be told lost
// while sender is in its view: the sender's own purge point (MSG_NOT_FOUND
// carries it) or the highest Low a merge digest installed at inc gave it,
// widened to the end of the message it falls inside (a lost range covers
// whole messages).
func (c *Cluster) purgedPoint(inc *Incarnation, sender digest.Member) uint64 {
	p := inc.MergeLow[sender]
	if n := c.Node(sender.ID); n != nil {
		for _, si := range n.incs {
			if si.Member == sender {
				p = max(p, si.P.OwnLow())
			}
		}
	}
	if _, last, _, ok := c.Ledger.Message(sender, p); ok {
		p = last
	}
	return p
}

// Dump describes every node, for failure messages.
func (c *Cluster) Dump() string {
	var b strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "node %d up=%v %v %v view=%v coord=%v tasks=%+v lefts=%v\n", n.ID, n.Up(), n.Self(),
			n.GMS.Status(), n.GMS.View(), n.GMS.IsCoordinator(), n.GMS.Tasks(), n.Lefts)
		inc := n.Cur()
		if inc == nil {
			continue
		}
		for _, e := range inc.P.Digest().Entries() {
			fmt.Fprintf(&b, "    %v low=%d delivered=%d received=%d gaps=%v next=%d sent=%d\n", e.Member, e.Low, e.Delivered,
				e.Received, inc.P.Gaps(e.Member, nil), inc.App.next(e.Member), c.Ledger.Highest(e.Member))
		}
	}
	return b.String()
}
