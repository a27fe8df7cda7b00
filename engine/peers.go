package engine

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
)

// groupPeers lists the running agents of this process by group, so that a
// member that sends wakes the blocked agents of the other members of its
// group in the process at once.
//
// A blocked agent waits on its sockets through Go's network poller, and
// the scheduler polls the network only when a P runs out of goroutines
// (or from sysmon, every 10ms at most): while the sender's agent and
// application keep both Ps busy, a receiver of the same process stays
// blocked with datagrams queued on its socket, until the sender runs out
// of flow-control window and blocks too. Members of one process then take
// turns instead of running side by side (the benchmark's 1 sender to 2
// receivers, or an application with several members of a group). A wake
// is the producers' (logBuffer.wake): the agent's read returns at once
// and the agent looks at its sockets. A woken agent that finds nothing
// blocks again; an agent is woken at most once a time it blocks.
type groupPeers struct {
	mu   sync.Mutex
	list atomic.Pointer[[]peer] // copied on change, read without the lock
}

// peer is one running agent: its group and its log buffer (the parked
// flag and the wake).
type peer struct {
	group netip.AddrPort
	q     *logBuffer
}

var peers groupPeers

// add registers q's agent as a member of group.
func (g *groupPeers) add(group netip.AddrPort, q *logBuffer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var l []peer
	if p := g.list.Load(); p != nil {
		l = slices.Clone(*p)
	}
	l = append(l, peer{group: group, q: q})
	g.list.Store(&l)
}

// remove unregisters q's agent.
func (g *groupPeers) remove(q *logBuffer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.list.Load()
	if p == nil {
		return
	}
	l := slices.DeleteFunc(slices.Clone(*p), func(e peer) bool { return e.q == q })
	g.list.Store(&l)
}

// wake wakes the blocked agents of group other than from's, after from's
// agent sent. It reports how many it woke.
func (g *groupPeers) wake(group netip.AddrPort, from *logBuffer) int {
	p := g.list.Load()
	if p == nil || len(*p) < 2 {
		return 0
	}
	n := 0
	for _, e := range *p {
		if e.q != from && e.group == group && e.q.unpark() {
			n++
		}
	}
	return n
}
