package sim_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/gms"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/sim"
	"github.com/nakcast/nakcast/sim/members"
	"github.com/stretchr/testify/require"
)

// Slow receivers (gms Config.LagLimit, LagTimeout, LagExclude): whole
// members on the simulator, a member whose application stops consuming
// (members.Node.Stalled) while two others send.

const (
	lagLimit   = 100                    // seqnos (gms Config.LagLimit)
	lagTimeout = time.Second            // gms Config.LagTimeout
	lagWindow  = 256                    // the senders' SendWindow (RecvWindow twice that)
	lagMsgSize = 100                    // bytes of every message
	lagHB      = 100 * time.Millisecond // gms's default HeartbeatInterval
)

// lagReport is one gms LagListener call.
type lagReport struct {
	at     time.Duration
	member digest.Member
	lag    uint64
}

// lagListener adds LagListener to a node's gms Listener and records the
// reports.
type lagListener struct {
	gms.Listener
	c   **members.Cluster
	got *[]lagReport
}

func (l lagListener) Lagging(m digest.Member, lag uint64) {
	*l.got = append(*l.got, lagReport{at: (*l.c).Sim.Now(), member: m, lag: lag})
}

// lagGroup is four members (1 coordinates) on a lossy network, 1 and 2
// sending 100-byte messages about one per millisecond each until stop,
// and the lag reports each node's gms made (by node id).
type lagGroup struct {
	c       *members.Cluster
	ns      []*members.Node
	reports map[uint64]*[]lagReport
	stop    time.Duration // the end of the traffic
}

func newLagGroup(t *testing.T, seed uint64, exclude bool, stop time.Duration) *lagGroup {
	lg := &lagGroup{reports: map[uint64]*[]lagReport{}}
	lg.c = members.New(members.Config{
		Seed: seed,
		Net:  sim.NetConfig{Loss: 0.01, Jitter: time.Millisecond},
		GMS: func(id uint64, cfg *gms.Config) {
			cfg.LagLimit, cfg.LagTimeout, cfg.LagExclude = lagLimit, lagTimeout, exclude
			lg.reports[id] = &[]lagReport{}
			cfg.Listener = lagListener{Listener: cfg.Listener, c: &lg.c, got: lg.reports[id]}
		},
		Nakack: func(_ uint64, cfg *nakack.Config) { cfg.SendWindow, cfg.RecvWindow = lagWindow, 2*lagWindow },
	})
	for id := uint64(1); id <= 4; id++ {
		n, err := lg.c.Add(id)
		require.NoError(t, err)
		lg.ns = append(lg.ns, n)
	}
	require.NoError(t, lg.c.Form(5*time.Second, lg.ns...))
	for _, n := range lg.ns[:2] {
		lg.c.StartTraffic(n, members.Traffic{Count: 1 << 30, MinSize: lagMsgSize, MaxSize: lagMsgSize,
			Interval: time.Millisecond, Start: lg.c.Sim.Now(), Stop: stop})
	}
	lg.stop = stop
	return lg
}

// reported returns node id's first report naming m, if any.
func (lg *lagGroup) reported(id uint64, m digest.Member) (lagReport, bool) {
	for _, r := range *lg.reports[id] {
		if r.member == m {
			return r, true
		}
	}
	return lagReport{}, false
}

// reportedEverywhere: every node in ns reported m.
func (lg *lagGroup) reportedEverywhere(m digest.Member, ns ...*members.Node) bool {
	for _, n := range ns {
		if _, ok := lg.reported(n.ID, m); !ok {
			return false
		}
	}
	return true
}

// retained is the most seqnos any node in ns retains of one sender
// (Received - Low of each window, the senders' own included): what
// stability has not let it free.
func retained(ns ...*members.Node) uint64 {
	var most uint64
	for _, n := range ns {
		inc := n.Cur()
		if inc == nil {
			continue
		}
		for _, e := range inc.P.Digest().Entries() {
			most = max(most, e.Received-min(e.Low, e.Received))
		}
	}
	return most
}

// checkReports requires that every node in ns reported laggard once, with
// a lag above the limit, no earlier than stalled+lagTimeout and within
// bound of stalled, and nothing else.
func (lg *lagGroup) checkReports(t *testing.T, laggard digest.Member, stalled, bound time.Duration, ns ...*members.Node) {
	for _, n := range ns {
		got := *lg.reports[n.ID]
		require.Len(t, got, 1, "node %d: %v", n.ID, got)
		r := got[0]
		require.Equal(t, laggard, r.member, "node %d", n.ID)
		require.Greater(t, r.lag, uint64(lagLimit), "node %d", n.ID)
		require.GreaterOrEqual(t, r.at-stalled, lagTimeout, "node %d reported it before the timeout", n.ID)
		require.LessOrEqual(t, r.at-stalled, bound, "node %d reported it late", n.ID)
	}
}

// TestLaggardWait: member 4's application stops consuming while 1 and 2
// send. Every member, 4 included, reports it lagging (once, naming it and
// a lag above the limit) after the timeout and within a bound; the group
// keeps waiting (no view change) and what every member retains of a
// sender stays within the senders' window however long the stall lasts;
// once 4 consumes again, everybody delivers everything.
func TestLaggardWait(t *testing.T) {
	for seed := range uint64(sim.LaggardSeeds()) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			lg := newLagGroup(t, seed, false, 6*time.Second)
			c, ns := lg.c, lg.ns
			views := ns[0].Views
			stalled := c.Sim.Now() + 200*time.Millisecond
			c.Do(stalled, ns[3], func(time.Duration) { ns[3].Stalled = true })
			laggard := ns[3].Self()
			bound := lagTimeout + time.Second // lag above the limit (~50ms), a report and a check (lagHB) later
			var most uint64
			require.NoError(t, c.RunUntil(func() bool {
				most = max(most, retained(ns...))
				return lg.reportedEverywhere(laggard, ns...)
			}, stalled+bound, "lagging reported everywhere"))
			lg.checkReports(t, laggard, stalled, bound, ns...)
			require.NoError(t, c.RunUntil(func() bool {
				most = max(most, retained(ns...))
				return c.Sim.Now() >= stalled+4*time.Second
			}, stalled+5*time.Second, "a stall of 4s"))
			require.LessOrEqual(t, most, uint64(lagWindow), "retained seqnos of one sender while the group waits")
			require.Greater(t, most, uint64(lagWindow/2), "the senders should have waited for member 4 (flow control)")
			require.Equal(t, len(views), len(ns[0].Views), "the group keeps waiting: no view change")
			t.Logf("seed %d: reported after %v; at most %d seqnos (%d bytes of payload) retained of one sender",
				seed, lagAfter(lg, ns[0].ID, laggard, stalled), most, most*lagMsgSize)
			c.Do(c.Sim.Now(), ns[3], func(time.Duration) { ns[3].Stalled = false })
			require.NoError(t, c.RunUntil(func() bool { return c.Sim.Now() >= lg.stop && c.Settled() }, lg.stop+20*time.Second, "settled"))
			require.NoError(t, c.Check())
			require.NoError(t, c.CheckIdle())
		})
	}
}

func lagAfter(lg *lagGroup, id uint64, m digest.Member, since time.Duration) time.Duration {
	r, _ := lg.reported(id, m)
	return r.at - since
}

// TestLaggardExclude: as TestLaggardWait with LagExclude: every member
// reports 4 lagging, the coordinator suspects and excludes it, and what
// the others retain for it is freed while 1 and 2 keep sending; 4 (its
// application consuming again) rejoins as a new incarnation and fetches
// the state, and the group settles with the state transfer's checks.
func TestLaggardExclude(t *testing.T) {
	for seed := range uint64(sim.LaggardSeeds()) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			lg := newLagGroup(t, seed, true, 8*time.Second)
			c, ns := lg.c, lg.ns
			ns[3].Rejoin = true
			stalled := c.Sim.Now() + 200*time.Millisecond
			c.Do(stalled, ns[3], func(time.Duration) { ns[3].Stalled = true })
			laggard := ns[3].Self()
			bound := lagTimeout + time.Second
			var before uint64
			require.NoError(t, c.RunUntil(func() bool {
				before = max(before, retained(ns[:3]...))
				return !ns[0].GMS.View().Contains(laggard)
			}, stalled+bound, "laggard excluded"))
			excluded := c.Sim.Now()
			require.True(t, lg.reportedEverywhere(laggard, ns[:3]...), "every survivor reports the laggard before its exclusion")
			lg.checkReports(t, laggard, stalled, bound, ns[:3]...)
			require.Contains(t, ns[0].Suspicions, laggard, "the coordinator suspects the laggard")
			require.Equal(t, uint64(1), ns[0].GMS.Stats().LaggardsExcluded)
			require.LessOrEqual(t, before, uint64(lagWindow))

			// The survivors free what they held for 4 and go on sending.
			require.NoError(t, c.RunUntil(func() bool { return retained(ns[:3]...) < lagWindow/4 },
				excluded+time.Second, "retention freed after the exclusion"))
			t.Logf("seed %d: excluded %v after the stall; retained %d seqnos before, %d %v after the exclusion",
				seed, excluded-stalled, before, retained(ns[:3]...), c.Sim.Now()-excluded)

			// 4 consumes again, rejoins as a new incarnation and fetches the state.
			c.Do(c.Sim.Now(), ns[3], func(time.Duration) { ns[3].Stalled = false })
			require.NoError(t, c.RunUntil(func() bool { return members.Converged(ns...) && members.Quiet(ns...) },
				c.Sim.Now()+10*time.Second, "laggard rejoined"))
			require.NotEqual(t, laggard, ns[3].Self(), "a new incarnation")
			require.ErrorIs(t, ns[3].Lefts[0], gms.ErrExcluded)
			c.Do(c.Sim.Now(), ns[3], func(now time.Duration) { require.NoError(t, ns[3].GMS.RequestState(now)) })
			require.NoError(t, c.RunUntil(func() bool { return len(ns[3].States) > 0 }, c.Sim.Now()+5*time.Second, "state"))
			require.NoError(t, ns[3].States[0])
			require.NoError(t, c.RunUntil(func() bool { return c.Sim.Now() >= lg.stop && c.Settled() }, lg.stop+20*time.Second, "settled"))
			require.NoError(t, c.Check())
			require.NoError(t, c.CheckIdle())
		})
	}
}
