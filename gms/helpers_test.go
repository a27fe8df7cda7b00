package gms

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/sim"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// settled: every node in ns is a member of one and the same view of
// exactly ns, and nothing is pending at any of them.
func settled(ns ...*node) bool { return converged(ns...) && quiet(ns...) }

// formGroup joins ns[0] (the founder) at time 0 and the others 60ms
// later, and runs until they are settled in one view (5s limit).
func (h *harness) formGroup(ns ...*node) {
	h.join(0, ns[0])
	h.join(60*time.Millisecond, ns[1:]...)
	h.runUntil(func() bool { return settled(ns...) }, 5*time.Second, "joined")
}

// joinFour adds members 1..4, member 1 founding and the others joining
// 60ms later, and runs until they share one view and are quiet.
func (h *harness) joinFour() []*node {
	all := []*node{h.add(1), h.add(2), h.add(3), h.add(4)}
	h.formGroup(all...)
	return all
}

// joinFive is joinFour with a fifth member.
func (h *harness) joinFive() []*node {
	all := []*node{h.add(1), h.add(2), h.add(3), h.add(4), h.add(5)}
	h.formGroup(all...)
	return all
}

// without returns ns without the nodes in out, in order.
func without(ns []*node, out ...*node) []*node {
	var rest []*node
	for _, n := range ns {
		keep := true
		for _, o := range out {
			if n == o {
				keep = false
			}
		}
		if keep {
			rest = append(rest, n)
		}
	}
	return rest
}

// splitPairs takes a settled group of four, in view order A, B, C, D, with
// every member sending every 5ms until 300ms before the heal, partitions
// {A,B} from {C,D} from 100ms on until the heal 1.5s from now, and runs
// until the two sides are settled in two views (by the heal). It returns
// the members in view order and the heal time.
func (h *harness) splitPairs(all []*node) (a, b, c, d *node, heal time.Duration) {
	vs := byView(all[0].g.View(), all)
	a, b, c, d = vs[0], vs[1], vs[2], vs[3]
	start := h.s.Now()
	heal = start + 1500*time.Millisecond
	for _, n := range all {
		h.traffic(n, start, heal-300*time.Millisecond, 5*time.Millisecond)
	}
	h.s.Partition(start+100*time.Millisecond, heal,
		[]digest.Member{a.Member(), b.Member()}, []digest.Member{c.Member(), d.Member()})
	h.runUntil(func() bool { return converged(a, b) && converged(c, d) && quiet(a, b) && quiet(c, d) },
		heal, "two views")
	return a, b, c, d, heal
}

// requireComplaintsOnlyAbout checks that every complaint n's fakeApp
// made is about sender m (fakeApp's fold takes a fragmented message for
// one seqno, so it complains about the fragments of m's messages).
func requireComplaintsOnlyAbout(t *testing.T, seed uint64, n *node, m digest.Member) {
	t.Helper()
	for _, e := range n.app.errs {
		require.True(t, strings.HasPrefix(e, fmt.Sprintf("sender %v:", m)), "seed %d: node %d: %s", seed, n.id, e)
	}
}

func seeds(full, race int) int {
	if raceEnabled || testing.Short() {
		return race
	}
	return full
}

// lossyNet draws a network with 0-maxLoss independent loss, some
// duplication and reordering, from the seed.
func lossyNet(seed uint64, maxLoss float64) sim.NetConfig {
	r := rand.New(rand.NewPCG(seed, 99))
	return sim.NetConfig{
		Loss: r.Float64() * maxLoss, Duplicate: r.Float64() * 0.05, Reorder: r.Float64() * 0.1,
		Jitter: 300 * time.Microsecond,
	}
}

// others returns ns without x.
func others(ns []*node, x *node) []*node {
	var out []*node
	for _, n := range ns {
		if n != x {
			out = append(out, n)
		}
	}
	return out
}

// membershipMsg decodes a membership datagram seen by a tap (nil for the
// fake protocol's datagrams and anything undecodable).
func membershipMsg(b []byte) *msg {
	if len(b) < 3 || b[0] == fakeMagic || !IsMembership(wire.Type(b[2])) {
		return nil
	}
	m, err := decode(b, 7)
	if err != nil {
		return nil
	}
	return m
}

// byView returns the node of every member of v, in view order.
func byView[N interface{ self() digest.Member }](v View, all []N) []N {
	var ns []N
	for _, p := range v.Members {
		for _, n := range all {
			if n.self() == p.Member {
				ns = append(ns, n)
			}
		}
	}
	return ns
}

// dataSeqs returns the origin and the seqnos a DATA or FRAG datagram
// carries (ok false for any other datagram).
func dataSeqs(b []byte) (origin digest.Member, first, last uint64, ok bool) {
	h, body, err := wire.DecodeHeader(b, 7)
	if err != nil {
		return digest.Member{}, 0, 0, false
	}
	switch h.Type {
	case wire.TypeData:
		d, err := wire.DecodeData(h, body)
		if err != nil {
			return digest.Member{}, 0, 0, false
		}
		return d.Origin, d.First, d.Last(), true
	case wire.TypeFrag:
		f, err := wire.DecodeFrag(h, body)
		if err != nil {
			return digest.Member{}, 0, 0, false
		}
		return f.Origin, f.Seq, f.Seq, true
	}
	return digest.Member{}, 0, 0, false
}

// sendOnePerMs makes n (a real-nakack node) send messages 1..count, one a
// millisecond from 1ms from now, flushing each (one seqno a datagram with
// joinFourBundling(..., 1)), and returns the millisecond after the last.
func (h *harness) sendOnePerMs(n *node, count uint64) time.Duration {
	start := h.s.Now() + time.Millisecond
	for i := range count {
		h.do(start+time.Duration(i)*time.Millisecond, n, func(now time.Duration) {
			_, err := n.p().Send(fmt.Appendf(nil, "%v/%d", n.self(), i+1), now)
			require.NoError(h.t, err)
			n.p().Flush(now)
			n.poll()
		})
	}
	return start + time.Duration(count)*time.Millisecond
}

// joinFourBundling is joinFour on a network with 200µs of jitter, the
// members bundling at most maxBundle messages a datagram.
func joinFourBundling(t *testing.T, seed uint64, maxBundle int) (*harness, []*node) {
	h := newNakHarness(t, seed, sim.NetConfig{Jitter: 200 * time.Microsecond})
	h.ntw = func(c *nakack.Config) { c.MaxBundle = maxBundle }
	return h, h.joinFour()
}

// sentJoinRsp is a JoinRsp (kind 0) seen on the network.
type sentJoinRsp struct {
	at   time.Duration
	from digest.Member
	to   digest.Member
	v    View
	dig  digest.Digest
}

const (
	cutReqCrash uint8 = iota
	cutFixCrash
	cutAckCrash
)

var cutCrashNames = []string{"on CutReq", "after cut fixed", "on first CutAck"}
