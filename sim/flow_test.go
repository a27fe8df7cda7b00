package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/nakcast/nakcast/nakack"
	"github.com/stretchr/testify/require"
)

// The sender-side rules that the engine leaves to nakack, run on the
// virtual clock: flow control (InFlightBytes), the rate limit, the drain a
// closing member waits for (Drained) and lag detection (LagInterval).

// flowSeeds is how many seeds each test below runs.
func flowSeeds() uint64 { return flowSeedCount }

// lossyNet is a network with latency, jitter, reordering and loss: flow
// control, drains and lag have to hold under repairs.
var lossyNet = NetConfig{Latency: time.Millisecond, Jitter: 300 * time.Microsecond, Loss: 0.03, Reorder: 0.02}

// TestFlowControlBoundsInFlight: with InFlightBytes set, a sender never has
// more of its payload in flight (above what every member reported read)
// than the limit, flow control is what holds it back (the window never
// fills), and the group still delivers everything with no loss reported.
func TestFlowControlBoundsInFlight(t *testing.T) {
	const limit = 24 << 10
	for seed := uint64(1); seed <= flowSeeds(); seed++ {
		g, err := NewGroup(GroupConfig{Seed: seed, Members: 4, Net: lossyNet, Configure: func(i int, c *nakack.Config) {
			c.InFlightBytes = limit
			c.StableInterval = 10 * time.Millisecond
		}})
		require.NoError(t, err)
		var peak uint64
		g.Sim.AddCheck(func(time.Duration) error {
			for _, n := range g.Nodes {
				f := n.P.InFlight()
				if f > limit {
					return fmt.Errorf("member %v has %d bytes in flight, limit %d", n.Member(), f, limit)
				}
				peak = max(peak, f)
			}
			return nil
		})
		for i := range 2 {
			_, err := g.StartTraffic(i, Traffic{Count: 1500, MinSize: 64, MaxSize: 1024, Burst: 100, Interval: time.Millisecond})
			require.NoError(t, err)
		}
		require.NoError(t, g.RunToQuiescence(60*time.Second, true))
		require.Greater(t, peak, uint64(limit/2), "seed %d: flow control never came near its limit", seed)
		for i := range 2 {
			st := g.Nodes[i].P.Stats()
			require.Positive(t, st.FlowControlWaits, "seed %d: member %d never held back by flow control", seed, i)
			require.Zero(t, st.BackPressure, "seed %d: member %d's window filled: flow control is not what held it", seed, i)
			require.Positive(t, g.Gens[i].BackPressureEvents(), "seed %d", seed)
		}
	}
}

// TestRateLimitPacesSender: a sender limited to RateLimit bytes a second
// never sends more than that plus one burst by any instant, and its
// traffic takes the time the limit says.
func TestRateLimitPacesSender(t *testing.T) {
	const (
		rate  = 200_000 // bytes a second
		size  = 1000
		count = 400
		burst = 8 << 10 // MaxDatagram
	)
	for seed := uint64(1); seed <= flowSeeds(); seed++ {
		g, err := NewGroup(GroupConfig{Seed: seed, Members: 3, Net: lossyNet, Configure: func(i int, c *nakack.Config) {
			c.RateLimit = rate
		}})
		require.NoError(t, err)
		g.Sim.AddCheck(func(now time.Duration) error {
			if sent := g.Nodes[0].P.Stats().Sent * size; float64(sent) > burst+rate*now.Seconds()+size {
				return fmt.Errorf("%d bytes sent by %v: above the rate limit's %v", sent, now, burst+rate*now.Seconds())
			}
			return nil
		})
		gen, err := g.StartTraffic(0, Traffic{Count: count, MinSize: size, MaxSize: size, Burst: count})
		require.NoError(t, err)
		require.NoError(t, g.RunToQuiescence(60*time.Second, true))
		want := time.Duration(float64(count*size-burst) / rate * float64(time.Second))
		require.GreaterOrEqual(t, gen.DoneAt(), want-time.Millisecond, "seed %d", seed)
		require.Less(t, gen.DoneAt(), want+want/10, "seed %d: the limit held the sender back too long", seed)
	}
}

// TestDrainedOnlyOnceEveryoneHasEverything: a member's Drained, what a
// closing member waits for before it leaves, is never true while some
// member still lacks a message this member sent or received (here one is
// partitioned away while two members send), and becomes true soon after
// the network heals and the traffic ends.
func TestDrainedOnlyOnceEveryoneHasEverything(t *testing.T) {
	const heal = 600 * time.Millisecond
	for seed := uint64(1); seed <= flowSeeds(); seed++ {
		g, err := NewGroup(GroupConfig{Seed: seed, Members: 3, Net: lossyNet, Configure: func(i int, c *nakack.Config) {
			c.StableInterval = 20 * time.Millisecond
		}})
		require.NoError(t, err)
		g.Sim.Partition(100*time.Millisecond, heal, g.View.Members[:2], g.View.Members[2:])
		g.HealedAt = heal
		drainedAt := make([]time.Duration, len(g.Nodes))
		g.Sim.AddCheck(func(now time.Duration) error {
			for i, n := range g.Nodes {
				if !n.P.Drained() {
					drainedAt[i] = -1
					continue
				}
				for _, sender := range g.View.Members {
					e, _ := n.P.WindowState(sender)
					for _, r := range g.Nodes {
						if next := r.Rec.Next(sender); next <= e.Received {
							return fmt.Errorf("member %v drained with %v's messages up to %d while %v delivered up to %d", n.Member(), sender, e.Received, r.Member(), next-1)
						}
					}
				}
				if drainedAt[i] < 0 {
					drainedAt[i] = now
				}
			}
			return nil
		})
		for i := range 2 {
			_, err := g.StartTraffic(i, Traffic{Count: 300, MinSize: 64, MaxSize: 2000, Burst: 10, Interval: 2 * time.Millisecond})
			require.NoError(t, err)
		}
		require.NoError(t, g.RunToQuiescence(60*time.Second, true))
		end := max(g.TrafficEnd(), heal)
		for i, n := range g.Nodes {
			require.True(t, n.P.Drained(), "seed %d: member %d not drained once settled", seed, i)
			require.Positive(t, drainedAt[i], "seed %d: member %d", seed, i)
			require.Less(t, drainedAt[i]-end, 2*time.Second, "seed %d: member %d drained %v after the end", seed, i, drainedAt[i]-end)
		}
	}
}

// TestLagDetected: a member whose application stops consuming reports one
// lagging episode once its backlog passes LagThreshold; the senders then
// wait for it (stability does), and once it consumes again the episode
// ends and the group delivers everything.
func TestLagDetected(t *testing.T) {
	const threshold = 1500
	for seed := uint64(1); seed <= flowSeeds(); seed++ {
		g, err := NewGroup(GroupConfig{Seed: seed, Members: 3, Net: lossyNet, Configure: func(i int, c *nakack.Config) {
			c.SendWindow = 4096
			c.LagInterval = 20 * time.Millisecond
			c.LagThreshold = threshold
			c.StableInterval = 10 * time.Millisecond
		}})
		require.NoError(t, err)
		slow := g.Nodes[2]
		require.NoError(t, g.Sim.Do(0, slow.Member(), func(time.Duration) { slow.Stall(true) }))
		gen, err := g.StartTraffic(0, Traffic{Count: 8000, MinSize: 64, MaxSize: 256, Burst: 10, Interval: time.Millisecond})
		require.NoError(t, err)
		done, err := g.Sim.RunWhile(func() bool { return !slow.P.Lagging() }, time.Millisecond, 10*time.Second)
		require.NoError(t, err)
		require.True(t, done, "seed %d: the stalled member never reported lagging", seed)
		require.GreaterOrEqual(t, slow.P.Backlog(), uint64(threshold))
		require.NoError(t, g.Sim.RunUntil(g.Sim.Now()+time.Second))
		require.True(t, gen.Blocked(), "seed %d: the sender does not wait for the stalled member", seed)
		require.True(t, slow.P.Lagging())
		require.NoError(t, g.Sim.Do(g.Sim.Now(), slow.Member(), func(time.Duration) { slow.Stall(false) }))
		require.NoError(t, g.RunToQuiescence(60*time.Second, true))
		require.False(t, slow.P.Lagging(), "seed %d", seed)
		for i, n := range g.Nodes {
			want := uint64(0)
			if n == slow {
				want = 1
			}
			require.Equal(t, want, n.P.Stats().LaggingEpisodes, "seed %d: member %d", seed, i)
		}
	}
}
