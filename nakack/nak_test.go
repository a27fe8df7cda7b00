package nakack

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

func TestInOrderDeliveryIncludingSelf(t *testing.T) {
	c := newCluster(t, nil, mA, mB, mC)
	c.deliver(c.send(mB, false, payloads("b", 1, 10)...), nil)
	c.run(time.Second, nil)
	for _, m := range []digest.Member{mA, mB, mC} {
		require.Equal(t, span(1, 10), c.rec(m).seqs(mB), "member %v", m)
		require.Empty(t, c.rec(m).lost)
	}
	require.Equal(t, "b1", c.rec(mA).dels[0].payload)
	require.Equal(t, uint64(11), c.p(mB).NextSeq())
}

// TestRetransmissionStepping: receive 1-4, 6, 8, 14-17, 19: only 1-4 are
// deliverable; the first request round after the reorder delay asks exactly
// for 5, 7, 9-13, 18; supplying them leaves no requests.
func TestRetransmissionStepping(t *testing.T) {
	for _, unicast := range []bool{false, true} {
		t.Run(map[bool]string{false: "multicast", true: "unicast"}[unicast], func(t *testing.T) {
			c := newCluster(t, func(cfg *Config) { cfg.UnicastNaks = unicast }, mB, mA)
			ds := c.send(mB, true, payloads("b", 1, 19)...)
			require.Len(t, ds, 19)
			held := map[uint64]bool{}
			for _, s := range cat(span(1, 4), []uint64{6, 8}, span(14, 17), []uint64{19}) {
				held[s] = true
			}
			var missing []dgram
			for _, d := range ds {
				_, first, _ := dataRange(t, d)
				if held[first] {
					c.deliverTo(d, mA)
				} else {
					missing = append(missing, d)
				}
			}
			a := c.p(mA)
			a.Poll(c.rec(mA), 100)
			require.Equal(t, span(1, 4), c.rec(mA).seqs(mB))

			// Nothing before the reorder delay.
			a.Tick(c.now + a.cfg.NakDelay - 1)
			require.Empty(t, a.Outbox())
			c.now += a.cfg.NakDelay + a.cfg.NakJitter
			a.Tick(c.now)
			reqs := c.take()
			require.Equal(t, []wire.Range{rg(5, 5), rg(7, 7), rg(9, 13), rg(18, 18)}, xmitRanges(t, reqs, mB))
			require.Len(t, ofType(reqs, wire.TypeXmitReq), 1, "one datagram for every range")
			if unicast {
				require.Equal(t, mB, reqs[0].to)
			} else {
				require.True(t, reqs[0].to.IsZero())
			}

			for _, d := range missing {
				c.deliverTo(d, mA)
			}
			a.Poll(c.rec(mA), 100)
			require.Equal(t, span(1, 19), c.rec(mA).seqs(mB))
			c.now += time.Second
			a.Tick(c.now)
			require.Empty(t, ofType(c.take(), wire.TypeXmitReq))
			require.NotEqual(t, true, a.senders[mB].armed)
		})
	}
}

// TestNakBackoff: an unanswered gap is requested again with doubling
// intervals up to the cap; the data cancels the timer. (NakJitterPeers -1:
// the whole NakInterval whatever the view; TestScaledRetry covers the
// scaling.)
func TestNakBackoff(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.NakJitter = -1; cfg.NakJitterPeers = -1 }, mB, mA)
	ds := c.send(mB, true, "1", "2", "3")
	c.deliverTo(ds[0], mA)
	c.deliverTo(ds[2], mA)
	a := c.p(mA)
	var times []time.Duration
	for range 8 {
		c.now = a.NextDeadline()
		a.Tick(c.now)
		if len(xmitRanges(t, c.take(), mB)) > 0 {
			times = append(times, c.now)
		}
	}
	require.GreaterOrEqual(t, len(times), 6)
	var gaps []time.Duration
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, times[i]-times[i-1])
	}
	require.Equal(t, []time.Duration{10, 20, 40, 80, 80}, func() []time.Duration {
		out := make([]time.Duration, 5)
		for i := range out {
			out[i] = gaps[i] / time.Millisecond
		}
		return out
	}())
	c.deliverTo(ds[1], mA)
	require.False(t, a.senders[mB].armed)
}

// TestSuppression: a member that sees another member's request covering its
// gap backs off; the sender ignores a repeat within the linger.
func TestSuppression(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.RepairLinger = 5 * time.Millisecond }, mB, mA, mC)
	ds := c.send(mB, true, "1", "2", "3")
	for _, m := range []digest.Member{mA, mC} {
		c.deliverTo(ds[0], m)
		c.deliverTo(ds[2], m)
	}
	a, cc := c.p(mA), c.p(mC)
	first, second := a, cc
	if cc.senders[mB].nakAt < a.senders[mB].nakAt {
		first, second = cc, a
	}
	c.now = first.senders[mB].nakAt
	first.Tick(c.now)
	req := c.take()
	require.Len(t, xmitRanges(t, req, mB), 1)
	// The request reaches the other receiver (not the sender yet).
	for _, d := range req {
		c.deliverTo(d, second.self)
	}
	require.Equal(t, uint64(1), second.Stats().Suppressed)
	require.Greater(t, second.senders[mB].nakAt, c.now+c.p(mA).nakInterval-1)
	// The sender repairs once, ignores the same request again within linger.
	for _, d := range req {
		c.deliverTo(d, mB)
		c.deliverTo(d, mB)
	}
	rep := ofType(c.take(), wire.TypeData)
	require.Len(t, rep, 1)
	require.Equal(t, uint64(1), c.p(mB).Stats().RepairsSkipped)
	c.deliver(rep, nil)
	require.False(t, a.senders[mB].armed)
	require.False(t, cc.senders[mB].armed)
}

// TestStaleRequest: a request at or below the requester's delivered is
// dropped and counted, never answered (not even by MSG_NOT_FOUND).
func TestStaleRequest(t *testing.T) {
	c := newCluster(t, nil, mB, mA)
	c.send(mB, false, payloads("b", 1, 20)...)
	b := c.p(mB)
	b.Poll(c.rec(mB), 100)
	_, err := b.ForcePurge(mB, 10)
	require.NoError(t, err)
	buf := c.pool.Get(200)
	d, err := wire.EncodeXmitReq(buf.B, wire.Header{Group: testGroup, Sender: mA}, c.view.ID, mB, 12,
		[]wire.Range{rg(3, 8), rg(11, 12)})
	require.NoError(t, err)
	buf.N = len(d)
	require.NoError(t, b.Receive(buf, c.now))
	buf.Release()
	require.Equal(t, uint64(2), b.Stats().StaleRequests)
	require.Empty(t, b.Outbox())
	require.Zero(t, b.Stats().MsgNotFoundSent)
}

// TestLossyRuns: three members, two senders, random loss, duplication and
// reordering by seed; every member delivers every message exactly once in
// order and nobody reports loss or sends MSG_NOT_FOUND.
func TestLossyRuns(t *testing.T) {
	seeds := lossySeeds
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 99))
		loss := float64(seed%5) * 0.05
		c := newCluster(t, func(cfg *Config) {
			cfg.Seed = uint64(seed)
			cfg.StableInterval = 50 * time.Millisecond
			cfg.MaxBundle = 8
		}, mA, mB, mC)
		drop := func(d dgram, to digest.Member) bool { return rng.Float64() < loss }
		sent := map[digest.Member]int{}
		for round := range 30 {
			for _, m := range []digest.Member{mA, mB} {
				k := rng.IntN(12)
				for range k {
					if _, err := c.p(m).Send([]byte(itoa(round)), c.now); err == nil {
						sent[m]++
					}
				}
				c.p(m).Flush(c.now)
			}
			ds := c.take()
			rng.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
			if rng.IntN(4) == 0 && len(ds) > 0 {
				ds = append(ds, ds[0])
			}
			c.deliver(ds, drop)
			c.run(c.now+3*time.Millisecond, drop)
		}
		c.run(c.now+5*time.Second, nil)
		for _, m := range c.order {
			for _, s := range []digest.Member{mA, mB} {
				require.Equal(t, span(1, uint64(sent[s])), c.rec(m).seqs(s), "seed %d member %v sender %v", seed, m, s)
			}
			require.Empty(t, c.rec(m).lost, "seed %d", seed)
			require.Zero(t, c.p(m).Stats().MsgNotFoundSent, "seed %d", seed)
		}
		// Stability drained the retention.
		for _, m := range c.order {
			for _, s := range []digest.Member{mA, mB} {
				e, _ := c.p(m).WindowState(s)
				require.Equal(t, uint64(sent[s]), e.Low, "seed %d member %v sender %v purged", seed, m, s)
			}
		}
	}
}
