package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// scenario is one randomised run's parameters, all drawn from its seed.
type scenario struct {
	seed     uint64
	members  int
	senders  int
	net      NetConfig
	traffic  []Traffic
	settleBy time.Duration // virtual time by which everything must be delivered and purged
}

func (sc scenario) String() string {
	return fmt.Sprintf("seed %d: %d members, %d senders, shared loss %.3f, loss %.3f, dup %.3f, reorder %.3f, jitter %v",
		sc.seed, sc.members, sc.senders, sc.net.SharedLoss, sc.net.Loss, sc.net.Duplicate, sc.net.Reorder, sc.net.Jitter)
}

// newScenario draws the parameters of seed: 3-7 members, 2-3 senders, loss
// (shared and independent together) up to 20%, duplication and reordering
// up to 20%, jitter up to 2ms, 50-250 messages per sender of 8-1000 bytes.
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
		sc.traffic = append(sc.traffic, Traffic{
			Count:    50 + rng.IntN(201),
			MinSize:  8,
			MaxSize:  8 + rng.IntN(993),
			Burst:    1 + rng.IntN(8),
			Interval: time.Duration(100+rng.IntN(2000)) * time.Microsecond,
			Start:    time.Duration(rng.IntN(5)) * time.Millisecond,
		})
	}
	sc.settleBy = 30 * time.Second
	return sc
}

// runScenario runs one randomised scenario and returns the first invariant
// violation.
func runScenario(sc scenario) error {
	g, err := NewGroup(GroupConfig{Seed: sc.seed, Members: sc.members, Net: sc.net})
	if err != nil {
		return err
	}
	for i, t := range sc.traffic {
		if _, err := g.StartTraffic(i, t); err != nil {
			return err
		}
	}
	return g.RunToQuiescence(sc.settleBy, true)
}

// TestRandomised runs seedCount() randomised scenarios (500, 50 under
// -race; -sim.seeds=N for more) and checks every invariant on each. A
// failure names its seed; replay it with -sim.seed=N.
func TestRandomised(t *testing.T) {
	if *flagSeed >= 0 {
		sc := newScenario(uint64(*flagSeed))
		t.Log(sc)
		require.NoError(t, runScenario(sc), "replay: go test ./sim/ -run TestRandomised -sim.seed=%d -v", sc.seed)
		return
	}
	n := seedCount()
	const shards = 8 // parallel subtests, each a contiguous block of seeds
	failures := make([]int, shards)
	for sh := range shards {
		t.Run(fmt.Sprintf("shard%d", sh), func(t *testing.T) {
			t.Parallel()
			for seed := sh; seed < n; seed += shards {
				sc := newScenario(uint64(seed))
				if err := runScenario(sc); err != nil {
					failures[sh]++
					t.Errorf("%v\n%v\nreplay: go test ./sim/ -run TestRandomised -sim.seed=%d -v", sc, err, seed)
					if failures[sh] >= 5 {
						t.Fatalf("stopping this shard after %d failures", failures[sh])
					}
				}
			}
		})
	}
}
