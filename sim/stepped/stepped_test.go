package stepped_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine"
	"github.com/nakcast/nakcast/sim"
	"github.com/nakcast/nakcast/sim/stepped"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// crashAndJoin is one run of TestCrashAndJoin: its cluster and what the
// test checks.
type crashAndJoin struct {
	c         *stepped.Cluster
	survivors []*stepped.Node
	crashed   *stepped.Node
}

// runCrashAndJoin: members 1-4 form a group over a lossy network (loss,
// duplication, reordering and jitter drawn from the seed); 1, 2 and 3
// send; 3 crashes while sending and 5 joins while the others send; the
// network then heals and the run goes on until 1, 2, 4 and 5 are settled
// in one view and have delivered everything the live senders sent.
func runCrashAndJoin(t *testing.T, seed uint64) crashAndJoin {
	r := rand.New(rand.NewPCG(seed, 3))
	// Between silentFrom and silentTo, shortly before it crashes, member
	// 3's data reaches nobody, and from silentFrom on no retransmission
	// request reaches it: the survivors hold its later messages, none holds
	// the ones in between, and the crash's cut declares those lost.
	var s *sim.Sim
	silentFrom, silentTo := sim.Never, sim.Never
	c := stepped.New(stepped.Config{Seed: seed, Drop: func(from, to uint64, b []byte) bool {
		if len(b) < 3 || s.Now() < silentFrom {
			return false
		}
		switch t := wire.Type(b[2]); {
		case to == 3:
			return t == wire.TypeXmitReq
		case from == 3:
			return s.Now() < silentTo && (t == wire.TypeData || t == wire.TypeFrag)
		}
		return false
	}, Net: lossy(r, 0.05), Engine: fastFailureDetection})
	s = c.Sim()
	ns := addNodes(t, c, 5)
	t0 := formAndSend(t, c, r, ns[:4])
	crashAt := t0 + 500*time.Millisecond + time.Duration(r.IntN(300))*time.Millisecond
	silentFrom = crashAt - time.Duration(20+r.IntN(40))*time.Millisecond
	silentTo = crashAt - time.Duration(5+r.IntN(10))*time.Millisecond
	s.Schedule(crashAt, func(time.Duration) { c.Crash(ns[2]) })
	require.NoError(t, c.Join(t0+700*time.Millisecond+time.Duration(r.IntN(300))*time.Millisecond, ns[4]))
	survivors := []*stepped.Node{ns[0], ns[1], ns[3], ns[4]}
	healAndSettle(t, c, t0+1600*time.Millisecond, survivors, func() bool { return true })
	return crashAndJoin{c: c, survivors: survivors, crashed: ns[2]}
}

// TestCrashAndJoin runs whole engine members (gms, nakack and the agent's
// duty cycle, engine.OpenStepped) in the simulator: with loss, a crash
// and a join, the survivors agree on every sender's stream (the same
// prefix of the crashed sender's messages, delivered or lost alike),
// deliver everything the live senders sent, report lost ranges as
// EventLost events too, and a seed replays event for event.
func TestCrashAndJoin(t *testing.T) {
	ran, lostIn := 0, 0 // seeds run; seeds whose survivors were told of lost messages
	for seed := range uint64(crashJoinSeeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			ran++
			a := runCrashAndJoin(t, seed)
			require.NoError(t, stepped.Check(a.survivors), "seed %d", seed)
			crashed := a.crashed.Engine().Self()
			for _, n := range a.survivors[:2] {
				require.NotNil(t, n.App().Stream(crashed), "seed %d: member %d has nothing of %v", seed, n.ID(), crashed)
			}
			for _, e := range a.survivors[0].App().Stream(crashed).Entries {
				if e.Lost {
					lostIn++
					break
				}
			}
			b := runCrashAndJoin(t, seed)
			require.Equal(t, a.c.Sim().Steps(), b.c.Sim().Steps(), "seed %d replays", seed)
			require.Equal(t, a.c.Trace(), b.c.Trace(), "seed %d replays", seed)
		})
	}
	if ran >= 3 && !t.Failed() {
		require.Positive(t, lostIn, "no seed lost any of the crashed member's messages: the lost-range checks checked nothing")
	}
}

// TestStaticGroup: four members of a fixed view (static membership, gms.Fixed
// in the engine) over a lossy network, three of them sending: every member
// delivers everything, nothing is lost, and the seed replays.
func TestStaticGroup(t *testing.T) {
	replays(t, staticSeeds, runStatic)
}

func runStatic(t *testing.T, seed uint64) *stepped.Cluster {
	r := rand.New(rand.NewPCG(seed, 4))
	var fv fixedView
	c := stepped.New(stepped.Config{Seed: seed, Net: lossy(r, 0.1), Engine: fv.config})
	s := c.Sim()
	ns := fv.open(t, c, 4)
	for _, n := range ns[:3] {
		require.NoError(t, c.Traffic(n, time.Millisecond, time.Second, time.Duration(1+r.IntN(3))*time.Millisecond))
	}
	require.NoError(t, s.RunUntil(time.Second+time.Millisecond), "seed %d", seed)
	done, err := s.RunWhile(func() bool {
		return !stepped.Settled(ns...) || stepped.Check(ns) != nil
	}, 10*time.Millisecond, s.Now()+20*time.Second)
	require.NoError(t, err, "seed %d", seed)
	require.True(t, done, "seed %d: not settled: %v", seed, stepped.Check(ns))
	for _, n := range ns[:3] {
		require.Positive(t, n.Sent(n.Engine().Self()), "seed %d: member %d sent nothing", seed, n.ID())
	}
	return c
}

// TestLeave: members 1-4 form a group over a lossy network and 1-3 send;
// 2 closes gracefully while sending (engine.Member.StepClose): it drains
// what it sent and leaves. The others settle in one view, every one of
// them delivered every message 2 sent before it closed, none lost, 2 got
// its EventLeft, and the seed replays.
func TestLeave(t *testing.T) {
	replays(t, leaveSeeds, runLeave)
}

func runLeave(t *testing.T, seed uint64) *stepped.Cluster {
	r := rand.New(rand.NewPCG(seed, 5))
	c := stepped.New(stepped.Config{Seed: seed, Net: lossy(r, 0.05), Engine: fastFailureDetection})
	ns := addNodes(t, c, 4)
	t0 := formAndSend(t, c, r, ns)
	leaver := ns[1]
	self := leaver.Engine().Self()
	require.NoError(t, c.Leave(t0+400*time.Millisecond+time.Duration(r.IntN(300))*time.Millisecond, leaver))
	survivors := []*stepped.Node{ns[0], ns[2], ns[3]}
	healAndSettle(t, c, t0+1600*time.Millisecond, survivors, leaver.Engine().StepClosed)
	sent := leaver.Sent(self)
	require.Positive(t, sent, "seed %d", seed)
	for _, n := range survivors {
		st := n.App().Stream(self)
		require.NotNil(t, st, "seed %d: member %d", seed, n.ID())
		require.Equal(t, sent+1, st.Next, "seed %d: member %d has the leaver's messages up to %d", seed, n.ID(), st.Next-1)
		for _, e := range st.Entries {
			require.False(t, e.Lost, "seed %d: member %d lost %+v of a graceful leaver", seed, n.ID(), e)
		}
	}
	var left bool
	for _, e := range leaver.Events {
		left = left || e.Kind == engine.EventLeft
	}
	require.True(t, left, "seed %d: no EventLeft", seed)
	return c
}

// TestCloseTogether: members 1-5 form a group over a lossy network and
// 1-3 send; once the traffic ends, all five close within 20 ms of each
// other, as the members of a run that ends do (mcastbench). From the
// first close on, no STABILITY reaches one member V (drawn from the seed,
// never the first in view order): it cannot see what it holds become
// stable, so it drains last, after the others, the coordinator and those
// next in line among them, have left. A member whose predecessors in the
// view all announced their leave takes over and handles them: V ends in a
// view of its own, which drains it. Every member gets its EventLeft
// within LeaveTimeout + 1 s of the last close, well under failure
// detection's 5 s (V must not wait for failure detection to drop the
// leavers), and the seed replays. At most one member of the five waits
// out LeaveTimeout: a leaver whose every other member leaves too ends its
// leave at once (gms leaveWithTheRest); only a LEAVE or LeaveRsp lost at
// the very end still costs a leaver LeaveTimeout.
func TestCloseTogether(t *testing.T) {
	replays(t, closeTogetherSeeds, runCloseTogether)
}

func runCloseTogether(t *testing.T, seed uint64) *stepped.Cluster {
	r := rand.New(rand.NewPCG(seed, 7))
	var s *sim.Sim
	muteFrom, mute := sim.Never, uint64(0)
	c := stepped.New(stepped.Config{Seed: seed, Net: lossy(r, 0.05), Drop: func(from, to uint64, b []byte) bool {
		return to == mute && from != to && s.Now() >= muteFrom && len(b) > 2 && wire.Type(b[2]) == wire.TypeStability
	}})
	s = c.Sim()
	ns := addNodes(t, c, 5)
	t0 := formAndSend(t, c, r, ns)
	_, view := ns[0].Engine().View()
	mute = view[1+r.IntN(len(view)-1)].ID
	closeAt := t0 + 1500*time.Millisecond // as the last messages go out
	muteFrom = closeAt - 50*time.Millisecond
	last := closeAt
	for _, n := range ns {
		at := closeAt + time.Duration(r.IntN(20))*time.Millisecond
		last = max(last, at)
		require.NoError(t, c.Leave(at, n))
	}
	closedAt := map[uint64]time.Duration{}
	s.AddCheck(func(now time.Duration) error {
		for _, n := range ns {
			if _, ok := closedAt[n.ID()]; !ok && n.Engine().StepClosed() {
				closedAt[n.ID()] = now - last
			}
		}
		return nil
	})
	bound := last + engine.DefaultLeaveTimeout + time.Second
	done, err := s.RunWhile(func() bool { return !allClosed(ns) }, 10*time.Millisecond, bound)
	require.NoError(t, err, "seed %d", seed)
	require.True(t, done, "seed %d: not every member closed by %v (member %d muted; view %v; closed after the last close: %v)",
		seed, bound, mute, view, closedAt)
	var timedOut []uint64
	for _, n := range ns {
		var left bool
		for _, e := range n.Events {
			left = left || e.Kind == engine.EventLeft
		}
		require.True(t, left, "seed %d: member %d: no EventLeft", seed, n.ID())
		if n.Engine().Stats().Membership.LeaveTimeouts > 0 {
			timedOut = append(timedOut, n.ID())
		}
	}
	require.LessOrEqual(t, len(timedOut), 1, "seed %d: members %v waited out LeaveTimeout (closed after the last close: %v)", seed, timedOut, closedAt)
	return c
}

// TestStaticCloseLostTail: a fixed view of three over a clean network;
// member 1 (the coordinator) streams, and member 3 loses the stream's
// last messages and member 1's HIGHEST announcements for the first
// 60-100 ms after the stream ends. All three close as the stream ends.
// Member 3 thinks itself drained (it has delivered all it heard of), but
// the stability rounds are not settled (wire.FlagSettled: member 1 has
// more than member 3 delivered), so it stays until a HIGHEST tells it of
// the tail and the tail is repaired: every member closes, member 3
// delivered all member 1 sent, and the seed replays. A member 3 that left
// after two rounds regardless would leave members 1 and 2 never drained.
func TestStaticCloseLostTail(t *testing.T) {
	replays(t, closeTogetherSeeds, runStaticCloseLostTail)
}

func runStaticCloseLostTail(t *testing.T, seed uint64) *stepped.Cluster {
	r := rand.New(rand.NewPCG(seed, 8))
	var s *sim.Sim
	var fv fixedView
	stop := time.Second
	tailFrom := stop - time.Duration(5+r.IntN(10))*time.Millisecond
	deafTo := stop + time.Duration(60+r.IntN(40))*time.Millisecond
	c := stepped.New(stepped.Config{Seed: seed, Net: sim.NetConfig{Latency: 200 * time.Microsecond},
		Drop: func(from, to uint64, b []byte) bool {
			if from != 1 || to != 3 || len(b) < 4 || s.Now() < tailFrom || s.Now() >= deafTo {
				return false
			}
			switch wire.Type(b[2]) {
			case wire.TypeData, wire.TypeFrag:
				return b[3]&wire.FlagRepair == 0 // the originals; repairs pass
			case wire.TypeHighest:
				return true
			}
			return false
		},
		Engine: fv.config})
	s = c.Sim()
	ns := fv.open(t, c, 3)
	require.NoError(t, c.Traffic(ns[0], time.Millisecond, stop, time.Millisecond))
	for _, n := range ns {
		require.NoError(t, c.Leave(stop+time.Duration(r.IntN(5))*time.Millisecond, n))
	}
	require.NoError(t, s.RunUntil(stop), "seed %d", seed)
	bound := stop + 2*time.Second
	done, err := s.RunWhile(func() bool { return !allClosed(ns) }, 10*time.Millisecond, bound)
	require.NoError(t, err, "seed %d", seed)
	require.True(t, done, "seed %d: not every member closed by %v", seed, bound)
	self := ns[0].Engine().Self()
	sent := ns[0].Sent(self)
	require.Positive(t, sent, "seed %d", seed)
	for _, n := range ns[1:] {
		st := n.App().Stream(self)
		require.NotNil(t, st, "seed %d: member %d", seed, n.ID())
		require.Equal(t, sent+1, st.Next, "seed %d: member %d has member 1's messages up to %d of %d", seed, n.ID(), st.Next-1, sent)
	}
	return c
}

// fixedView is a fixed view of the nodes open opens, each at its address
// on the cluster: config is the cluster's Config.Engine.
type fixedView struct {
	c       *stepped.Cluster
	members []digest.Member
}

func (v *fixedView) config(cfg *engine.Config) {
	cfg.Membership.Members = v.members
	for _, m := range v.members {
		cfg.Membership.MemberAddrs = append(cfg.Membership.MemberAddrs, v.c.Addr(m.ID))
	}
}

// open adds nodes 1..n to c and opens them at time 0 as the view's
// members.
func (v *fixedView) open(t *testing.T, c *stepped.Cluster, n uint64) []*stepped.Node {
	v.c = c
	ns := addNodes(t, c, n)
	for _, nd := range ns {
		v.members = append(v.members, digest.Member{ID: nd.ID(), Inc: 1})
	}
	for _, nd := range ns {
		require.NoError(t, c.Join(0, nd))
	}
	return ns
}

// allClosed reports whether every node's member has finished closing.
func allClosed(ns []*stepped.Node) bool {
	for _, n := range ns {
		if !n.Engine().StepClosed() {
			return false
		}
	}
	return true
}

// lossy is a network with loss up to maxLoss, duplication up to 2% and
// reordering up to 5%, drawn from r, and jitter.
func lossy(r *rand.Rand, maxLoss float64) sim.NetConfig {
	return sim.NetConfig{
		Latency: 200 * time.Microsecond, Jitter: 300 * time.Microsecond,
		Loss: r.Float64() * maxLoss, Duplicate: r.Float64() * 0.02, Reorder: r.Float64() * 0.05,
	}
}

// fastFailureDetection makes a crash show within about 0.6 s.
func fastFailureDetection(c *engine.Config) {
	c.Membership.HeartbeatInterval = 100 * time.Millisecond
	c.Membership.SuspectTimeout = 500 * time.Millisecond
}

// addNodes adds nodes 1..n to c.
func addNodes(t *testing.T, c *stepped.Cluster, n uint64) []*stepped.Node {
	var ns []*stepped.Node
	for id := uint64(1); id <= n; id++ {
		nd, err := c.Add(id)
		require.NoError(t, err)
		ns = append(ns, nd)
	}
	return ns
}

// formAndSend makes ns[0] found the group and the others join 350-450 ms
// later, runs until they are settled, then makes the first three send
// every 1-3 ms for 1.5 s from now, which it returns.
func formAndSend(t *testing.T, c *stepped.Cluster, r *rand.Rand, ns []*stepped.Node) time.Duration {
	s := c.Sim()
	require.NoError(t, c.Join(0, ns[0]))
	for _, n := range ns[1:] {
		require.NoError(t, c.Join(350*time.Millisecond+time.Duration(r.IntN(100))*time.Millisecond, n))
	}
	done, err := s.RunWhile(func() bool { return !stepped.Settled(ns...) }, 10*time.Millisecond, 10*time.Second)
	require.NoError(t, err)
	require.True(t, done, "seed %d: the group did not form", s.Seed())
	t0 := s.Now()
	for _, n := range ns[:3] {
		require.NoError(t, c.Traffic(n, t0, t0+1500*time.Millisecond, time.Duration(1+r.IntN(3))*time.Millisecond))
	}
	return t0
}

// healAndSettle runs c until heal, then on a loss-free network until the
// survivors are settled in one view, Check passes and done holds (20 s
// at most).
func healAndSettle(t *testing.T, c *stepped.Cluster, heal time.Duration, survivors []*stepped.Node, done func() bool) {
	s := c.Sim()
	require.NoError(t, s.RunUntil(heal), "seed %d", s.Seed())
	s.SetNet(sim.NetConfig{Latency: 200 * time.Microsecond})
	ok, err := s.RunWhile(func() bool {
		return !stepped.Settled(survivors...) || stepped.Check(survivors) != nil || !done()
	}, 10*time.Millisecond, s.Now()+20*time.Second)
	require.NoError(t, err, "seed %d", s.Seed())
	require.True(t, ok, "seed %d: not settled (done: %v): %v", s.Seed(), done(), stepped.Check(survivors))
}

// replays runs each of seeds seeds twice: the same number of simulator
// steps and the same trace.
func replays(t *testing.T, seeds int, run func(*testing.T, uint64) *stepped.Cluster) {
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			a := run(t, seed)
			b := run(t, seed)
			require.Equal(t, a.Sim().Steps(), b.Sim().Steps(), "seed %d replays", seed)
			require.Equal(t, a.Trace(), b.Trace(), "seed %d replays", seed)
		})
	}
}
