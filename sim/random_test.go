package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/nakack"
	"github.com/stretchr/testify/require"
)

// scenario is one randomised run's parameters, all drawn from its seed.
type scenario struct {
	seed        uint64
	members     int
	senders     int
	net         NetConfig
	traffic     []Traffic
	sendWindow  int  // nakack SendWindow (0: default 4096)
	unicastNaks bool // nakack UnicastNaks
	// partition, when partEnd > partAt: the first partSize members cannot
	// reach the others from partAt until partEnd.
	partSize        int
	partAt, partEnd time.Duration
	settleBy        time.Duration // virtual time by which everything must be delivered and purged
	// stableInterval is nakack's StableInterval (0: the default).
	stableInterval time.Duration
}

func (sc scenario) String() string {
	s := fmt.Sprintf("seed %d: %d members, %d senders, shared loss %.3f, loss %.3f, dup %.3f, reorder %.3f, jitter %v, send window %d, unicast naks %v",
		sc.seed, sc.members, sc.senders, sc.net.SharedLoss, sc.net.Loss, sc.net.Duplicate, sc.net.Reorder, sc.net.Jitter, sc.sendWindow, sc.unicastNaks)
	for i, t := range sc.traffic {
		s += fmt.Sprintf(", sender %d: %d msgs of %d-%d bytes", i, t.Count, t.MinSize, t.MaxSize)
	}
	if sc.net.ReorderDelay > 0 {
		s += fmt.Sprintf(", reorder delay %v", sc.net.ReorderDelay)
	}
	if sc.stableInterval > 0 {
		s += fmt.Sprintf(", stable interval %v", sc.stableInterval)
	}
	if sc.partEnd > sc.partAt {
		s += fmt.Sprintf(", partition of the first %d members from %v to %v", sc.partSize, sc.partAt, sc.partEnd)
	}
	return s
}

// newScenario draws the parameters of seed: 3-7 members, 2-3 senders, loss
// (shared and independent together) up to 20%, duplication and reordering
// up to 20%, jitter up to 2ms, 50-400 messages per sender of 8-1000 bytes
// (in one scenario out of five up to 20000 bytes: fragmented); in half the
// scenarios a small send window (64 or 128 messages) so that senders are
// back-pressured until stability purges; in one out of five unicast
// requests; in one out of six a partition that heals. In one out of four
// the reordered copies are held 5-30ms (a datagram left in one socket
// while its receiver drains another), and in one out of four members
// report stability every 2-10ms: together they let a request, the data it
// asks for and a whole stability round overtake each other (a request
// that reaches its sender after its requester's STABLE made what it asks
// for stable). These draws come last, so the earlier parameters of a seed
// do not change with them.
func newScenario(seed uint64) scenario {
	rng := rand.New(rand.NewPCG(seed, 0x5ce9a410))
	sc := scenario{seed: seed, members: 3 + rng.IntN(5)}
	sc.senders = 2 + rng.IntN(2)
	loss := rng.Float64() * 0.2
	shared := loss * rng.Float64()
	sc.net = NetConfig{
		SharedLoss: shared,
		Loss:       loss - shared,
		Duplicate:  rng.Float64() * 0.2,
		Reorder:    rng.Float64() * 0.2,
		Jitter:     time.Duration(rng.Int64N(int64(2 * time.Millisecond))),
	}
	for range sc.senders {
		maxSize := 8 + rng.IntN(993)
		if rng.IntN(5) == 0 {
			maxSize = 8 + rng.IntN(20000)
		}
		sc.traffic = append(sc.traffic, Traffic{
			Count:    50 + rng.IntN(351),
			MinSize:  8,
			MaxSize:  maxSize,
			Burst:    1 + rng.IntN(8),
			Interval: time.Duration(100+rng.IntN(2000)) * time.Microsecond,
			Start:    time.Duration(rng.IntN(5)) * time.Millisecond,
		})
	}
	if w := 64 << rng.IntN(2); rng.IntN(2) == 0 {
		sc.sendWindow = w
	}
	sc.unicastNaks = rng.IntN(5) == 0
	if rng.IntN(6) == 0 {
		sc.partSize = 1 + rng.IntN(sc.members-1)
		sc.partAt = time.Duration(10+rng.IntN(200)) * time.Millisecond
		sc.partEnd = sc.partAt + time.Duration(50+rng.IntN(1000))*time.Millisecond
	}
	if rng.IntN(4) == 0 {
		sc.net.ReorderDelay = time.Duration(5+rng.IntN(26)) * time.Millisecond
	}
	if rng.IntN(4) == 0 {
		sc.stableInterval = time.Duration(2+rng.IntN(9)) * time.Millisecond
	}
	sc.settleBy = 60 * time.Second
	return sc
}

// runScenario runs one randomised scenario and returns the first invariant
// violation. A partition without a view change purges nothing that the far
// side lacks, so even then no loss may be reported and no MSG_NOT_FOUND
// sent: every scenario is checked as clean.
func runScenario(sc scenario) (*Group, error) {
	g, err := NewGroup(GroupConfig{Seed: sc.seed, Members: sc.members, Net: sc.net,
		Configure: func(i int, cfg *nakack.Config) {
			cfg.SendWindow = sc.sendWindow
			if sc.sendWindow > 0 {
				cfg.RecvWindow = sc.sendWindow
				if *flagLooseWindows {
					cfg.RecvWindow = 4 * sc.sendWindow
				}
			}
			cfg.UnicastNaks = sc.unicastNaks
			cfg.StableInterval = sc.stableInterval
		}})
	if err != nil {
		return nil, err
	}
	for i, t := range sc.traffic {
		if _, err := g.StartTraffic(i, t); err != nil {
			return nil, err
		}
	}
	if sc.partEnd > sc.partAt {
		var side []digest.Member
		for i := range sc.partSize {
			side = append(side, GroupMember(i))
		}
		g.Sim.Partition(sc.partAt, sc.partEnd, side)
		g.HealedAt = sc.partEnd
	}
	return g, g.RunToQuiescence(sc.settleBy, true)
}

// replayCommand is the command that replays seed alone.
func replayCommand(seed uint64) string {
	c := fmt.Sprintf("go test ./sim/ -run TestRandomised -sim.seed=%d -v", seed)
	if *flagLooseWindows {
		c += " -sim.loosewindows"
	}
	return c
}

// TestRandomised runs seedCount() randomised scenarios (500, 50 under
// -race; -sim.seeds=N for more) and checks every invariant on each. A
// failure names its seed; replay it with -sim.seed=N.
func TestRandomised(t *testing.T) {
	if *flagSeed >= 0 {
		sc := newScenario(uint64(*flagSeed))
		t.Log(sc)
		_, err := runScenario(sc)
		require.NoError(t, err, "replay: %s", replayCommand(sc.seed))
		return
	}
	n := seedCount()
	const shards = 8 // parallel subtests, each a contiguous block of seeds
	failures := make([]int, shards)
	for sh := range shards {
		t.Run(fmt.Sprintf("shard%d", sh), func(t *testing.T) {
			t.Parallel()
			for seed := *flagSeedFrom + sh; seed < *flagSeedFrom+n; seed += shards {
				sc := newScenario(uint64(seed))
				if _, err := runScenario(sc); err != nil {
					failures[sh]++
					t.Errorf("%v\n%v\nreplay: %s", sc, err, replayCommand(sc.seed))
					if failures[sh] >= 5 {
						t.Fatalf("stopping this shard after %d failures", failures[sh])
					}
				}
			}
		})
	}
}

// TestRandomisedReplaysIdentically runs a few lossy scenarios twice and
// requires the same event count, the same network statistics, the same
// datagrams at the same virtual times and the same protocol counters.
func TestRandomisedReplaysIdentically(t *testing.T) {
	for _, seed := range []uint64{3, 17, 101} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			run := func() (uint64, uint64, NetStats, []nakack.Stats) {
				sc := newScenario(seed)
				g, err := runScenario(sc)
				require.NoError(t, err)
				var stats []nakack.Stats
				for _, n := range g.Nodes {
					stats = append(stats, n.P.Stats())
				}
				return g.Trace(), g.Sim.Steps(), g.Sim.NetStats(), stats
			}
			h1, s1, n1, st1 := run()
			h2, s2, n2, st2 := run()
			require.Equal(t, h1, h2, "datagram trace")
			require.Equal(t, s1, s2, "events")
			require.Equal(t, n1, n2)
			require.Equal(t, st1, st2)
		})
	}
}
