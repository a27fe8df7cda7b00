package engine

import (
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/nakcast/nakcast/nakack"
)

// runState is who runs the duty cycle (see agent).
type runState struct {
	started atomic.Bool // the goroutine was started

	// ThreadingInvoked: owner is 1 while a goroutine runs the agent (an
	// application's DoWork, Open's or Close's goroutine), 0 when it is
	// free; handoff asks Open's goroutine to stop and free it, handedOff
	// is closed once it did.
	owner atomic.Int32
	// appWorks counts the application's DoWork calls that ran the agent
	// (written by the owner only): a blocking call that sees it move
	// leaves the agent to that loop (driveOnce).
	appWorks  atomic.Uint64
	handoff   atomic.Bool
	handedOff chan struct{}
	lastNow   time.Duration // the last cycle's clock (sendDirect's)
	deadline  time.Duration // the last cycle's next timer (WaitWork's)

	// peered: the agent is in peers (ThreadingShared), and its writes wake
	// the blocked agents of the other members of peerGroup in this process.
	peered    bool
	peerGroup netip.AddrPort

	// ThreadingDedicated
	dedicated bool
	sendWake  chan struct{} // producers, room made, Close: wake the sender
	quit      chan struct{} // closed when the receiver goroutine exits
	sendDone  chan struct{} // closed when the sender goroutine exits
}

func (a *agent) run() {
	m := a.m
	defer close(m.done)
	defer a.cleanup()
	if a.peered {
		defer peers.remove(m.q)
	}
	if a.dedicated {
		go a.runSender()
		defer func() {
			close(a.quit)
			<-a.sendDone
		}()
	}
	a.loop()
}

// joinPeers puts the agent in peers before run starts it
// (ThreadingShared: a dedicated agent's receiver goroutine blocks without
// the parked flag a wake needs, producers wake its sender goroutine).
func (a *agent) joinPeers() {
	if a.dedicated {
		return
	}
	a.peerGroup, a.peered = a.m.tr.Group(), true
	peers.add(a.peerGroup, a.m.q)
}

// runUntilHandoff is Open's agent goroutine with ThreadingInvoked: the
// shared loop until Open hands the agent to the application (handoff),
// or until the member stops (a failed Open), which ends it as run does.
func (a *agent) runUntilHandoff() {
	if a.loop() {
		a.owner.Store(0)
		close(a.handedOff)
		return
	}
	a.cleanup()
	close(a.m.done)
}

// loop is the runner of ThreadingShared (and of ThreadingDedicated's
// receiver goroutine, and of Open's and Close's goroutines with
// ThreadingInvoked): duty cycles, idling by the configured strategy when
// one did nothing, until the member stops or finishes (false) or, with
// ThreadingInvoked, Open hands the agent over to the application (true).
func (a *agent) loop() (handedOff bool) {
	var s idler
	for {
		select {
		case <-a.m.stop:
			return false
		default:
		}
		if a.handoff.Load() {
			return true
		}
		work, deadline, finished := a.doWork()
		if finished {
			return false
		}
		a.idle(&s, work, deadline)
	}
}

// idler is loop's idle strategy state.
type idler struct {
	spins  int
	workAt time.Duration // first idle cycle since the last work
}

// idle follows a cycle that did work (work > 0) or none, by the
// configured IdleStrategy.
func (a *agent) idle(s *idler, work int, deadline time.Duration) {
	if work > 0 {
		s.spins, s.workAt = 0, 0
		return
	}
	switch a.m.cfg.Idle {
	case IdleSpin:
		// Spin, but let the other goroutines of a busy process (the
		// application's, another member's agent) run now and then: Go
		// preempts a spinning goroutine only after 10ms. An idle cycle
		// costs a microsecond or more (its reads are system calls), so
		// every spinPeriod-th is already often, and a longer period leaves
		// two members of one process in a ping-pong each holding a P for
		// long stretches before yielding.
		if s.spins++; s.spins%spinPeriod == 0 {
			runtime.Gosched()
		}
		return
	case IdleYield:
		runtime.Gosched()
		return
	}
	// IdleBlock: a short burst of yields catches the next message of a busy
	// publisher (or the next datagram of a busy sender) without a kernel
	// round trip, then block: at least 8 yields, and yields for up to
	// idleSpinWindow after the last work.
	now := a.m.now()
	if s.workAt == 0 {
		s.workAt = now
	}
	if s.spins < 8 || now-s.workAt < idleSpinWindow {
		s.spins++
		runtime.Gosched()
		return
	}
	a.block(deadline)
}

// spinPeriod is how many idle iterations an IdleSpin agent runs between
// yields.
const spinPeriod = 4

// idleSpinWindow is how long an IdleBlock agent keeps yielding after its
// last work before it blocks in the kernel. A receiver that blocks between
// datagrams arriving tens of microseconds apart costs the sender a wake-up
// in its send path, and itself a wake-up latency, per datagram; an agent
// whose traffic stops blocks 50us later.
const idleSpinWindow = 50 * time.Microsecond

// block waits in recvmmsg until a datagram arrives, the protocol's next
// deadline passes, or a producer (or Close) wakes it.
func (a *agent) block(deadline time.Duration) {
	m := a.m
	if !a.fill() {
		// Pool exhausted: wait for deliveries/purges to return buffers.
		time.Sleep(100 * time.Microsecond)
		return
	}
	var t time.Time
	if deadline != nakack.NoDeadline {
		t = m.epoch.Add(deadline)
	}
	if m.closing.Load() {
		// While draining, re-check stability at least every millisecond.
		if lim := time.Now().Add(time.Millisecond); t.IsZero() || t.After(lim) {
			t = lim
		}
	}
	_ = m.tr.SetReadDeadline(t)
	if a.dedicated {
		// Producers wake the sender goroutine, not this one.
		if a.stopped() || (m.closing.Load() && !a.closeSeen) || a.roomMade() {
			return
		}
		n, err := m.tr.ReadBatch(a.rbytes, a.sizes, a.srcs)
		a.readErr(err)
		a.nread = n
		return
	}
	m.q.parked.Store(true)
	if (m.q.pending() && !a.protoFull) || a.stopped() || (m.closing.Load() && !a.closeSeen) || a.roomMade() {
		m.q.parked.Store(false)
		return
	}
	n, err := m.tr.ReadBatch(a.rbytes, a.sizes, a.srcs)
	m.q.parked.Store(false)
	a.readErr(err)
	a.nread = n
}

// roomMade reports whether Poll made room in the delivery ring since the
// agent stalled on it (checked after the read deadline is set: a Poll
// after the check wakes the read).
func (a *agent) roomMade() bool { return a.dlv != nil && a.dlv.progressed() }

func (a *agent) stopped() bool {
	select {
	case <-a.m.stop:
		return true
	default:
		return false
	}
}
