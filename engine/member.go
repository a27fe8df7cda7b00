package engine

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine/transport"
	"github.com/nakcast/nakcast/gms"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/wire"
)

// Member is one open member of a group: the sockets, the agent goroutine
// that runs the protocol, and the application's API. Send, TrySend,
// TryClaim, Poll, PollEvents, NextEvent and Stats are safe for concurrent
// use.
type Member struct {
	cfg  settings
	tr   transport.Transport
	info transport.Info
	pool *wire.Pool
	// fastMax is the largest payload Send and TrySend write in place
	// without their general path: min(InlineSize, MaxMessage).
	fastMax int
	// proto is the current incarnation's protocol: with dynamic
	// membership it is created by gms on a join (newProtocol) and is nil
	// while this member is not in a view. Guarded by mu.
	proto *nakack.Protocol
	// lastProto is the last incarnation's protocol once dropped (Stats
	// after Close or while rejoining). Guarded by mu.
	lastProto *nakack.Protocol
	// droppedHook, if set, sees each incarnation's protocol as it is
	// dropped (tests: the incarnation an exclusion dropped, which a rejoin
	// through founding and merging can follow with others). Guarded by mu.
	droppedHook func(*nakack.Protocol)
	// g is the membership state machine (gms; a fixed view with static
	// membership), view its installed view; both guarded by mu.
	g     membership
	view  gms.View
	selfV atomic.Value // digest.Member: the current incarnation
	// joined is set by the first installed view; joinCh carries the join's
	// outcome to Open, stateCh the state transfer's.
	joined  bool
	joinCh  chan error
	stateCh chan error
	q       *logBuffer
	epoch   time.Time
	step    *Stepping // a simulator drives this member (simhook.go)
	log     *logger
	sec     *security // nil: open mode

	// mu guards proto: the agent holds it for one iteration's protocol
	// work (never during a syscall; lockProto). It serialises the agent's
	// own goroutines; the application's Poll, Stats and View never take
	// it (the delivery ring, board and viewPub).
	mu sync.Mutex
	// board is the snapshot of the agent's state Stats reads; viewPub the
	// installed view View reads (nil: none).
	board   statsBoard
	viewPub atomic.Pointer[publishedView]
	// wmu serialises the transport's writes of the sender and receiver
	// goroutines (ThreadingDedicated only).
	wmu sync.Mutex

	ag agent

	// Back-pressure waiters (Send) wait for a token on space (capacity
	// 1), which the agent offers when a poll of the ring leaves at least
	// half of it free while waiters > 0; a waiter that got room passes
	// the token on when others wait (see Send).
	waiters atomic.Int32
	space   chan struct{}
	// Receive callers park on deliverCh, closed and replaced by the agent
	// after an iteration that did work (and by a Poll that left records
	// behind) while pollWaiters > 0.
	pollWaiters atomic.Int32
	deliverCh   atomic.Pointer[chan struct{}]

	events eventQueue
	ctr    counters

	closing   atomic.Bool   // Close started: no new sends
	drainCtx  atomic.Value  // context.Context of Close, read by the agent
	stop      chan struct{} // closed to stop the agent at once
	stopOnce  sync.Once
	done      chan struct{} // closed when the agent has exited
	drained   atomic.Bool   // the agent saw everything sent become stable
	closeOnce sync.Once
	closeErr  error
}

// Open validates cfg, opens the transport and starts the agent. With
// dynamic membership (Config.Membership.Members nil, the default) it joins the group
// through gms: discovery (multicast, or Config.Membership.InitialHosts), then
// JOIN_REQ with a new incarnation per attempt, founding a new group as its
// coordinator when nobody answers discovery; it returns once the view and
// digest of the JoinRsp are installed (and, with Config.Membership.FetchState, the
// application state), or an error wrapping ErrJoinFailed (or
// ErrStateTransfer) and the cause when ctx ends or the join gives up
// (Config.Membership.JoinAttempts). With static membership it installs the static
// view at once. ctx bounds the opening only; the member lives until Close.
func Open(ctx context.Context, config Config) (*Member, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	m, err := newMember(config, nil)
	if err != nil {
		return nil, err
	}
	if err := m.join(ctx); err != nil {
		m.abort()
		return nil, fmt.Errorf("open: %w", err)
	}
	if err := m.handOver(); err != nil {
		m.abort()
		return nil, fmt.Errorf("open: %w: %w", ErrJoinFailed, err)
	}
	return m, nil
}

// newMember is Open up to the join: it validates config, opens the
// transport and builds the member and its membership. step, when not nil,
// makes a stepped member (simhook.go).
func newMember(config Config, step *Stepping) (*Member, error) {
	cfg, err := config.resolve()
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	tr, info, err := openTransport(&cfg)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err) // transport errors name themselves
	}
	m := &Member{
		cfg:     cfg,
		tr:      tr,
		info:    info,
		pool:    wire.NewPool(cfg.MaxDatagram, cfg.PoolBytes),
		epoch:   time.Now(),
		step:    step,
		log:     newLogger(cfg.Logger.With("member", cfg.Self.String())),
		space:   make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		joinCh:  make(chan error, 1),
		stateCh: make(chan error, 1),
	}
	m.selfV.Store(cfg.Self)
	m.deliverCh.Store(newWakeCh())
	if m.sec, err = newSecurity(&cfg); err != nil {
		tr.Close()
		return nil, fmt.Errorf("open: %w: %w", ErrInvalidConfig, err)
	}
	m.logAuthMode()
	if m.info.BufferCapped {
		m.log.l.Warn("socket buffers capped by the kernel (net.core.rmem_max/wmem_max); expect drops at full rate",
			"group_rcvbuf", m.info.GroupRecvBuffer, "unicast_rcvbuf", m.info.UnicastRecvBuffer, "sndbuf", m.info.SendBuffer,
			"want", cfg.RecvBuffer)
	}
	wake := m.wakeAgent
	if cfg.Threading == ThreadingDedicated {
		wake = m.wakeSender
	}
	m.q = newLogBuffer(cfg.RingCapacity, cfg.InlineSize, m.protoDatagram(), bundleMessages, cfg.ExclusiveSender, m.pool, cfg.MaxDatagram, wake)
	m.fastMax = min(m.q.inline, cfg.MaxMessage)
	if m.g, err = m.newMembership(); err != nil {
		tr.Close()
		return nil, fmt.Errorf("open: membership: %w", err)
	}
	m.ag.init(m)
	if !m.dynamic() {
		m.ag.routes.setStatic(cfg.Members, cfg.MemberAddrs)
		m.ag.probeGroup()
	}
	m.log.l.Debug("member joining", "group", tr.Group().String(), "local", tr.LocalAddr().String(),
		"members", len(cfg.Members), "idle", cfg.Idle.String(), "max_datagram", cfg.MaxDatagram)
	return m, nil
}

// Self returns this member's identity: with dynamic membership, its
// current incarnation (a new one after an exclusion and rejoin).
func (m *Member) Self() digest.Member { return m.selfV.Load().(digest.Member) }

// startAgent starts the agent goroutine. With ThreadingInvoked it is
// Open's, run until the join is done (handOver); none is needed when the
// join is done already (a fixed view).
func (m *Member) startAgent() {
	if m.invoked() {
		if m.joined {
			return
		}
		m.ag.owner.Store(1)
		m.ag.handedOff = make(chan struct{})
		m.ag.started.Store(true)
		go m.ag.runUntilHandoff()
		return
	}
	m.ag.started.Store(true)
	m.ag.joinPeers()
	go m.ag.run()
}

// invoked reports whether the application runs the agent (DoWork).
func (m *Member) invoked() bool { return m.cfg.Threading == ThreadingInvoked }

// handOver ends Open's agent goroutine (ThreadingInvoked) once the member
// is in the group: from then on DoWork runs the agent. The goroutine stops
// within an iteration (a blocked read is woken), so this does not wait on
// a context.
func (m *Member) handOver() error {
	if !m.invoked() || !m.ag.started.Load() {
		return nil
	}
	m.ag.handoff.Store(true)
	m.wakeAgent()
	select {
	case <-m.ag.handedOff:
		m.ag.started.Store(false) // nothing for abort to wait for
		m.ag.handoff.Store(false) // Close's goroutine runs to the end
		return nil
	case <-m.done:
		return ErrClosed
	}
}

// DoWork runs one iteration of the agent's duty cycle on the calling
// goroutine and returns how much it did (datagrams read, messages sent
// and delivered; 0: idle). It is the agent with ThreadingInvoked and does
// nothing (0) otherwise, once Close began, or while another goroutine is
// in DoWork: call it from one loop. It never blocks and does not allocate;
// in push mode it calls the Handler, so it must not be called from one.
// An idle application applies its own idle strategy between calls (spin,
// runtime.Gosched, a short sleep, WaitWork), calling it at least every
// millisecond or so: timers, failure detection and repairs run only here.
//
// A DoWork writes what was sent before it, the open bundle included,
// except while the application streams: when a datagram's worth or more
// was sent since the last DoWork, the partly filled bundle after it waits
// for the next DoWork (which flushes it if nothing more came), so that
// datagrams go out full; it then counts as work, and WaitWork returns at
// once.
func (m *Member) DoWork() int {
	if !m.invoked() {
		return 0
	}
	work, ok := m.runCycle(true)
	if !ok {
		m.ctr.agentBusy.Add(1)
	}
	return work
}

// runCycle runs one agent cycle if no other goroutine runs the agent (ok
// false: one does); app counts it as the application's (appWorks, which
// only the owner writes).
func (m *Member) runCycle(app bool) (work int, ok bool) {
	a := &m.ag
	if !a.owner.CompareAndSwap(0, 1) {
		return 0, false
	}
	work, _, _ = a.doWork()
	if app {
		a.appWorks.Store(a.appWorks.Load() + 1)
	}
	a.owner.Store(0)
	return work, true
}

// WaitWork blocks the calling goroutine, with ThreadingInvoked, until the
// agent has something to do: a datagram arrived (it is read, for the next
// DoWork), a message was committed to the log buffer, a protocol
// timer is due, Close began, or timeout passed. An application loop calls
// it when DoWork returned 0 instead of spinning or sleeping blindly (the
// IdleBlock of an invoked member). It returns at once in other modes,
// while another goroutine runs the agent, when the last DoWork left a
// bundle open (a TrySendBatch since), or for timeout <= 0.
func (m *Member) WaitWork(timeout time.Duration) {
	a := &m.ag
	if !m.invoked() || timeout <= 0 || !a.owner.CompareAndSwap(0, 1) {
		return
	}
	if a.nread == 0 && !a.unflushed {
		a.block(min(a.deadline, m.now()+timeout))
	}
	a.owner.Store(0)
}

// driving is a blocking call's state across its wait steps (driveOnce):
// the application's DoWork count it last saw, and its timer (made at its
// first wait for the application's loop, reused after).
type driving struct {
	seen uint64
	t    *time.Timer
}

// startDriving returns the state of a blocking call that begins now.
func (m *Member) startDriving() driving { return driving{seen: m.ag.appWorks.Load()} }

// stop releases the call's timer.
func (d *driving) stop() {
	if d.t != nil {
		d.t.Stop()
	}
}

// driveOnce is a blocking call's wait step with ThreadingInvoked. While
// the application's own loop runs the agent (its DoWork ran since the
// call's last step), it waits for that loop's next productive DoWork, at
// most driveWait, instead of taking turns with it: a blocking call that
// took the agent would hold it through its WaitWork, the loop's DoWork
// and TrySendBatch finding it taken meanwhile, and one that found it
// taken would spin. Otherwise it runs one DoWork and, when that found
// nothing to do, a short WaitWork (a yield if another goroutine runs the
// agent).
func (m *Member) driveOnce(d *driving) {
	a := &m.ag
	if n := a.appWorks.Load(); n != d.seen {
		d.seen = n
		m.awaitProgress(d)
		return
	}
	work, ok := m.runCycle(false)
	if !ok {
		runtime.Gosched()
		return
	}
	if work == 0 {
		m.WaitWork(driveWait)
		runtime.Gosched()
	}
}

// awaitProgress waits until the agent next does work (signalDeliverable),
// the member stops, or driveWait passed.
func (m *Member) awaitProgress(d *driving) {
	if d.t == nil {
		d.t = time.NewTimer(driveWait)
	} else {
		d.t.Reset(driveWait)
	}
	m.pollWaiters.Add(1)
	ch := *m.deliverCh.Load()
	select {
	case <-ch:
	case <-d.t.C:
	case <-m.stop:
	}
	d.t.Stop()
	m.pollWaiters.Add(-1)
}

// driveWait bounds a blocking call's WaitWork, so that it looks at its
// own condition (ctx, room in the ring) at least this often.
const driveWait = time.Millisecond

// abort stops a member whose Open failed: no drain, no leave.
func (m *Member) abort() {
	m.stopAgent()
	select {
	case <-m.done:
	default:
		if m.ag.started.Load() {
			<-m.done
		}
	}
	m.tr.Close()
	m.events.close()
}

// Config returns the configuration in force, defaults filled in.
func (m *Member) Config() Config { return m.cfg.config() }

// LocalAddr returns the unicast address this member sends from.
func (m *Member) LocalAddr() netip.AddrPort { return m.tr.LocalAddr() }

// now is the protocol clock: time since Open on the monotonic clock, or
// the simulated clock of a stepped member.
func (m *Member) now() time.Duration {
	if m.step != nil {
		return m.step.Now()
	}
	return time.Since(m.epoch)
}

// TrySend copies payload into the log buffer and returns at once:
// ErrBackPressure when it is full (the agent has not caught up, or the
// protocol's retention window is full until the group has delivered what it
// holds), ErrTooLarge above Config.Tuning.MaxMessage, ErrClosed after Close began.
// It does not allocate; payload may be reused as soon as it returns.
func (m *Member) TrySend(payload []byte) error {
	if m.sendInPlace(payload) {
		return nil
	}
	return m.trySendGeneral(payload)
}

// trySendGeneral is TrySend after its fast path (sendInPlace) declined.
func (m *Member) trySendGeneral(payload []byte) error {
	if len(payload) > m.cfg.MaxMessage {
		return ErrTooLarge
	}
	if m.closing.Load() {
		return ErrClosed
	}
	if !m.q.putSlow(payload) {
		m.ctr.backPressure.Add(1)
		return ErrBackPressure
	}
	return nil
}

// sendInPlace is the fast path of Send and TrySend: a payload of at most
// fastMax bytes (so never ErrTooLarge) written in place into the open
// term, before Close began (false: anything else, for their general path).
func (m *Member) sendInPlace(payload []byte) bool {
	return len(payload) <= m.fastMax && !m.closing.Load() && m.q.putInline(payload)
}

// sendDirect is agent.sendDirect for TrySendBatch: how many of pls were
// taken.
func (m *Member) sendDirect(pls [][]byte) int {
	a := &m.ag
	if !a.owner.CompareAndSwap(0, 1) {
		return 0
	}
	m.lockProto()
	n := a.sendDirect(pls)
	m.unlockProto()
	a.owner.Store(0)
	if n > 0 {
		m.ctr.sentDirect.Add(uint64(n))
	}
	return n
}

// Send is TrySend that waits under back-pressure until there is room, ctx
// ends (its error is returned) or the member closes. It must not be called
// from a Handler, nor, in pull mode, from the only goroutine that calls
// Poll: delivery is what frees room (see Poll).
func (m *Member) Send(ctx context.Context, payload []byte) error {
	if m.sendInPlace(payload) {
		return nil // TrySend's fast path, without its call
	}
	return m.sendGeneral(ctx, payload)
}

// sendGeneral is Send after its fast path declined: a function of its
// own, so that Send's fast path does not set up the frame (and the
// deferred call) that the waits below need.
func (m *Member) sendGeneral(ctx context.Context, payload []byte) error {
	err := m.trySendGeneral(payload)
	if err != ErrBackPressure {
		return err
	}
	m.ctr.backPressureWaits.Add(1)
	if m.invoked() {
		return m.sendInvoked(ctx, payload)
	}
	// Spin briefly: the agent usually frees room within microseconds.
	for range 64 {
		runtime.Gosched()
		if err = m.trySendQuiet(payload); err != ErrBackPressure {
			return err
		}
	}
	// Wait for the agent's token. waiters is raised before the retry and
	// the agent frees slots before it reads waiters, so a poll that the
	// retry missed offers a token.
	m.waiters.Add(1)
	defer m.waiters.Add(-1)
	for {
		if err = m.trySendQuiet(payload); err != ErrBackPressure {
			if m.waiters.Load() > 1 {
				m.offerSpace() // the others try the room that is left
			}
			return err
		}
		select {
		case <-m.space:
		case <-ctx.Done():
			return ctx.Err()
		case <-m.stop:
			return ErrClosed
		}
	}
}

// TrySendBatch is TrySend for several messages, in order: it copies the
// longest prefix of payloads that fits in the log buffer now and
// returns how many it took. The prefix takes one claim and one commit per
// term it fills (plain stores with Config.Agent.ExclusiveSender), where
// TrySend pays both per message. err is
// ErrBackPressure when the ring had room for fewer than all (n may be 0),
// ErrTooLarge when payloads[n] exceeds Config.Tuning.MaxMessage (those before it
// are taken), ErrClosed after Close. The payloads are copied: the caller
// may reuse them at once.
func (m *Member) TrySendBatch(payloads [][]byte) (n int, err error) {
	n, err = m.trySendBatch(payloads)
	if err == ErrBackPressure {
		m.ctr.backPressure.Add(1)
	}
	return n, err
}

func (m *Member) trySendBatch(payloads [][]byte) (int, error) {
	if m.closing.Load() {
		return 0, ErrClosed
	}
	take, tooLarge := payloads, false
	for i, p := range payloads {
		if len(p) > m.cfg.MaxMessage {
			take, tooLarge = payloads[:i], true
			break
		}
	}
	n := 0
	if len(take) > 0 && m.invoked() {
		n = m.sendDirect(take)
	}
	if n < len(take) {
		n += m.q.putBatch(take[n:])
	}
	switch {
	case n < len(take):
		return n, ErrBackPressure
	case tooLarge:
		return n, ErrTooLarge
	}
	return n, nil
}

// SendBatch sends every payload, in order, waiting under back-pressure
// like Send (TrySendBatch for each prefix that fits). It returns how many
// were sent: all of them with a nil error, or those before an error
// (ErrTooLarge for payloads[n], ctx's error, ErrClosed).
func (m *Member) SendBatch(ctx context.Context, payloads [][]byte) (int, error) {
	sent := 0
	for {
		n, err := m.trySendBatch(payloads[sent:])
		sent += n
		if err != ErrBackPressure {
			return sent, err
		}
		if err := m.awaitSpace(ctx); err != nil {
			return sent, err
		}
	}
}

// awaitSpace waits until the log buffer has room (or ctx ends, or
// the member closes), as Send does: a short spin, then the agent's token.
func (m *Member) awaitSpace(ctx context.Context) error {
	m.ctr.backPressureWaits.Add(1)
	if m.invoked() {
		return m.drive(ctx, m.q.hasRoom)
	}
	for range 64 {
		runtime.Gosched()
		if m.q.hasRoom() {
			return nil
		}
	}
	m.waiters.Add(1)
	defer m.waiters.Add(-1)
	for {
		if m.q.hasRoom() {
			if m.waiters.Load() > 1 {
				m.offerSpace() // the others try the room that is left
			}
			return nil
		}
		select {
		case <-m.space:
		case <-ctx.Done():
			return ctx.Err()
		case <-m.stop:
			return ErrClosed
		}
	}
}

// sendInvoked is Send's wait with ThreadingInvoked: the agent runs
// (DoWork) on this goroutine until the message is taken.
func (m *Member) sendInvoked(ctx context.Context, payload []byte) error {
	var err error
	derr := m.drive(ctx, func() bool {
		err = m.trySendQuiet(payload)
		return err != ErrBackPressure
	})
	if derr != nil {
		return derr
	}
	return err
}

// drive is a blocking call's wait with ThreadingInvoked: DoWork (or a
// yield) until done reports true, ctx ends (its error) or the member
// closes (ErrClosed).
func (m *Member) drive(ctx context.Context, done func() bool) error {
	d := m.startDriving()
	defer d.stop()
	for !done() {
		if err := ctx.Err(); err != nil {
			return err
		}
		select {
		case <-m.stop:
			return ErrClosed
		default:
		}
		m.driveOnce(&d)
	}
	return nil
}

func (m *Member) trySendQuiet(payload []byte) error {
	if m.closing.Load() {
		return ErrClosed
	}
	if !m.q.put(payload) {
		return ErrBackPressure
	}
	return nil
}

// signalSpace wakes a Send waiting for room (agent side, after a poll
// freed slots). It waits until half the ring is free: a waiter woken for
// every poll refilled what one poll freed (a thousand slots) and parked
// again, and each wake-up handed it the agent's processor while the agent
// was in its sendmmsg system call; the agent then waited for a processor
// (on a veth bridge, 13% of its time).
func (m *Member) signalSpace() {
	if m.waiters.Load() == 0 || 2*m.q.freeTerms() < int(m.q.nterms)-1 {
		return
	}
	m.offerSpace()
}

// offerSpace puts the wake-up token, unless one is already there.
func (m *Member) offerSpace() {
	select {
	case m.space <- struct{}{}:
	default:
	}
}

// Claim is a message being written in place in the log buffer: write
// the payload into Buf, then call Commit (or Abort) exactly once. Between
// TryClaim and Commit nothing blocks, and the agent cannot hand later
// messages to the protocol until this one is committed: keep the window
// short.
type Claim struct {
	// Buf is the message's payload, of the length asked for.
	Buf  []byte
	m    *Member
	t    *logTerm
	idx  int32 // the message's index in its term
	need int32 // its bytes in the term
}

// TryClaim reserves the next message of n bytes in the log buffer and
// returns its payload area to be written in place (Aeron's tryClaim): it
// saves the caller's copy. It returns ErrBackPressure at once when the log
// buffer is full. A term of in-place messages goes out as written; a
// message above Tuning.InlineSize is written out of line and copied once
// into its datagram.
func (m *Member) TryClaim(n int) (Claim, error) {
	if n < 0 || n > m.cfg.MaxMessage {
		return Claim{}, ErrTooLarge
	}
	if m.closing.Load() {
		return Claim{}, ErrClosed
	}
	need := m.q.entrySize(n)
	t, off, idx, ok := m.q.claim(need, 1)
	if !ok {
		m.ctr.backPressure.Add(1)
		return Claim{}, ErrBackPressure
	}
	return Claim{Buf: m.q.place(t, off, idx, n), m: m, t: t, idx: int32(idx), need: int32(need)}, nil
}

// Commit publishes the claimed message.
func (c Claim) Commit() { c.m.q.commit(c.t, int(c.idx), 1, int(c.need)) }

// Abort publishes nothing for the claim: the agent skips it (no protocol
// seqno is used).
func (c Claim) Abort() { c.m.q.abort(c.t, int(c.idx), int(c.need), c.Buf) }

// Poll delivers up to limit messages (and lost-range reports) to h on the
// calling goroutine, in pull mode (Config.Handler nil), and returns how many
// it delivered. It does not block waiting for messages and does not
// allocate; the payload is valid only during the call. It reads the
// delivery ring the agent fills (at most an eighth of Tuning.Window
// messages, and 2 MiB, ahead of the application) and takes no lock:
// one goroutine polls at a time, and a Poll called while another is in
// progress (or once Close began) returns 0 at once. h may call TrySend.
//
// Stability waits for every member to deliver, so an application that stops
// polling eventually back-pressures every sender, itself included. The
// pattern that cannot deadlock on one goroutine is a loop of TrySend and
// Poll: when TrySend returns ErrBackPressure, Poll (which frees room) and
// try again; never block in Send on the goroutine that polls.
func (m *Member) Poll(h Handler, limit int) int {
	d := m.ag.dlv
	if d == nil || limit <= 0 || m.closing.Load() || !d.busy.CompareAndSwap(false, true) {
		return 0
	}
	n := d.poll(h, limit, m.wakeAgent)
	d.busy.Store(false)
	if n > 0 {
		m.ctr.delivered.Add(uint64(n))
		if m.pollWaiters.Load() > 0 && d.r.Len() > 0 {
			m.signalDeliverable() // a Receive that found this Poll in progress
		}
	}
	return n
}

// Close stops sending, waits until everything this member sent is stable
// (delivered by every member of the view), ctx ends or
// Config.Tuning.DrainTimeout passes (default 5 s), then, with dynamic
// membership, leaves the group gracefully (the coordinator installs a view
// without this member; bounded by Config.Membership.LeaveTimeout and ctx), stops the
// agent and releases the sockets: it returns within DrainTimeout (plus
// LeaveTimeout with dynamic membership) whatever ctx. In pull mode,
// messages not yet polled when Close is called are discarded so that
// stability can progress. It returns an error wrapping ctx's error, or
// ErrDrainTimeout, when the drain was cut short, naming each sender whose
// messages were not stable (the others then exclude this member by
// failure detection); the member is closed either way. Calling Close again returns the first result. It must not be
// called from a Handler (nor, with ThreadingInvoked, from inside DoWork):
// it waits for the agent, which is running the Handler.
func (m *Member) Close(ctx context.Context) error {
	m.closeOnce.Do(func() {
		bound := m.cfg.DrainTimeout
		if m.dynamic() {
			bound += m.cfg.LeaveTimeout
		}
		ctx, cancel := context.WithTimeoutCause(ctx, bound, fmt.Errorf("%w (Config.Tuning.DrainTimeout %v)", ErrDrainTimeout, m.cfg.DrainTimeout))
		defer cancel()
		m.drainCtx.Store(ctxHolder{ctx})
		m.closing.Store(true)
		if m.invoked() {
			// Take the agent from the application for good (waiting out
			// a DoWork in progress) and drain on a goroutine of our own.
			for !m.ag.owner.CompareAndSwap(0, 1) {
				runtime.Gosched()
			}
			m.ag.started.Store(true)
			go m.ag.run()
		}
		m.wakeAgent()
		select {
		case <-m.done:
		case <-ctx.Done():
		}
		m.stopAgent() // also releases Send calls still waiting for room
		<-m.done
		if d := m.ag.dlv; d != nil {
			m.ctr.discardedOnClose.Add(d.discard())
		}
		err := m.tr.Close()
		if errors.Is(err, transport.ErrClosed) {
			err = nil
		}
		if !m.drained.Load() {
			m.closeErr = fmt.Errorf("close %v: drain incomplete%s: %w", m.Self(), m.undrained(), context.Cause(ctx))
			if ctx.Err() == nil {
				m.closeErr = fmt.Errorf("close %v: drain incomplete: %w", m.Self(), ErrClosed)
			}
		} else if err != nil {
			m.closeErr = fmt.Errorf("close %v: %w", m.Self(), err)
		}
		m.events.close()
		m.log.l.Debug("member closed", "drained", m.drained.Load())
	})
	return m.closeErr
}

type ctxHolder struct{ context.Context }

// undrained names, for Close's error, each sender whose messages this
// member holds but are not stable (the agent has stopped): " (not stable:
// SENDER seqnos LOW+1..RECEIVED, ...)", or "" when none is known.
func (m *Member) undrained() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.proto
	if p == nil {
		p = m.lastProto
	}
	if p == nil {
		return ""
	}
	var b strings.Builder
	for _, e := range p.Digest().Entries() {
		if e.Low < e.Received {
			if b.Len() == 0 {
				b.WriteString(" (not stable:")
			} else {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %v seqnos %d..%d", e.Member, e.Low+1, e.Received)
		}
	}
	if b.Len() > 0 {
		b.WriteString(")")
	}
	return b.String()
}

func (m *Member) stopAgent() {
	m.stopOnce.Do(func() {
		close(m.stop)
		m.wakeAgent()
	})
}

// wakeAgent interrupts a blocked read: a deadline in the past makes it
// return at once.
func (m *Member) wakeAgent() {
	_ = m.tr.SetReadDeadline(pastDeadline)
}

var pastDeadline = time.Unix(1, 0)

// wakeSender wakes the sender goroutine of ThreadingDedicated (producers'
// wake-up when it is parked).
func (m *Member) wakeSender() { m.ag.signalSender() }

// coordStableInterval caps the coordinator's STABLE interval (see
// Member.newProtocol).
const coordStableInterval = time.Millisecond
