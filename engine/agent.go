package engine

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine/transport"
	"github.com/nakcast/nakcast/gms"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/wire"
)

// agent is the one goroutine that owns the protocol (Aeron's shared mode:
// sender and receiver duties on one goroutine). One iteration:
//
//  1. read a batch of datagrams without blocking (recvmmsg) into pooled
//     buffers, outside the lock;
//  2. under the lock: Receive each datagram; hand the publication ring's
//     committed messages to Send, and Flush the open bundle when the ring
//     is empty (idle: a lone message is never held back); Tick when the
//     protocol's deadline has passed; in push mode deliver a batch to the
//     Handler; move the outbox into the agent's write batch;
//  3. outside the lock: write the batch (sendmmsg) and release the buffers.
//
// When an iteration did nothing it idles by the configured strategy; with
// IdleBlock it blocks in recvmmsg with a read deadline at the protocol's
// next timer, and producers wake it through the send queue's parked flag.
type agent struct {
	m *Member

	// receive side
	rbufs     []*wire.Buffer
	rbytes    [][]byte
	sizes     []int
	srcs      []netip.AddrPort
	nread     int
	routes    *routes     // who may send what from where, and where unicasts go (routes.go)
	held      []heldDgram // datagrams of static members not bound yet (admit.go)
	heldBytes int
	group     uint32
	small     int // datagrams up to this size are copied into a smaller buffer

	// send side
	pend      [][]byte      // payloads polled from the ring, not yet accepted by Send
	burst     int           // datagrams bundled before an iteration writes them (the batch size)
	sending   bool          // the last iteration handed messages to the protocol
	readAt    time.Duration // a busy sender's next read (see busyReadInterval)
	readLast  bool          // the last iteration read (see readDue)
	pendFirst uint64
	pendI     int
	pendN     int
	unflushed bool
	// drainSeq and drainBundles are the protocol's NextSeq and Bundles
	// when drainSend last ended (see streaming).
	drainSeq, drainBundles uint64
	closeSeen              bool          // an iteration has observed Close
	lagCheckAt             time.Duration // next housekeeping (routes, address probes)
	lastTraffic            time.Duration // last iteration that received, sent or delivered
	lagging                bool          // an EventLagging episode is open
	protoFull              bool          // the protocol refused the last Send (retention window full, or flow control)
	// fullLow and fullRecv are the protocol's SendLimit and GroupReceived when
	// it last refused (or flow control held): with ThreadingDedicated the
	// receiver goroutine wakes the sender only once one of them moved.
	fullLow, fullRecv uint64
	bundleAt          time.Duration // when the open bundle got its first message

	// membership
	started   atomic.Bool // the goroutine was started
	viewSize  int
	inTick    bool                      // inside gms Tick (see Member.newProtocol)
	rejoin    bool                      // excluded: join again after this entry point
	left      bool                      // gms reported Left
	leaveSent bool                      // Close's graceful leave started
	quiet     quiesce                   // a fixed view's wait before it leaves
	gaddrs    map[string]netip.AddrPort // parsed gms peer addresses

	// write side: the receiver's (or shared agent's) batch and, with
	// ThreadingDedicated, the sender goroutine's
	rw, sw wbatch

	// ThreadingInvoked: owner is 1 while a goroutine runs the agent (an
	// application's DoWork, Open's or Close's goroutine), 0 when it is
	// free; handoff asks Open's goroutine to stop and free it, handedOff
	// is closed once it did.
	owner     atomic.Int32
	handoff   atomic.Bool
	handedOff chan struct{}
	lastNow   time.Duration // the last iteration's clock (sendDirect's)
	deadline  time.Duration // the last iteration's next timer (WaitWork's)

	// ThreadingDedicated
	dedicated bool
	sendWake  chan struct{} // producers, room made, Close: wake the sender
	quit      chan struct{} // closed when the receiver goroutine exits
	sendDone  chan struct{} // closed when the sender goroutine exits

	pushH deliverer // push mode: wraps Config.Handler
	pullH deliverer // pull mode: wraps Poll's handler
	drop  deliverer // closing in pull mode: discards
}

// deliverer adapts the user's Handler to nakack.Handler, queueing lost
// ranges as events. A field of the agent, so passing it as an interface
// does not allocate.
type deliverer struct {
	m *Member
	h Handler
}

// Deliver passes a message to the user's handler, if any.
func (d *deliverer) Deliver(sender digest.Member, seq uint64, payload []byte) {
	if d.h != nil {
		d.h.Deliver(sender, seq, payload)
	}
}

// Lost queues an EventLost and tells the user's handler, if any.
func (d *deliverer) Lost(sender digest.Member, from, to uint64) {
	d.m.ctr.lostRanges.Add(1)
	d.m.events.push(Event{Kind: EventLost, Sender: sender, From: from, To: to})
	if d.h != nil {
		d.h.Lost(sender, from, to)
	}
}

var _ nakack.Handler = (*deliverer)(nil)

func (a *agent) init(m *Member) {
	a.m = m
	bs := m.tr.BatchSize()
	a.rbufs = make([]*wire.Buffer, bs)
	a.rbytes = make([][]byte, bs)
	a.sizes = make([]int, bs)
	a.srcs = make([]netip.AddrPort, bs)
	a.routes = newRoutes(m.cfg.Self, m.tr.LocalAddr())
	a.gaddrs = make(map[string]netip.AddrPort)
	a.group = m.cfg.GroupID
	a.small = m.cfg.MaxDatagram / 8
	a.pend = make([][]byte, min(1024, m.cfg.RingCapacity))
	a.rw.init(2 * bs)
	a.burst = bs
	a.dedicated = m.cfg.Threading == ThreadingDedicated
	if a.dedicated {
		a.sw.init(2 * bs)
		a.sendWake = make(chan struct{}, 1)
		a.quit = make(chan struct{})
		a.sendDone = make(chan struct{})
	}
	a.pushH = deliverer{m: m, h: m.cfg.Handler}
	a.pullH = deliverer{m: m}
	a.drop = deliverer{m: m}
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

// fill makes sure every read slot holds a buffer. It reports false when the
// pool is over budget (the read is skipped this iteration and counted).
func (a *agent) fill() bool {
	for i, b := range a.rbufs {
		if b == nil {
			b = a.m.pool.Get(a.m.cfg.MaxDatagram)
			if b == nil {
				a.m.ctr.dropNoBuffer.Add(1)
				return false
			}
			a.rbufs[i] = b
			a.rbytes[i] = b.B[:a.m.cfg.MaxDatagram]
		}
	}
	return true
}

func (a *agent) run() {
	m := a.m
	defer close(m.done)
	defer a.cleanup()
	if a.dedicated {
		go a.runSender()
		defer func() {
			close(a.quit)
			<-a.sendDone
		}()
	}
	a.loop()
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

// cycle is one iteration of the agent's duty cycle: read without blocking
// (unless the last read's datagrams are still to process), run the
// protocol (iterate), write what it produced.
func (a *agent) cycle() (work int, deadline time.Duration, finished bool) {
	m := a.m
	if a.nread == 0 && a.readDue() && a.fill() {
		n, err := m.tr.TryReadBatch(a.rbytes, a.sizes, a.srcs)
		a.readErr(err)
		a.nread = n
		if n == 0 && !a.dedicated && a.sending {
			a.readAt = m.now() + busyReadInterval
		}
	}
	work, deadline, finished = a.iterate()
	a.deadline = deadline
	a.write(&a.rw)
	if work > 0 {
		m.signalDeliverable()
	}
	return work, deadline, finished
}

// loop runs cycles, idling by the configured strategy, until the member
// stops or finishes (false) or, with ThreadingInvoked, Open hands the
// agent over to the application (true).
func (a *agent) loop() (handedOff bool) {
	m := a.m
	spins := 0
	var workAt time.Duration // first idle iteration since the last work
	for {
		select {
		case <-m.stop:
			return false
		default:
		}
		if a.handoff.Load() {
			return true
		}
		work, deadline, finished := a.cycle()
		if finished {
			return false
		}
		if work > 0 {
			spins = 0
			workAt = 0
			continue
		}
		switch m.cfg.Idle {
		case IdleSpin:
			// Spin, but let the other goroutines of a busy process (the
			// application's, another member's agent) run now and then:
			// Go preempts a spinning goroutine only after 10ms. An idle
			// iteration costs a microsecond or more (its reads are system
			// calls), so every spinPeriod-th is already often: with 64,
			// a ping-pong between two members of one process took 90us
			// a round trip (9x the raw spin ping-pong), each agent
			// holding a P for ~100us before yielding.
			if spins++; spins%spinPeriod == 0 {
				runtime.Gosched()
			}
			continue
		case IdleYield:
			runtime.Gosched()
			continue
		}
		// IdleBlock: a short burst of yields catches the next message of a
		// busy publisher (or the next datagram of a busy sender) without a
		// kernel round trip, then block: at least 8 yields, and yields
		// for up to idleSpinWindow after the last work.
		now := m.now()
		if workAt == 0 {
			workAt = now
		}
		if spins < 8 || now-workAt < idleSpinWindow {
			spins++
			runtime.Gosched()
			continue
		}
		a.block(deadline)
	}
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

// maxDeliverRounds bounds the delivery batches of one push-mode
// iteration.
const maxDeliverRounds = 16

// busyReadInterval is how long a busy sender waits, after a read found
// both sockets empty, before it reads again. A sender streaming its own
// messages mostly finds nothing to read (its own datagrams are filtered
// out in the kernel; what arrives is the odd STABLE or NAK), and each empty
// read is two recvmmsg system calls: about 12 ns a message of 64 B before
// this limit. Control messages so wait at most this long while the agent
// is busy sending; an agent that is not sending reads every iteration.
const busyReadInterval = 20 * time.Microsecond

// readDue reports whether this iteration reads the sockets.
// (a.sending belongs to the sender goroutine with ThreadingDedicated,
// whose receiver goroutine always reads.)
//
// An iteration that finds messages in the publication ring (or an open
// bundle: ThreadingInvoked's TrySendBatch writes into it) right after an
// iteration that read sends them first, without reading: a reply the
// application committed after the last iteration (ThreadingInvoked's
// TrySend between two DoWork calls, or a producer woken by a delivery)
// goes out without waiting for a recvmmsg that, in a request-reply
// exchange, finds the socket empty: one system call less per hop of a
// ping-pong. The next iteration reads, so reads at worst alternate with
// sends while the ring stays busy.
func (a *agent) readDue() bool {
	if a.dedicated {
		return true
	}
	if a.readLast && (a.unflushed || a.m.q.pub.Len() > 0) {
		a.readLast = false
		return false
	}
	a.readLast = !a.sending || a.m.now() >= a.readAt
	return a.readLast
}

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
		if a.stopped() || (m.closing.Load() && !a.closeSeen) {
			return
		}
		n, err := m.tr.ReadBatch(a.rbytes, a.sizes, a.srcs)
		a.readErr(err)
		a.nread = n
		return
	}
	m.q.parked.Store(true)
	if (m.q.pub.Len() > 0 && !a.protoFull) || a.stopped() || (m.closing.Load() && !a.closeSeen) {
		m.q.parked.Store(false)
		return
	}
	n, err := m.tr.ReadBatch(a.rbytes, a.sizes, a.srcs)
	m.q.parked.Store(false)
	a.readErr(err)
	a.nread = n
}

func (a *agent) stopped() bool {
	select {
	case <-a.m.stop:
		return true
	default:
		return false
	}
}

func (a *agent) readErr(err error) {
	switch {
	case err == nil:
	case errors.Is(err, os.ErrDeadlineExceeded):
	case errors.Is(err, transport.ErrClosed):
	default:
		a.m.ctr.socketErrors.Add(1)
		a.m.log.rateLimited("read", err)
	}
}

// iterate does one iteration's protocol work under the lock. It returns how
// much work was done, the protocol's next deadline, and whether a closing
// member has drained.
func (a *agent) iterate() (work int, deadline time.Duration, finished bool) {
	m := a.m
	g := m.g
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	a.lastNow = now

	// 1. Receive.
	if n := a.nread; n > 0 {
		a.nread = 0
		work += n
		m.ctr.datagramsIn.Add(uint64(n))
		push := m.cfg.Handler != nil
		for i := 0; i < n; i++ {
			a.receiveOne(i, now)
			if p := m.proto; push && p != nil {
				// Deliver between datagrams: a STABLE that the protocol
				// sends from inside Receive then reports what was
				// delivered up to the previous datagram, not up to the
				// previous read batch (up to 4 MiB behind).
				d := p.Poll(&a.pushH, m.cfg.DeliverBatch)
				m.ctr.delivered.Add(uint64(d))
			}
		}
	}
	// Membership timers (heartbeats, failure detection, view-change and
	// join retries, a fixed view's linger) before sending: a rejoin may
	// replace the protocol.
	if g.NextDeadline() <= now {
		a.inTick = true
		g.Tick(now)
		a.inTick = false
	}
	a.afterGMS(now)
	p := m.proto
	if p == nil {
		// Not in a view (joining, or excluded and rejoining): messages
		// wait in the ring.
		a.queueGMS(&a.rw)
		deadline = g.NextDeadline()
		if m.closing.Load() {
			finished = a.left || g.Status() == gms.StatusIdle
		}
		return work, deadline, finished
	}

	// 2. Send: the ring's committed messages, then flush when idle (the
	// sender goroutine's duty with ThreadingDedicated; it waits for room
	// when the protocol refused, and this iteration may have made some).
	if !a.dedicated {
		work += a.drainSend(now)
	} else if a.protoFull && (p.SendLimit() != a.fullLow || p.GroupReceived() != a.fullRecv) {
		// Room may have been made (a purge, or the receivers read more):
		// wake the sender. Waking it every iteration while nothing moved
		// made it rescan its polled run and be refused again: 21 scans a
		// message sent in EngineLoopback/64B/block/dedicated.
		a.signalSender()
	}

	// 3. Timers (not counted as work: a timer alone does not warrant the
	// yield burst before blocking).
	if p.NextDeadline() <= now {
		p.Tick(now)
	}

	// 4. Delivery.
	closing := m.closing.Load()
	a.closeSeen = a.closeSeen || closing
	switch {
	case m.cfg.Handler != nil:
		// Keep up with what this iteration sent and received: one batch
		// an iteration let the member's own messages (a whole ring of
		// them can be sent in one iteration) pile up undelivered, and
		// since stability waits for every member's delivered, own
		// included, the sender's window filled and it stalled
		// (protocol back-pressure every 30 ms in the netns benchmark).
		// Bounded, so that a flood cannot hold the lock for ever.
		for range maxDeliverRounds {
			n := p.Poll(&a.pushH, m.cfg.DeliverBatch)
			m.ctr.delivered.Add(uint64(n))
			work += n
			if n < m.cfg.DeliverBatch {
				break
			}
		}
	case closing:
		n := p.Poll(&a.drop, m.cfg.DeliverBatch)
		m.ctr.discardedOnClose.Add(uint64(n))
		work += n
	}

	// 5. Outbox to the write batch.
	a.takeOutbox(&a.rw)
	a.queueGMS(&a.rw)

	if now >= a.lagCheckAt {
		a.housekeep(now)
	}
	a.noteLag(p)
	deadline = min(p.NextDeadline(), a.lagCheckAt, g.NextDeadline())
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
	if closing && a.pendI == a.pendN && m.q.pub.Len() == 0 && !a.unflushed {
		// Once everything is stable, leave (gms: the others stop counting
		// on us at once; a fixed view lingers a few stability rounds, so
		// that a member that missed the last STABILITY or a repair gets
		// another); done on Left.
		drained := !a.leaveSent && p.Drained()
		if !drained && !a.leaveSent {
			a.quiet = quiesce{}
			m.drained.Store(false) // data came in while we waited
		}
		switch {
		case a.leaveSent:
			finished = a.left
		case drained && !m.dynamic() && !a.quiet.held(p, now):
			m.drained.Store(true) // all we sent is stable; we still listen
			deadline = min(deadline, a.quiet.since+quiesceCap)
		case drained:
			m.drained.Store(true)
			a.leaveSent = true
			if err := g.Leave(now); err != nil {
				finished = true
			}
			finished = finished || a.left
			a.queueGMS(&a.rw)
			deadline = min(deadline, g.NextDeadline())
		}
	}
	return work, deadline, finished
}

// receiveOne hands datagram i to the protocol: the routing table's check
// of its source (admit), small-datagram compaction.
func (a *agent) receiveOne(i int, now time.Duration) {
	m := a.m
	b := a.rbufs[i]
	n := a.sizes[i]
	h, body, err := wire.DecodeHeader(b.B[:n], a.group)
	if err != nil {
		// Dropped before the protocol; the buffer stays in its slot.
		if errors.Is(err, wire.ErrForeignGroup) {
			m.ctr.dropForeignGroup.Add(1)
		} else {
			m.ctr.dropMalformed.Add(1)
		}
		return
	}
	if (m.sec != nil || h.Auth()) && !a.verify(b.B[:n], h, now) {
		return // counted by reason; the buffer stays in its slot
	}
	if !a.admit(h, b.B[:n], body, a.srcs[i], now) {
		return // counted; the buffer stays in its slot
	}
	if gms.IsMembership(h.Type) {
		// gms copies what it keeps: the buffer stays in its slot.
		m.ctr.membershipIn.Add(1)
		if err := m.g.Receive(b.B[:n], now); err != nil {
			m.ctr.dropMalformed.Add(1)
		}
		return
	}
	if m.proto == nil {
		m.ctr.dropNotJoined.Add(1)
		return
	}
	a.rbufs[i] = nil
	b.N = n
	// A small datagram (a lone message, a control message) would pin a
	// MaxDatagram buffer while the window retains it: copy it to its size
	// class and reuse the big one.
	if n <= a.small {
		if c := m.pool.Get(n); c != nil {
			c.N = copy(c.B, b.B[:n])
			a.rbufs[i] = b
			b = c
		}
	}
	if err := m.proto.Receive(b, now); err != nil {
		m.ctr.receiveErrors.Add(1)
	}
	b.Release()
}

// drainSend hands polled messages to the protocol until it holds them back
// or the ring is empty, then flushes the open bundle if the ring is idle.
// Messages go across in runs (nakack.SendBatch): the polled slots up to an
// aborted claim, of which the protocol takes what its window, flow
// control and rate limit let go; per message only the copy into the
// bundle and the slot's release remain.
func (a *agent) drainSend(now time.Duration) int {
	m := a.m
	p := m.proto
	work := 0
	a.sending = false
	if m.g.Status() != gms.StatusMember {
		return 0 // leaving: nothing more goes out
	}
	for {
		if a.pendI == a.pendN {
			a.pendFirst, a.pendN = m.q.pub.Poll(a.pend)
			a.pendI = 0
			if a.pendN == 0 {
				break
			}
			m.signalSpace()
		}
		if isAborted(a.pend[a.pendI]) {
			a.pend[a.pendI] = nil
			a.pendI++
			continue
		}
		run := a.pend[a.pendI:a.pendN]
		k := 1
		for k < len(run) && !isAborted(run[k]) {
			k++
		}
		pls := run[:k]
		_, n, err := p.SendBatch(pls, now)
		if err != nil && !errors.Is(err, nakack.ErrBackPressure) {
			// The first message is refused for good: drop it.
			m.ctr.sendErrors.Add(1)
			m.log.rateLimited("send", err)
			m.q.release(pls[0])
			pls[0] = nil
			a.pendI++
			continue
		}
		a.noteSent(pls[:n], true, now)
		a.pendI += n
		work += n
		if n < len(pls) && a.holdBack(p.Held()) {
			return work + a.flushHeld(now)
		}
		if len(p.Outbox()) >= a.burst {
			// A write batch's worth of datagrams: write them before
			// bundling more (the ring is not idle, so the open bundle
			// stays open). One iteration must not bundle what producers
			// keep adding, up to a whole retention window, before it
			// writes any of it or delivers the member's own messages
			// (which stability waits for).
			return work
		}
	}
	if a.unflushed && (m.cfg.BundleDelay == 0 || now-a.bundleAt >= m.cfg.BundleDelay) {
		if !a.streaming() {
			p.Flush(now)
			a.unflushed = false
		}
		work++ // a held bundle is flushed by the next iteration
	}
	a.drainSeq, a.drainBundles = p.NextSeq(), p.Bundles()
	return work
}

// holdBack records why the protocol took less than it was given and reports
// whether sending stops for now: the retention window is full (or no pool
// buffer: retry after a purge or a release) or flow control holds (retry
// after the next STABILITY), counted once per episode, or the rate limit
// holds (retry a little later). nil: it stopped before a fragmented
// payload, which the next SendBatch takes.
func (a *agent) holdBack(why error) bool {
	m := a.m
	switch {
	case why == nil:
		return false
	case errors.Is(why, nakack.ErrRateLimit):
		return true
	case !a.protoFull && errors.Is(why, nakack.ErrFlowControl):
		m.ctr.flowControlWaits.Add(1)
	case !a.protoFull:
		m.ctr.protocolBackPressure.Add(1)
	}
	a.protoFull = true
	a.noteFull()
	return true
}

// streaming reports whether an invoked member's application is streaming:
// since the last drainSend it sent enough to fill at least one datagram
// (the protocol closed a full bundle) and some of it is in the open bundle.
// drainSend then leaves that bundle open until the next iteration instead
// of flushing it as idle.
//
// With ThreadingInvoked the ring is empty at every DoWork (the goroutine
// that fills it also drains it), so "the ring is idle", the flush rule of
// the other modes, is true at every DoWork, and an application that sends
// between its DoWork calls would get a short datagram each time (with
// DoWork every 1024 messages of 64 B, every other datagram an eighth
// full). A message sent alone, or a trickle of less than a datagram
// between two DoWork calls, is still flushed at once; a held bundle waits
// one DoWork at most: the next one either fills it, holds it again because
// a datagram's worth more came (the application is still sending), or
// flushes it.
func (a *agent) streaming() bool {
	p := a.m.proto
	return a.m.invoked() && p.NextSeq() != a.drainSeq && p.Bundles() != a.drainBundles
}

// sendDirect is TrySendBatch with ThreadingInvoked when the calling
// goroutine could take the agent (owner) and nothing waits in the
// publication ring: the payloads go straight into the protocol's open
// bundle, one copy, with no ring slot and no hand-over to the goroutine
// that runs DoWork next (the same one, usually). For one message (TrySend)
// taking the agent costs more than the ring's claim and publication, which
// TrySend keeps. It takes the longest prefix that the protocol accepts
// (its window, flow control, the rate limit) and returns its length; the
// caller queues the rest in the ring, which DoWork drains. A full write
// batch (DoWork has not written for a while) or a member not in a view
// leave it all to the ring. The clock is the last iteration's (the
// protocol uses it for its idle announcements, the bundle's age and the
// rate limit), not read again per batch. Called with the agent owned.
func (a *agent) sendDirect(pls [][]byte) int {
	m := a.m
	p := m.proto
	if p == nil || a.pendI != a.pendN || m.q.pub.Len() != 0 || len(p.Outbox()) >= a.burst {
		return 0
	}
	if m.g.Status() != gms.StatusMember {
		return 0
	}
	now := a.lastNow
	_, n, err := p.SendBatch(pls, now)
	if err != nil && !errors.Is(err, nakack.ErrBackPressure) {
		return 0 // the ring's path counts and drops it
	}
	a.noteSent(pls[:n], false, now)
	return n
}

// noteSent records pls as taken by the protocol: the open bundle's start,
// that this member is sending. ring says pls are the publication ring's
// payloads, whose out-of-line buffers go back to their free lists now that
// the protocol has copied them (sendDirect's are the caller's).
func (a *agent) noteSent(pls [][]byte, ring bool, now time.Duration) {
	if len(pls) == 0 {
		return
	}
	if q := a.m.q; ring {
		for j, pl := range pls {
			if q.isBig(pl) {
				q.release(pl)
				pls[j] = nil
			}
		}
	}
	a.sending = true
	a.protoFull = false
	if !a.unflushed {
		a.unflushed, a.bundleAt = true, now
	}
}

// noteFull records where the protocol stood when it refused (or flow
// control held): see fullLow.
func (a *agent) noteFull() {
	p := a.m.proto
	a.fullLow, a.fullRecv = p.SendLimit(), p.GroupReceived()
}

// flushHeld flushes the open bundle when the agent stops handing messages
// to the protocol for a while (rate limit, flow control, back-pressure):
// what it holds should not wait for the hold to end.
func (a *agent) flushHeld(now time.Duration) int {
	if !a.unflushed {
		return 0
	}
	a.m.proto.Flush(now)
	a.unflushed = false
	return 1
}

// queue adds one outgoing datagram to the write batch, resolving a unicast
// destination through the routing table; a member without an address (a
// static member not bound yet) is reached through the group (every member
// decodes it and the protocol ignores what is not for it).
func (a *agent) queue(w *wbatch, to digest.Member, b *wire.Buffer) {
	var dst netip.AddrPort
	if !to.IsZero() {
		var ok bool
		if dst, ok = a.routes.lookup(to); !ok {
			a.m.ctr.unicastViaGroup.Add(1)
		}
	}
	w.q = append(w.q, b)
	w.b = append(w.b, b.Bytes())
	w.dsts = append(w.dsts, dst)
}

// takeOutbox moves the protocol's outbox into w (under the lock).
func (a *agent) takeOutbox(w *wbatch) {
	p := a.m.proto
	for _, o := range p.Outbox() {
		a.queue(w, o.To, o.Buf)
	}
	p.ClearOutbox()
}

// wbatch is one goroutine's batch of datagrams to write (q[i] is nil for a
// gms datagram, whose bytes gms owns).
type wbatch struct {
	q    []*wire.Buffer
	b    [][]byte
	dsts []netip.AddrPort
	max  int // the largest batch written (tests)
}

func (w *wbatch) init(n int) {
	w.q = make([]*wire.Buffer, 0, n)
	w.b = make([][]byte, 0, n)
	w.dsts = make([]netip.AddrPort, 0, n)
}

// afterGMS acts on what a gms entry point asked of the engine: a rejoin
// after an exclusion.
func (a *agent) afterGMS(now time.Duration) {
	if a.rejoin {
		a.rejoin = false
		if err := a.m.g.Join(now); err != nil {
			a.m.log.l.Error("rejoin", "err", err)
		}
	}
}

// queueGMS moves gms's outbox into the write batch: multicasts to the
// group, unicasts to the peer's unicast address. An address that does not
// parse, or that the transport's safety rules would refuse (which would
// fail the whole batch), is dropped and counted.
func (a *agent) queueGMS(w *wbatch) {
	m := a.m
	for _, o := range m.g.Outbox() {
		var dst netip.AddrPort
		if !o.To.IsZero() {
			var ok bool
			if dst, ok = a.gaddrs[o.To.Addr]; !ok {
				d, err := netip.ParseAddrPort(o.To.Addr)
				if err != nil || !a.unicastOK(d) {
					m.ctr.dropBadAddress.Add(1)
					m.log.rateLimited("membership address", fmt.Errorf("peer %v: address %q refused", o.To.Member, o.To.Addr))
					continue
				}
				if len(a.gaddrs) > 4*a.viewSize+64 {
					clear(a.gaddrs)
				}
				a.gaddrs[o.To.Addr], dst = d, d
			}
			a.routes.noteExchange(o.To.Member, dst)
		}
		w.q = append(w.q, nil)
		w.b = append(w.b, o.Data)
		w.dsts = append(w.dsts, dst)
	}
	m.g.ClearOutbox()
}

// unicastOK reports whether the transport may send to d.
func (a *agent) unicastOK(d netip.AddrPort) bool {
	ad := d.Addr()
	return d.Port() != 0 && !ad.IsMulticast() && !ad.IsUnspecified() && ad.Is4() == a.m.cfg.Group.Addr().Is4() &&
		(ad.IsLoopback() || a.m.cfg.AllowNonLoopback)
}

// write sends w (outside the protocol lock) and releases its buffers. With
// ThreadingDedicated both goroutines write; the transport's write state is
// not shared between calls, so they take turns on m.wmu.
func (a *agent) write(w *wbatch) {
	if len(w.q) == 0 {
		return
	}
	m := a.m
	if a.dedicated {
		m.wmu.Lock()
	}
	if m.sec != nil {
		m.sec.seal(w, m.pool, &m.ctr)
	}
	n, err := m.tr.WriteBatch(w.b, w.dsts)
	if a.dedicated {
		m.wmu.Unlock()
	}
	m.ctr.datagramsOut.Add(uint64(n))
	w.max = max(w.max, len(w.q))
	if err != nil && !errors.Is(err, transport.ErrClosed) {
		m.ctr.socketErrors.Add(1)
		m.ctr.dropSendFailed.Add(uint64(len(w.q) - n))
		m.log.rateLimited("write", err)
	}
	for i, b := range w.q {
		if b != nil {
			b.Release()
		}
		w.q[i] = nil
		w.b[i] = nil
	}
	w.q, w.b, w.dsts = w.q[:0], w.b[:0], w.dsts[:0]
}

// signalSender wakes the sender goroutine (ThreadingDedicated) if it
// waits; it never blocks.
func (a *agent) signalSender() {
	select {
	case a.sendWake <- struct{}{}:
	default:
	}
}

// runSender is the sender goroutine of ThreadingDedicated: it hands the
// publication ring's messages to the protocol (drainSend, under the lock),
// writes the bundles it produced, and waits on sendWake when there is
// nothing to do: producers signal it (through the send queue's parked
// flag), the receiver goroutine does when the protocol refused for lack
// of room and an iteration may have made some, and Close does. A held
// bundle (BundleDelay) or a rate limit wakes it by a timer.
func (a *agent) runSender() {
	m := a.m
	defer close(a.sendDone)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-a.quit:
			return
		case <-m.stop:
			return
		default:
		}
		work, retry := a.sendIterate()
		a.write(&a.sw)
		if work > 0 {
			continue
		}
		m.q.parked.Store(true)
		if retry == 0 && m.q.pub.Len() > 0 {
			// A producer committed after drainSend looked.
			m.q.parked.Store(false)
			continue
		}
		var tc <-chan time.Time
		if retry > 0 {
			t.Reset(retry)
			tc = t.C
		}
		select {
		case <-a.sendWake:
		case <-tc:
		case <-a.quit:
		case <-m.stop:
		}
		m.q.parked.Store(false)
		if tc != nil && !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
	}
}

// sendIterate is one sender-goroutine iteration under the lock. retry is
// how long to wait at most before the next when it did nothing (0: until
// signalled): the open bundle's BundleDelay, or a rate-limit hold.
func (a *agent) sendIterate() (work int, retry time.Duration) {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.proto
	if p == nil {
		return 0, 0 // not in a view: the receiver goroutine joins
	}
	now := m.now()
	work = a.drainSend(now)
	a.takeOutbox(&a.sw)
	if work > 0 {
		a.lastTraffic = now
		return work, 0
	}
	if a.unflushed && m.cfg.BundleDelay > 0 {
		retry = max(a.bundleAt+m.cfg.BundleDelay-now, time.Microsecond)
	}
	if held := a.pendI < a.pendN || m.q.pub.Len() > 0; held && !a.protoFull {
		// The rate limit holds the ring (the protocol and flow control
		// would have set protoFull and wait for a signal instead).
		retry = rateLimitRetry
	} else if held && a.protoFull {
		// Waiting for the receiver goroutine's signal (room made); look
		// again after a while anyway: a refusal for want of a pool buffer
		// ends with a release, which moves neither OwnLow nor
		// GroupReceived.
		retry = protoFullRetry
	}
	return 0, retry
}

// rateLimitRetry is how often a dedicated sender held by the rate limit
// looks again.
const rateLimitRetry = 200 * time.Microsecond

// protoFullRetry is how often a dedicated sender refused by the protocol
// looks again without a signal.
const protoFullRetry = time.Millisecond

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
// drain has held through quiesceRounds STABILITY rounds of the
// coordinator's (sent or received): a peer that sent its last messages
// just before it closed (its agent descheduled on a busy machine) has sent
// them by its next round, so they reach this member and are reported
// before it goes, instead of leaving the peer's Close waiting for a report
// that never comes. A group whose coordinator is gone makes no round:
// quiesceCap bounds the wait.
const (
	quiesceRounds = 2
	quiesceCap    = time.Second
)

// quiesce is a drained fixed-view member's wait (see quiesceRounds).
type quiesce struct {
	set    bool
	rounds uint64        // STABILITY sent and received when the drain began
	since  time.Duration // when it began
}

// held reports whether the drain has held through quiesceRounds rounds,
// or for quiesceCap.
func (q *quiesce) held(p *nakack.Protocol, now time.Duration) bool {
	st := p.Stats()
	rounds := st.StabilitySent + st.StabilityReceived
	if !q.set {
		*q = quiesce{set: true, rounds: rounds, since: now}
	}
	return rounds >= q.rounds+quiesceRounds || now-q.since >= quiesceCap
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
	for ; a.pendI < a.pendN; a.pendI++ {
		a.m.q.release(a.pend[a.pendI])
	}
}
