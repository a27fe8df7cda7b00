package gms

import (
	"fmt"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/sim"
	"github.com/stretchr/testify/require"
)

// TestOneSidedInitialHostsMerge (simulator): two groups formed apart
// through InitialHosts, {1,2} and {3,4} (1 and 3 found), where only one
// group's members list the other's hosts. Once the partition heals they
// merge within two seconds either way: coordinators find each other by the
// heartbeats they multicast (kind 1, with their address), never through
// InitialHosts, which only replaces multicast discovery for joiners.
func TestOneSidedInitialHostsMerge(t *testing.T) {
	for _, xListsY := range []bool{true, false} {
		t.Run(fmt.Sprintf("lowerListsUpper=%v", xListsY), func(t *testing.T) {
			h := newHarness(t, 1, sim.NetConfig{Latency: 200 * time.Microsecond, Jitter: time.Millisecond})
			x, y := []string{"1", "2"}, []string{"3", "4"}
			h.tweak = func(c *Config) {
				c.CreateGroup = c.ID == 1 || c.ID == 3
				inX := c.ID <= 2
				switch {
				case inX == xListsY: // the listing side
					c.InitialHosts = append(append([]string(nil), x...), y...)
				case inX:
					c.InitialHosts = x
				default:
					c.InitialHosts = y
				}
			}
			a, b, c, d := h.add(1), h.add(2), h.add(3), h.add(4)
			const heal = time.Second
			h.s.Partition(0, heal, []digest.Member{a.Member(), b.Member()}, []digest.Member{c.Member(), d.Member()})
			h.join(0, a, c)
			h.join(300*time.Millisecond, b, d)
			h.runUntil(func() bool { return settled(a, b) && settled(c, d) }, heal, "two groups")
			require.Equal(t, a.self(), b.g.View().Coord().Member)
			require.Equal(t, c.self(), d.g.View().Coord().Member)
			h.runUntil(func() bool { return settled(a, b, c, d) }, heal+2*time.Second, "merged")
			require.Equal(t, a.self(), d.g.View().Coord().Member, "the smaller coordinator id leads")
			require.Equal(t, uint64(1), a.g.Stats().Merges)
			for _, n := range []*node{a, b, c, d} {
				require.Empty(t, n.left, "node %d", n.id)
			}
			h.noErrors()
		})
	}
}

// TestOneWayMulticastMerge (simulator, fake protocol): {1,2,3} splits into
// {1,2} and {3} (each side excludes the other) and the partition heals,
// but 3's multicasts no longer reach 1 and 2 while it hears theirs and
// unicast works both ways. 1 must lead the merge (the smaller coordinator
// id) but never hears 3's heartbeats: 3, hearing the heartbeat of a
// coordinator that leads, answers it by unicast, and the groups merge
// within two seconds of the heal.
func TestOneWayMulticastMerge(t *testing.T) {
	for seed := range uint64(seeds(10, 3)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newHarness(t, seed, sim.NetConfig{Jitter: 200 * time.Microsecond})
			all := []*node{h.add(1), h.add(2), h.add(3)}
			h.formGroup(all...)
			a, b, c := all[0], all[1], all[2]
			heal := h.s.Now() + 2*time.Second
			h.s.Partition(h.s.Now(), heal, []digest.Member{c.Member()})
			h.runUntil(func() bool { return settled(a, b) && settled(c) }, heal, "two groups")
			h.s.Schedule(heal, func(time.Duration) {
				for _, n := range []*node{a, b} {
					require.NoError(t, h.s.Block(c.Member(), n.Member(), sim.BlockMulticast))
				}
			})
			h.runUntil(func() bool { return h.s.Now() > heal && settled(all...) }, heal+2*time.Second, "merged")
			require.Equal(t, a.self(), c.g.View().Coord().Member, "the smaller coordinator id leads")
			h.noErrors()
		})
	}
}
