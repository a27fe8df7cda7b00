package engine

import (
	"net/netip"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/wire"
)

// agent runs the protocol. Its duty cycle (doWork, Aeron's Agent.doWork)
// reads a batch of datagrams without blocking (recvmmsg) into pooled
// buffers, runs its parts in turn under the protocol lock (iterate:
// receive, membership timers, send, protocol timers, delivery, the
// outbox, upkeep and Close's drain), then writes what they produced
// (sendmmsg) outside it. Each part keeps its state in its own struct and
// has one owner, the goroutine that runs it:
//
//   - recvState (agent_recv.go): the read slots and the routing table; the
//     goroutine that runs doWork.
//   - sendState (agent_send.go): what was taken from the log buffer
//     and the open bundle; the goroutine that runs doWork, or the sender
//     goroutine with ThreadingDedicated.
//   - lifeState (agent_life.go): membership, housekeeping, lag and Close's
//     drain and leave; the goroutine that runs doWork.
//   - runState (agent_run.go): who runs doWork. The threading modes are
//     thin runners around it: ThreadingShared runs it on a goroutine of
//     its own (loop, idling by the IdleStrategy when a cycle did nothing:
//     with IdleBlock it blocks in recvmmsg with a read deadline at the
//     next timer, and producers wake it through the send queue's parked
//     flag), ThreadingInvoked in the application's Member.DoWork (and in
//     loop on Open's and Close's goroutines while they join and drain),
//     ThreadingDedicated in loop on a receiver goroutine whose send part
//     is a sender goroutine's (runSender).
//
// With ThreadingDedicated, what both goroutines touch they touch only
// under the lock. The application's goroutines never wait for it: they
// meet the agent through the log buffer (sends), the delivery ring
// (dlv: Poll), atomic counters and the snapshot published on demand
// (Stats, which only tries the lock) and view (View).
type agent struct {
	m *Member
	recvState
	sendState
	lifeState
	runState

	// rw is the write batch of the goroutine that runs doWork (sendState
	// has the dedicated sender goroutine's).
	rw wbatch

	// The handlers Poll delivers to; lost ranges are queued as events by
	// the protocol's OnLost hook (Member.lostRange), so each Deliver goes
	// from the protocol straight to the handler.
	pushH nakack.Handler // push mode: Config.Handler itself
	pullH nakack.Handler // pull mode: the delivery ring
	drop  nakack.Handler // closing in pull mode: discards
	// dlv is pull mode's delivery ring to Member.Poll (nil in push mode).
	dlv *delivery
}

// discard is the handler of a closing pull-mode member: what the
// application no longer polls is dropped (lost ranges still become events).
type discard struct{}

func (discard) Deliver(digest.Member, uint64, []byte) {}
func (discard) Lost(digest.Member, uint64, uint64)    {}

func (a *agent) init(m *Member) {
	a.m = m
	bs := m.tr.BatchSize()
	a.rbufs = make([]*wire.Buffer, bs)
	a.unfilled = bs
	a.rbytes = make([][]byte, bs)
	a.sizes = make([]int, bs)
	a.srcs = make([]netip.AddrPort, bs)
	a.routes = newRoutes(m.cfg.Self, m.tr.LocalAddr())
	a.gaddrs = make(map[string]netip.AddrPort)
	a.group = m.cfg.GroupID
	a.small = m.cfg.MaxDatagram / 8
	a.initSend()
	a.rw.init(2 * bs)
	a.burst = bs
	a.dedicated = m.cfg.Threading == ThreadingDedicated
	if a.dedicated {
		a.sw.init(2 * bs)
		a.sendWake = make(chan struct{}, 1)
		a.quit = make(chan struct{})
		a.sendDone = make(chan struct{})
	}
	a.pushH = m.cfg.Handler
	a.drop = discard{}
	if m.cfg.Handler == nil {
		a.dlv = newDelivery(&m.cfg)
		a.dlv.superseded = &m.ctr.discardedOnRejoin
		a.pullH = a.dlv
	}
}

// newIncarnation resets the per-incarnation send accounting: the new
// protocol's seqnos restart at 1. Messages handed to the old protocol and
// not flushed went with it.
func (a *agent) newIncarnation(self digest.Member) {
	a.drainSeq = 0
	a.protoFull, a.unflushed = false, false
	a.left = false
	a.routes.setSelf(self, a.m.tr.LocalAddr())
}

// doWork is one duty cycle: read without blocking (unless the last read's
// datagrams are still to process), run the parts under the lock
// (iterate), write what they produced. It returns how much work was done,
// the next deadline, and whether a closing member has finished.
func (a *agent) doWork() (work int, deadline time.Duration, finished bool) {
	a.read()
	work, deadline, finished = a.iterate()
	a.deadline = deadline
	a.write(&a.rw)
	if work > 0 {
		a.m.signalDeliverable()
	}
	return work, deadline, finished
}

// iterate runs the duty cycle's parts under the lock, in this order:
// receive what was read; membership timers (heartbeats, failure
// detection, view-change and join retries, a fixed view's linger) before
// sending, since a rejoin may replace the protocol; send; protocol timers
// (not counted as work: a timer alone does not warrant the yield burst
// before blocking); delivery; the outbox into the write batch; upkeep and
// the next deadline; Close's drain and leave. A cycle ending after a
// Stats call publishes the snapshot it reads (unlockProto).
func (a *agent) iterate() (work int, deadline time.Duration, finished bool) {
	m := a.m
	m.lockProto()
	work, deadline, finished = a.parts()
	m.unlockProto()
	return work, deadline, finished
}

// parts runs iterate's parts (under the lock).
func (a *agent) parts() (work int, deadline time.Duration, finished bool) {
	m := a.m
	now := m.now()
	a.lastNow = now
	work = a.receive(now)
	a.tickMembership(now)
	p := m.proto
	if p == nil {
		deadline, finished = a.outOfView()
		return work, deadline, finished
	}
	work += a.sendPart(now, p)
	if p.NextDeadline() <= now {
		p.Tick(now)
	}
	closing := m.closing.Load()
	a.closeSeen = a.closeSeen || closing
	work += a.deliver(p, closing)
	a.takeOutbox(&a.rw)
	a.queueGMS(&a.rw)
	deadline = a.upkeep(now, p, work)
	if closing {
		deadline, finished = a.drainClose(now, p, deadline)
	}
	return work, deadline, finished
}

func (a *agent) cleanup() {
	for _, h := range a.held {
		h.buf.Release()
	}
	a.held, a.heldBytes = nil, 0
	for i, b := range a.rbufs {
		if b != nil {
			b.Release()
			a.rbufs[i] = nil
		}
	}
	a.unfilled = len(a.rbufs)
	if a.spare != nil {
		a.spare.Release()
		a.spare = nil
	}
}
