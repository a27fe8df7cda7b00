package members

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/nakcast/nakcast/nakack"
)

// Traffic is a node's sending application: Count messages of sizes drawn
// uniformly from [MinSize, MaxSize] (at least 8), one every gap drawn
// uniformly from [0, 2×Interval), from Start until Stop. It sends only
// while the node is a member (and not leaving): meanwhile, and when
// back-pressured, it retries every RetryDelay (1ms if zero). Its messages
// are recorded in the ledger under the incarnation that sent them.
type Traffic struct {
	Count            int
	MinSize, MaxSize int
	Interval         time.Duration
	RetryDelay       time.Duration
	Start, Stop      time.Duration
}

// Generator runs one Traffic on one node.
type Generator struct {
	t    Traffic
	c    *Cluster
	n    *Node
	rng  *rand.Rand
	buf  []byte
	sent int
	done bool
}

// StartTraffic starts t on n; its random draws come from c.Sim.NewRand.
func (c *Cluster) StartTraffic(n *Node, t Traffic) *Generator {
	t.MinSize = max(t.MinSize, 8)
	t.MaxSize = max(t.MaxSize, t.MinSize)
	if t.RetryDelay <= 0 {
		t.RetryDelay = time.Millisecond
	}
	g := &Generator{t: t, c: c, n: n, rng: c.Sim.NewRand(), buf: make([]byte, t.MaxSize)}
	c.Do(t.Start, n, g.step)
	return g
}

// Sent returns how many messages were sent.
func (g *Generator) Sent() int { return g.sent }

// Done reports whether the generator stopped (count reached or Stop
// passed).
func (g *Generator) Done() bool { return g.done }

func (g *Generator) step(now time.Duration) {
	if g.sent >= g.t.Count || now >= g.t.Stop {
		g.done = true
		return
	}
	size := g.t.MinSize + g.rng.IntN(g.t.MaxSize-g.t.MinSize+1)
	p := g.buf[:size]
	for j := range p {
		p[j] = byte(g.rng.Uint32())
	}
	for j := range 8 {
		p[j] = byte(uint64(g.sent) >> (8 * j))
	}
	err := g.n.Send(p, now)
	if inc := g.n.Cur(); inc != nil {
		inc.P.Flush(now)
	}
	g.n.poll()
	switch {
	case err == nil:
		g.sent++
		var gap time.Duration
		if g.t.Interval > 0 {
			gap = time.Duration(g.rng.Int64N(int64(2 * g.t.Interval)))
		}
		g.c.Do(now+gap, g.n, g.step)
	case errors.Is(err, nakack.ErrBackPressure) || errors.Is(err, errNotMember) || errors.Is(err, nakack.ErrNoView):
		g.c.Do(now+g.t.RetryDelay, g.n, g.step)
	default:
		g.c.Sim.Fail(err)
	}
}

// NodeID returns the id of the node the generator runs on.
func (g *Generator) NodeID() uint64 { return g.n.ID }
