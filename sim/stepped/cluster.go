package stepped

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine"
	"github.com/nakcast/nakcast/sim"
)

// Config configures a Cluster.
type Config struct {
	Seed uint64
	Net  sim.NetConfig
	// Engine, if set, adjusts every member's engine.Config before it
	// opens (Transport.Open, Handler and Self are the cluster's).
	Engine func(*engine.Config)
	// Drop, if set, discards a datagram from→to (member ids) on arrival,
	// before to's member reads it: outages by datagram type or time that
	// the network model has no knob for.
	Drop func(from, to uint64, datagram []byte) bool
}

// group is the simulated group address; member id i has the unicast
// address 127.0.0.1:basePort+i (ids below 2^16-basePort).
var group = netip.MustParseAddrPort("239.77.0.1:5000")

const basePort = 20000

// Cluster is one simulated group of engine members.
type Cluster struct {
	cfg   Config
	s     *sim.Sim
	nodes []*Node
	hash  uint64 // trace: every delivery, lost range and event, in order
}

// New returns an empty cluster on a new simulation.
func New(cfg Config) *Cluster {
	return &Cluster{cfg: cfg, s: sim.New(cfg.Seed, cfg.Net), hash: 14695981039346656037}
}

// Sim returns the simulation.
func (c *Cluster) Sim() *sim.Sim { return c.s }

// Nodes returns every node, in the order added.
func (c *Cluster) Nodes() []*Node { return slices.Clone(c.nodes) }

// Trace returns a hash of everything the members did (deliveries, lost
// ranges, events, each with its virtual time): two runs of one seed
// trace the same.
func (c *Cluster) Trace() uint64 { return c.hash }

func (c *Cluster) trace(id uint64, kind byte, sender digest.Member, a, b uint64) {
	for _, v := range []uint64{uint64(c.s.Now()), id, uint64(kind), sender.ID, uint64(sender.Inc), a, b} {
		c.hash = (c.hash ^ v) * 1099511628211
	}
}

// Addr returns the unicast address of member id's node (for a static
// member list's Membership.MemberAddrs).
func (c *Cluster) Addr(id uint64) netip.AddrPort { return c.addrOf(id) }

func (c *Cluster) addrOf(id uint64) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(basePort+id))
}

func (c *Cluster) idOf(a netip.AddrPort) (uint64, bool) {
	id := uint64(a.Port()) - basePort
	if a.Addr() != c.addrOf(0).Addr() || a.Port() < basePort || c.node(id) == nil {
		return 0, false
	}
	return id, true
}

func (c *Cluster) node(id uint64) *Node {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// Add puts a node with member id id on the network, not yet a member.
func (c *Cluster) Add(id uint64) (*Node, error) {
	if id == 0 || id >= 1<<16-basePort || c.node(id) != nil {
		return nil, fmt.Errorf("stepped: member id %d taken or out of range", id)
	}
	n := &Node{c: c, id: id, next: sim.Never}
	n.tr = simTransport{local: c.addrOf(id), group: group}
	n.app = newApp(n)
	if err := c.s.AddNode(n); err != nil {
		return nil, err
	}
	c.nodes = append(c.nodes, n)
	return n, nil
}

// Join opens n's member at virtual time at: it discovers the group (or
// founds it) and joins through gms in the steps that follow.
func (c *Cluster) Join(at time.Duration, n *Node) error {
	return c.s.Do(at, n.Member(), func(time.Duration) {
		if err := n.open(); err != nil {
			c.s.Fail(err)
		}
	})
}

// Leave closes n's member gracefully at virtual time at
// (engine.Member.StepClose): it stops sending, drains what it sent until
// it is stable and leaves the group in the steps that follow.
func (c *Cluster) Leave(at time.Duration, n *Node) error {
	return c.s.Do(at, n.Member(), func(time.Duration) {
		if err := n.m.StepClose(); err != nil {
			c.s.Fail(fmt.Errorf("member %d: %w", n.id, err))
			return
		}
		n.step()
	})
}

// Crash stops n now: it is no longer stepped and hears nothing.
func (c *Cluster) Crash(n *Node) { c.s.Crash(n.Member()) }

// Traffic makes n offer a message every `every` from start until stop
// while it is in a view (a refused TrySend is not retried).
func (c *Cluster) Traffic(n *Node, start, stop, every time.Duration) error {
	k := 0
	var step func(now time.Duration)
	step = func(now time.Duration) {
		if n.m != nil {
			k++
			n.send(k)
		}
		if now+every < stop {
			_ = c.s.Do(now+every, n.Member(), step)
		}
	}
	return c.s.Do(start, n.Member(), step)
}

// Settled reports whether every node of ns has installed one and the same
// view of exactly ns.
func Settled(ns ...*Node) bool {
	id, v := ns[0].View()
	if len(v) != len(ns) {
		return false
	}
	for _, n := range ns {
		nid, nv := n.View()
		if nid != id || !slices.Equal(nv, v) || !slices.Contains(v, n.m.Self()) {
			return false
		}
	}
	return true
}
