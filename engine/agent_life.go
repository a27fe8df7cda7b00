package engine

import (
	"net/netip"
	"time"

	"github.com/nakcast/nakcast/gms"
	"github.com/nakcast/nakcast/nakack"
)

// lifeState is the membership, housekeeping and lifecycle part's state
// (see agent).
type lifeState struct {
	viewSize    int
	inTick      bool                      // inside gms Tick (see Member.newProtocol)
	rejoin      bool                      // excluded: join again after this entry point
	refetch     bool                      // excluded with FetchState: fetch the state once rejoined
	left        bool                      // gms reported Left
	leaveSent   bool                      // Close's graceful leave started
	quiet       quiesce                   // a fixed view's wait before it leaves
	gaddrs      map[string]netip.AddrPort // parsed gms peer addresses
	closeSeen   bool                      // a cycle has observed Close
	lagCheckAt  time.Duration             // next housekeeping (routes, address probes)
	lastTraffic time.Duration             // last cycle that received, sent or delivered
	lagging     bool                      // an EventLagging episode is open
}

// tickMembership runs the membership timers when due and acts on what they
// asked of the engine (afterGMS).
func (a *agent) tickMembership(now time.Duration) {
	g := a.m.g
	if g.NextDeadline() <= now {
		a.inTick = true
		g.Tick(now)
		a.inTick = false
	}
	a.afterGMS(now)
}

// outOfView ends a cycle of a member not in a view (joining, or excluded
// and rejoining): messages wait in the ring; only membership runs.
func (a *agent) outOfView() (deadline time.Duration, finished bool) {
	m := a.m
	a.queueGMS(&a.rw)
	if m.closing.Load() {
		finished = a.left || m.g.Status() == gms.StatusIdle
	}
	return m.g.NextDeadline(), finished
}

// upkeep does the housekeeping when due, follows the lag, and returns the
// cycle's next deadline: the protocol's, the housekeeping's and
// membership's timers, at most idleTick apart when the group is idle, and
// the open bundle's BundleDelay.
func (a *agent) upkeep(now time.Duration, p *nakack.Protocol, work int) time.Duration {
	m := a.m
	if now >= a.lagCheckAt {
		a.housekeep(now)
	}
	a.noteLag(p)
	deadline := min(p.NextDeadline(), a.lagCheckAt, m.g.NextDeadline())
	if work > 0 {
		a.lastTraffic = now
	} else if now-a.lastTraffic > idleAfter {
		// Idle group: wake at most every idleTick. Only periodic timers
		// run now (the coordinator's 1ms STABLE fold, STABLE, HIGHEST);
		// NAK timers need traffic, which ends the idle state.
		deadline = max(deadline, now+min(m.cfg.StableInterval, idleTick))
	}
	if a.unflushed && m.cfg.BundleDelay > 0 {
		deadline = min(deadline, a.bundleAt+m.cfg.BundleDelay)
	}
	return deadline
}

// drainClose is a closing member's cycle end: once nothing waits to be
// sent and everything is stable (nakack Drained), leave (gms: the others
// stop counting on us at once; a fixed view lingers a few stability
// rounds, so that a member that missed the last STABILITY or a repair
// gets another); finished on Left.
func (a *agent) drainClose(now time.Duration, p *nakack.Protocol, deadline time.Duration) (time.Duration, bool) {
	m := a.m
	if m.q.pending() || a.unflushed {
		return deadline, false
	}
	drained := !a.leaveSent && p.Drained()
	if !drained && !a.leaveSent {
		a.quiet = quiesce{}
		m.drained.Store(false) // data came in while we waited
	}
	switch {
	case a.leaveSent:
		return deadline, a.left
	case drained && !m.dynamic() && !a.quiet.held(p, now):
		m.drained.Store(true) // all we sent is stable; we still listen
		return min(deadline, a.quiet.since+quiesceCap), false
	case drained:
		m.drained.Store(true)
		a.leaveSent = true
		finished := m.g.Leave(now) != nil || a.left
		a.queueGMS(&a.rw)
		return min(deadline, m.g.NextDeadline()), finished
	}
	return deadline, false
}

// afterGMS acts on what a gms entry point asked of the engine: a rejoin
// after an exclusion, and the state transfer after it (refetchState).
func (a *agent) afterGMS(now time.Duration) {
	a.refetchState(now)
	if a.rejoin {
		a.rejoin = false
		if err := a.m.g.Join(now); err != nil {
			a.m.log.l.Error("rejoin", "err", err)
		}
	}
}

// idleAfter is how long without traffic makes the agent idle, and
// idleTick how often an idle agent wakes for periodic protocol timers.
const (
	idleAfter = 50 * time.Millisecond
	idleTick  = 10 * time.Millisecond
)

// lagCheckInterval is how often the protocol measures the delivery
// backlog (nakack Config.LagInterval) and the agent does its housekeeping
// (housekeep).
const lagCheckInterval = 100 * time.Millisecond

// housekeep forgets departed members' routes (dynamic membership) or asks
// unbound static members for their address.
func (a *agent) housekeep(now time.Duration) {
	a.lagCheckAt = now + lagCheckInterval
	if a.m.dynamic() {
		a.pruneRoutes()
	} else {
		a.probeGroup()
	}
}

// noteLag follows the protocol's lag measurement (nakack Backlog,
// Lagging): the backlog for Stats, and an EventLagging when an episode
// opens: the application is not consuming, and stability, so every
// sender, will soon wait for it.
func (a *agent) noteLag(p *nakack.Protocol) {
	m := a.m
	m.ctr.backlog.Store(p.Backlog())
	lagging := p.Lagging()
	if lagging && !a.lagging {
		m.ctr.laggingEpisodes.Add(1)
		m.events.push(Event{Kind: EventLagging, Sender: p.Self(), From: p.Backlog()})
	}
	a.lagging = lagging
}

// closeLingerRounds is how many stability intervals a drained member keeps
// participating before Close returns.
const closeLingerRounds = 3

// A drained member of a fixed view starts its departure only once its
// drain has held through quiesceRounds settled STABILITY rounds of the
// coordinator's (made or received; nakack Stats.StabilitySettled: no
// member lacked a message another member held). A peer that sent its last
// messages just before it closed (its agent descheduled on a busy
// machine) has sent them by its next round, and a member that lost a
// stream's tail, and so thinks itself drained, sees unsettled rounds until
// the sender's HIGHEST has it repair the tail: either way this member has
// what the others have before it goes, instead of leaving their Close
// waiting for a report that never comes. A group whose coordinator is gone
// makes no round: quiesceCap bounds the wait.
const (
	quiesceRounds = 2
	quiesceCap    = time.Second
)

// quiesce is a drained fixed-view member's wait (see quiesceRounds).
type quiesce struct {
	set    bool
	rounds uint64        // settled STABILITY rounds when the drain began
	since  time.Duration // when it began
}

// held reports whether the drain has held through quiesceRounds rounds,
// or for quiesceCap.
func (q *quiesce) held(p *nakack.Protocol, now time.Duration) bool {
	rounds := p.Stats().StabilitySettled
	if !q.set {
		*q = quiesce{set: true, rounds: rounds, since: now}
	}
	return rounds >= q.rounds+quiesceRounds || now-q.since >= quiesceCap
}
