package bench

import (
	"fmt"
	"time"

	"github.com/nakcast/nakcast/engine"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/sim"
)

// SimTwinConfig describes a simulated twin of a RunNetns run with one paced
// sender (member 0) and EgressLoss: the same members, messages, rate and
// loss near every sender (sim.NetConfig.SharedLoss), each member's nakack
// configured as the engine configures it by default for datagrams of
// Datagram bytes.
type SimTwinConfig struct {
	Members  int
	Count    int
	MsgSize  int
	Rate     float64 // messages per second
	Loss     float64 // shared loss near every sender
	Datagram int     // largest datagram (the netns MTU less 28)
	Seed     uint64
}

// SimScaleTwin runs cfg in the simulator (50µs latency, 25µs jitter: a
// veth pair and a bridge) and returns its ScaleFigures, computed from the
// simulated members' counters exactly as ScaleFiguresOf does from the
// processes' (the lost data datagrams counted by the simulator's network).
func SimScaleTwin(cfg SimTwinConfig) (ScaleFigures, error) {
	g, err := sim.NewGroup(sim.GroupConfig{Seed: cfg.Seed, Members: cfg.Members, MaxDatagram: cfg.Datagram,
		Net: sim.NetConfig{Jitter: 25 * time.Microsecond, SharedLoss: cfg.Loss},
		Configure: func(i int, c *nakack.Config) {
			c.SendWindow, c.RecvWindow = engine.DefaultWindow, 2*engine.DefaultWindow
			c.NakDelay, c.NakInterval, c.NakMaxInterval = engine.DefaultNakDelay, engine.DefaultNakInterval, engine.DefaultNakMaxInterval
			c.StableInterval, c.StableBytes = engine.DefaultStableInterval, engine.DefaultStableBytes
			if i == 0 {
				c.StableInterval = time.Millisecond // the engine's coordinator
			}
		}})
	if err != nil {
		return ScaleFigures{}, err
	}
	lt := sim.NewLossTracker(g, 0)
	gen, err := g.StartTraffic(0, sim.Traffic{Count: cfg.Count, MinSize: cfg.MsgSize, MaxSize: cfg.MsgSize, Burst: 1,
		Interval: time.Duration(1e9 / cfg.Rate)})
	if err != nil {
		return ScaleFigures{}, err
	}
	if err := g.RunToQuiescence(10*time.Minute, true); err != nil {
		return ScaleFigures{}, fmt.Errorf("bench: simulated twin: %w", err)
	}
	stats := make([]nakack.Stats, len(g.Nodes))
	for i, n := range g.Nodes {
		stats[i] = n.P.Stats()
	}
	return scaleFigures(stats, 0, uint64(lt.Figures().LostRanges), gen.Offered(), gen.DoneAt()), nil
}
