package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/gms"
	"github.com/nakcast/nakcast/nakack"
)

// This file is the glue between the agent and membership: the membership
// state machine (gms for dynamic membership, a fixed-view gms.Fixed for a
// static member list: one path through the agent either way), the
// protocol factory (a fresh nakack per incarnation), the listener that
// turns membership events into engine events and Open's join and
// state-transfer waits. Membership decides; the engine only routes
// datagrams, drives its timers and sends its outbox.

// membership is what the agent drives: a *gms.GMS, or a *gms.Fixed for
// static membership.
type membership interface {
	Join(now time.Duration) error
	Leave(now time.Duration) error
	RequestState(now time.Duration) error
	Receive(b []byte, now time.Duration) error
	Tick(now time.Duration)
	NextDeadline() time.Duration
	Outbox() []gms.Outgoing
	ClearOutbox()
	Status() gms.Status
	Stats() gms.Stats
}

// dynamic reports whether membership is dynamic (gms), not a fixed view.
func (m *Member) dynamic() bool { return m.cfg.Members == nil }

// newMembership creates the membership state machine for m: gms, or a
// fixed view of Config.Membership.Members whose departure lingers closeLingerRounds
// stability intervals (see gms.Fixed).
func (m *Member) newMembership() (membership, error) {
	if m.dynamic() {
		return m.newGMS()
	}
	v := gms.View{ID: digest.ViewID{Coord: m.cfg.Members[0], Counter: 1}}
	for _, id := range m.cfg.Members {
		v.Members = append(v.Members, gms.Peer{Member: id})
	}
	return gms.NewFixed(gms.FixedConfig{Self: m.cfg.Self, View: v, NewProtocol: m.newProtocol,
		Listener: (*listener)(m), Linger: closeLingerRounds * m.cfg.StableInterval})
}

// newGMS creates the dynamic membership state machine for m.
func (m *Member) newGMS() (*gms.GMS, error) {
	cfg := &m.cfg
	var hosts []string
	for _, h := range cfg.InitialHosts {
		hosts = append(hosts, h.String())
	}
	gc := gms.Config{
		Group:             cfg.GroupID,
		ID:                cfg.Self.ID,
		Addr:              m.tr.LocalAddr().String(),
		Seed:              m.membershipSeed(),
		NewProtocol:       m.newProtocol,
		Listener:          (*listener)(m),
		Logger:            cfg.Logger,
		InitialHosts:      hosts,
		CreateGroup:       true,
		DiscoveryTimeout:  cfg.DiscoveryTimeout,
		DiscoveryRounds:   cfg.DiscoveryRounds,
		MaxJoinAttempts:   cfg.JoinAttempts,
		HeartbeatInterval: cfg.HeartbeatInterval,
		SuspectTimeout:    cfg.SuspectTimeout,
		ProbeTimeout:      cfg.ProbeTimeout,
		ProbeAttempts:     cfg.ProbeAttempts,
		LeaveTimeout:      cfg.LeaveTimeout,
		LagLimit:          uint64(cfg.LagLimit),
		LagTimeout:        cfg.LagTimeout,
		LagExclude:        cfg.ExcludeLaggards,
	}
	if cfg.GetState != nil || cfg.SetState != nil {
		gc.App = stateApp{m}
	}
	return gms.New(gc)
}

// newNakack creates the protocol for one incarnation.
func (m *Member) newNakack(self digest.Member, stableIval time.Duration) (*nakack.Protocol, error) {
	cfg := &m.cfg
	return nakack.New(nakack.Config{
		Self:           self,
		Group:          cfg.GroupID,
		Pool:           m.pool,
		MaxDatagram:    m.protoDatagram(),
		MaxBundle:      bundleMessages,
		SendWindow:     cfg.Window,
		RecvWindow:     2 * cfg.Window, // slack for a receiver that missed a STABILITY (purges late): fewer Full drops and repairs
		MaxMessage:     cfg.MaxMessage,
		NakDelay:       cfg.NakDelay,
		NakInterval:    cfg.NakInterval,
		NakMaxInterval: cfg.NakMaxInterval,
		UnicastNaks:    cfg.UnicastNaks,
		DiscardOwn:     cfg.DiscardOwn,
		StableInterval: stableIval,
		StableBytes:    int64(cfg.StableBytes),
		Seed:           self.ID ^ uint64(self.Inc)<<32,
		Logger:         cfg.Logger,
		RepairBurst:    repairBurst(cfg, m.protoDatagram()),
		InFlightBytes:  max(cfg.InFlightBytes, 0), // -1: no limit
		RateLimit:      cfg.RateLimit,
		LagInterval:    lagCheckInterval,
		LagThreshold:   cfg.Window / 2,
		// With a key every datagram's tag proves its sender (a member:
		// whoever holds the group key is one), so a MSG_NOT_FOUND is acted
		// on without the open mode's challenge round trip.
		Authenticated: m.sec != nil,
		OnLost:        m.lostRange,
	})
}

// lostRange counts a lost range the protocol reports and queues it as an
// EventLost (nakack's OnLost), before the handler's Lost is called.
func (m *Member) lostRange(sender digest.Member, from, to uint64) {
	m.ctr.lostRanges.Add(1)
	m.events.push(Event{Kind: EventLost, Sender: sender, From: from, To: to})
}

// repairBurst is the repair credit a requester starts with (nakack
// RepairBurst): what flow control lets a sender have in flight, the most a
// receiver can lose in one go (its socket overflowing), so that a burst of
// loss is repaired in one round; at least nakack's default of 64
// datagrams.
func repairBurst(cfg *settings, datagram int) int {
	return max(cfg.InFlightBytes, 64*datagram)
}

// newProtocol is gms's Config.NewProtocol: a fresh nakack for the
// incarnation self (its seqnos restart at 1). Called by the agent under the
// lock, inside a membership entry point. The coordinator of its first view
// gets a short STABLE interval: its own STABLE is a local fold (no
// datagram), and a round completes only once it is in, so a round ends as
// soon as the last member's STABLE arrives instead of at the coordinator's
// next StableInterval tick, which would stall a sender whose window is
// full; it costs the coordinator one fold per millisecond. That is the
// first of a fixed view, and a dynamic group's founder: a protocol created
// during gms's Tick (gms founds a group from its join timer; a JoinRsp
// arrives in Receive). A member that becomes coordinator later (the
// coordinator left or failed) keeps StableInterval.
func (m *Member) newProtocol(self digest.Member, now time.Duration) (gms.Protocol, error) {
	a := &m.ag
	m.dropProtocol()
	ival := m.cfg.StableInterval
	if a.inTick || (!m.dynamic() && self == m.cfg.Members[0]) {
		ival = min(ival, coordStableInterval)
	}
	p, err := m.newNakack(self, ival)
	if err != nil {
		return nil, err
	}
	m.proto = p
	m.selfV.Store(self)
	m.followSelfFilter(self)
	a.newIncarnation(self)
	return &gms.NakackProtocol{P: p}, nil
}

// dropProtocol forgets the current incarnation's protocol (an exclusion,
// a leave, or a rejoin replacing it) and returns every buffer it holds to
// the pool: what it queued to send and what its windows retain (Close), so
// that the old incarnation's messages stop counting against
// Config.Tuning.PoolBytes. It stays as lastProto for Stats (counters and window
// numbers only).
func (m *Member) dropProtocol() {
	p := m.proto
	if p == nil {
		return
	}
	p.Close()
	m.proto = nil
	m.lastProto = p
	if m.droppedHook != nil {
		m.droppedHook(p)
	}
}

// routeView installs v's addresses in the routing table (an address that
// does not parse, or that the transport may not send to, leaves its member
// unreachable and unheard) and forgets the departed members whose windows
// the protocol closed.
func (a *agent) routeView(v gms.View) {
	peers := make(map[digest.Member]netip.AddrPort, len(v.Members))
	for _, p := range v.Members {
		if ap, err := netip.ParseAddrPort(p.Addr); err == nil && a.unicastOK(ap) {
			peers[p.Member] = ap
		}
	}
	a.routes.setView(peers)
	a.pruneRoutes()
}

// pruneRoutes forgets departed members whose windows the protocol closed
// (dynamic membership; called on views and every lag check).
func (a *agent) pruneRoutes() {
	p := a.m.proto
	a.routes.pruneDeparted(func(mem digest.Member) bool {
		if p == nil {
			return false
		}
		_, ok := p.WindowState(mem)
		return ok
	})
}

// listener receives gms events on the agent goroutine, under the lock.
type listener Member

// ViewInstalled implements gms.Listener.
func (l *listener) ViewInstalled(v gms.View) {
	m := (*Member)(l)
	a := &m.ag
	m.view = v
	m.viewPub.Store(&publishedView{id: v.ID, members: v.IDs()})
	a.viewSize = len(v.Members)
	if m.dynamic() {
		a.routeView(v) // a fixed view's routes are static (Open)
	}
	m.events.push(Event{Kind: EventView, View: v.ID, Members: v.IDs()})
	m.log.l.Debug("view installed", "view", v.String())
	if !m.joined {
		m.joined = true
		m.joinCh <- nil
	}
}

// Left implements gms.Listener.
func (l *listener) Left(err error) {
	m := (*Member)(l)
	a := &m.ag
	m.dropProtocol()
	m.view = gms.View{}
	m.viewPub.Store(nil)
	a.left = true
	m.events.push(Event{Kind: EventLeft, Err: err})
	if !m.joined {
		if err == nil {
			err = errors.New("left before joining")
		}
		m.joinCh <- err
		return
	}
	if errors.Is(err, gms.ErrExcluded) && !m.closing.Load() {
		// A false suspicion or a partition: rejoin as a new incarnation
		// (messages still in the ring go out under it).
		m.log.l.Warn("excluded from the group: rejoining", "self", m.Self())
		a.rejoin = true
		a.refetch = m.cfg.FetchState
		if a.refetch && a.dlv != nil {
			a.dlv.supersede() // the state fetched after the rejoin covers them
		}
	}
}

// Lagging implements gms.LagListener: mem, a member of the view (this
// one too), lags behind the group by lag messages; once per episode.
func (l *listener) Lagging(mem digest.Member, lag uint64) {
	m := (*Member)(l)
	m.events.push(Event{Kind: EventPeerLagging, Sender: mem, From: lag, View: m.view.ID})
}

// refetchState asks for the application state again once a member that
// was excluded (Config.Membership.FetchState) is back in a view with
// others: what it had not delivered when it was excluded is gone, and
// the state covers it (called after membership entry points).
func (a *agent) refetchState(now time.Duration) {
	m := a.m
	if !a.refetch || m.g.Status() != gms.StatusMember {
		return
	}
	a.refetch = false
	if len(m.view.Members) > 1 {
		if err := m.g.RequestState(now); err != nil {
			m.log.l.Warn("state transfer after rejoining", "err", err)
		}
	}
}

// Suspected implements gms.Listener: this member suspects mem, a member of
// the installed view (gms calls it before acting on the suspicion, so the
// view is the one the suspect is in; the view that excludes it follows).
func (l *listener) Suspected(mem digest.Member) {
	m := (*Member)(l)
	m.ctr.suspicions.Add(1)
	m.events.push(Event{Kind: EventSuspect, Sender: mem, View: m.view.ID})
}

// Unsuspected implements gms.Listener: this member withdraws its suspicion
// of mem, heard from again while still a member of the installed view.
func (l *listener) Unsuspected(mem digest.Member) {
	m := (*Member)(l)
	m.ctr.unsuspicions.Add(1)
	m.events.push(Event{Kind: EventUnsuspect, Sender: mem, View: m.view.ID})
}

// StateInstalled implements gms.Listener.
func (l *listener) StateInstalled(err error) {
	m := (*Member)(l)
	m.events.push(Event{Kind: EventState, Err: err})
	select {
	case m.stateCh <- err:
	default:
	}
}

// stateApp adapts Config.Membership.GetState/SetState to gms.StateApp.
type stateApp struct{ m *Member }

// State implements gms.StateApp.
func (s stateApp) State() ([]byte, error) {
	if s.m.cfg.GetState == nil {
		return nil, errors.New("engine: no Config.Membership.GetState")
	}
	var b bytes.Buffer
	if err := s.m.cfg.GetState(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// SetState implements gms.StateApp.
func (s stateApp) SetState(b []byte) error {
	if s.m.cfg.SetState == nil {
		return errors.New("engine: no Config.Membership.SetState")
	}
	return s.m.cfg.SetState(bytes.NewReader(b))
}

// join starts the agent and waits until the join's view and digest are
// installed (and, with FetchState, the state), ctx ends or the join gives
// up. A fixed view is installed by Join itself.
func (m *Member) join(ctx context.Context) error {
	m.lockProto()
	err := m.g.Join(m.now())
	m.unlockProto()
	if err != nil {
		return err
	}
	m.startAgent()
	select {
	case err = <-m.joinCh:
		if err != nil {
			return fmt.Errorf("%w: %w", ErrJoinFailed, err)
		}
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrJoinFailed, context.Cause(ctx))
	case <-m.done:
		return fmt.Errorf("%w: agent stopped", ErrJoinFailed)
	}
	if !m.cfg.FetchState {
		return nil
	}
	m.lockProto()
	if len(m.view.Members) < 2 {
		m.unlockProto()
		return nil // the founder: nobody to ask
	}
	err = m.g.RequestState(m.now())
	m.unlockProto()
	m.wakeAgent()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStateTransfer, err)
	}
	select {
	case err = <-m.stateCh:
		if err != nil {
			return fmt.Errorf("%w: %w", ErrStateTransfer, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrStateTransfer, context.Cause(ctx))
	}
}

// View returns the installed view: its id and members, coordinator first
// (the static view with static membership; the zero id and nil between an
// exclusion and the rejoin, and after Close).
func (m *Member) View() (digest.ViewID, []digest.Member) {
	v := m.viewPub.Load()
	if v == nil {
		return digest.ViewID{}, nil
	}
	return v.id, slices.Clone(v.members)
}

// publishedView is the installed view as View returns it, published by
// the agent on every view change (viewPub).
type publishedView struct {
	id      digest.ViewID
	members []digest.Member
}
