// Package memtransport is an in-memory stand-in for the network, for tests:
// a Network of transports that implement transport.Transport without a
// socket, and Faults, which wraps any transport (these or the UDP backend)
// to drop, duplicate and reorder what it receives, deterministically for a
// seed. Tests inject them through engine.TransportConfig.Open and Wrap, so
// the engine's public Config carries no test knob.
//
// The package moves byte slices between transports and keeps the
// transport contract (batches, deadlines, the group filter, the safety
// rules on destinations). It must not know the protocol: what a datagram
// holds is opaque to it, except to the group filter program the engine
// installs.
package memtransport

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/nakcast/nakcast/engine/transport"
)

// Network is one in-memory link: every transport opened on it can send to
// the others' unicast addresses and to the groups they joined. It is safe
// for concurrent use. The zero value is not usable: call NewNetwork.
type Network struct {
	mu       sync.Mutex
	byAddr   map[netip.AddrPort]*Transport
	byGroup  map[netip.AddrPort][]*Transport
	nextPort uint16
}

// NewNetwork returns an empty network.
func NewNetwork() *Network {
	return &Network{byAddr: map[netip.AddrPort]*Transport{}, byGroup: map[netip.AddrPort][]*Transport{}, nextPort: 10000}
}

// Open opens a transport on the network with the settings of c that apply
// in memory: Group (port 0 is refused), Unicast (port 0 picks a free port;
// the address defaults to the loopback of the group's family), BatchSize,
// RecvBuffer (the bytes queued before a datagram is dropped, as a socket
// overflows), GroupFilter, NoLoopback (its own group datagrams are not
// delivered back to it), SendOnly and AllowNonLoopback (the destinations
// WriteBatch accepts). Its signature is engine.TransportConfig.Open's.
func (n *Network) Open(c transport.Config) (transport.Transport, error) {
	if !c.Group.IsValid() || !c.Group.Addr().IsMulticast() || c.Group.Port() == 0 {
		return nil, fmt.Errorf("%w: Group %v: want a multicast group with a port", transport.ErrInvalidConfig, c.Group)
	}
	if c.BatchSize <= 0 {
		c.BatchSize = transport.DefaultBatchSize
	}
	if c.RecvBuffer <= 0 {
		c.RecvBuffer = transport.DefaultBufferSize
	}
	if !c.Unicast.IsValid() {
		lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
		if c.Group.Addr().Is6() {
			lo = netip.IPv6Loopback()
		}
		c.Unicast = netip.AddrPortFrom(lo, 0)
	}
	t := newTransport(n, c)
	if err := t.SetGroupFilter(c.GroupFilter); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	local := c.Unicast
	for local.Port() == 0 || n.byAddr[local] != nil {
		if c.Unicast.Port() != 0 {
			return nil, fmt.Errorf("memtransport: %v already in use", c.Unicast)
		}
		n.nextPort++
		local = netip.AddrPortFrom(c.Unicast.Addr(), n.nextPort)
	}
	t.local = local
	n.byAddr[local] = t
	if !c.SendOnly {
		n.byGroup[c.Group] = append(n.byGroup[c.Group], t)
	}
	return t, nil
}

// remove forgets t (Close).
func (n *Network) remove(t *Transport) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.byAddr, t.local)
	g := n.byGroup[t.cfg.Group]
	for i, x := range g {
		if x == t {
			n.byGroup[t.cfg.Group] = append(g[:i:i], g[i+1:]...)
			break
		}
	}
}

// deliver hands a copy of b from src to dst (unicast) or to every member
// of group (dst the zero AddrPort) but, with noLoop, the sender.
func (n *Network) deliver(from *Transport, b []byte, dst netip.AddrPort) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if dst.IsValid() && !dst.Addr().IsMulticast() {
		if t := n.byAddr[dst]; t != nil {
			t.enqueue(b, from.local, false)
		}
		return
	}
	for _, t := range n.byGroup[from.cfg.Group] {
		if t == from && from.cfg.NoLoopback {
			continue
		}
		t.enqueue(b, from.local, true)
	}
}
