package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/gms"
	"github.com/nakcast/nakcast/nakack"
)

// This file is the glue between the agent and gms (dynamic membership):
// the gms configuration, the protocol factory (a fresh nakack per
// incarnation), the listener that turns gms events into engine events and
// Open's join and state-transfer waits. gms decides; the engine only
// routes datagrams, drives its timers and sends its outbox.

// newGMS creates the membership state machine for m.
func (m *Member) newGMS() (*gms.GMS, error) {
	cfg := m.cfg
	var hosts []string
	for _, h := range cfg.InitialHosts {
		hosts = append(hosts, h.String())
	}
	gc := gms.Config{
		Group:             cfg.GroupID,
		ID:                cfg.Self.ID,
		Addr:              m.tr.LocalAddr().String(),
		Seed:              rand.Uint64(),
		NewProtocol:       m.newProtocol,
		Listener:          (*listener)(m),
		Logger:            cfg.Logger,
		InitialHosts:      hosts,
		CreateGroup:       true,
		DiscoveryTimeout:  cfg.DiscoveryTimeout,
		MaxJoinAttempts:   cfg.JoinAttempts,
		HeartbeatInterval: cfg.HeartbeatInterval,
		SuspectTimeout:    cfg.SuspectTimeout,
		ProbeTimeout:      cfg.ProbeTimeout,
		LeaveTimeout:      cfg.LeaveTimeout,
	}
	if cfg.GetState != nil || cfg.SetState != nil {
		gc.App = stateApp{m}
	}
	return gms.New(gc)
}

// newNakack creates the protocol for one incarnation.
func (m *Member) newNakack(self digest.Member, stableIval time.Duration) (*nakack.Protocol, error) {
	cfg := m.cfg
	return nakack.New(nakack.Config{
		Self:           self,
		Group:          cfg.GroupID,
		Pool:           m.pool,
		MaxDatagram:    cfg.BundleBytes,
		SendWindow:     cfg.Window,
		RecvWindow:     2 * cfg.Window, // slack for a receiver that missed a STABILITY (purges late): fewer Full drops and repairs
		MaxMessage:     cfg.MaxMessage,
		NakDelay:       cfg.NakDelay,
		NakInterval:    cfg.NakInterval,
		NakMaxInterval: cfg.NakMaxInterval,
		UnicastNaks:    cfg.UnicastNaks,
		StableInterval: stableIval,
		StableBytes:    int64(cfg.StableBytes),
		Seed:           cfg.LossSeed ^ self.ID ^ uint64(self.Inc)<<32,
		Logger:         cfg.Logger,
	})
}

// newProtocol is gms's Config.NewProtocol: a fresh nakack for the
// incarnation self (its seqnos restart at 1). Called by the agent under the
// lock, inside a gms entry point. A protocol created during Tick is the
// founder's (gms founds a group from its join timer; a JoinRsp arrives in
// Receive): the founder coordinates, and gets the coordinator's short
// STABLE interval (see Open). A member that becomes coordinator later (the
// coordinator left or failed) keeps StableInterval.
func (m *Member) newProtocol(self digest.Member, now time.Duration) (gms.Protocol, error) {
	a := &m.ag
	m.dropProtocol()
	ival := m.cfg.StableInterval
	if a.inTick {
		ival = min(ival, coordStableInterval)
	}
	p, err := m.newNakack(self, ival)
	if err != nil {
		return nil, err
	}
	m.proto = p
	m.selfV.Store(self)
	a.newIncarnation(self)
	return &gms.NakackProtocol{P: p}, nil
}

// dropProtocol forgets the current incarnation's protocol, releasing what
// it queued to send. (What its windows retain is left to the garbage
// collector: nakack has no call that releases every buffer, so the pool's
// budget keeps counting it.)
func (m *Member) dropProtocol() {
	p := m.proto
	if p == nil {
		return
	}
	for _, o := range p.Outbox() {
		o.Buf.Release()
	}
	p.ClearOutbox()
	m.proto = nil
	m.lastProto = p
}

// listener receives gms events on the agent goroutine, under the lock.
type listener Member

// ViewInstalled implements gms.Listener.
func (l *listener) ViewInstalled(v gms.View) {
	m := (*Member)(l)
	a := &m.ag
	now := m.now()
	// A view that excludes a suspect is installed by the same entry point
	// that suspected it: name suspects against the view they were in.
	a.checkSuspicions(now)
	m.view = v
	a.viewSize = len(v.Members)
	self := m.Self()
	for _, p := range v.Members {
		if p.Member == self {
			continue
		}
		if ap, err := netip.ParseAddrPort(p.Addr); err == nil {
			a.addrs[p.Member] = ap
		}
	}
	for mem := range a.heardAt {
		if !v.Contains(mem) {
			delete(a.heardAt, mem)
			delete(a.suspected, mem)
		}
	}
	for _, p := range v.Members {
		if _, ok := a.heardAt[p.Member]; !ok {
			a.heardAt[p.Member] = now
		}
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
	}
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

// stateApp adapts Config.GetState/SetState to gms.StateApp.
type stateApp struct{ m *Member }

// State implements gms.StateApp.
func (s stateApp) State() ([]byte, error) {
	if s.m.cfg.GetState == nil {
		return nil, errors.New("engine: no Config.GetState")
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
		return errors.New("engine: no Config.SetState")
	}
	return s.m.cfg.SetState(bytes.NewReader(b))
}

// join starts the agent on a gms member and waits until the join's view
// and digest are installed (and, with FetchState, the state), ctx ends or
// the join gives up.
func (m *Member) join(ctx context.Context) error {
	m.mu.Lock()
	err := m.g.Join(m.now())
	m.mu.Unlock()
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
	m.mu.Lock()
	if len(m.view.Members) < 2 {
		m.mu.Unlock()
		return nil // the founder: nobody to ask
	}
	err = m.g.RequestState(m.now())
	m.mu.Unlock()
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
// exclusion and the rejoin).
func (m *Member) View() (digest.ViewID, []digest.Member) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.g == nil {
		return m.proto.View().ID, append([]digest.Member(nil), m.proto.View().Members...)
	}
	return m.view.ID, m.view.IDs()
}

// heard notes a membership datagram from sender (for naming suspects).
func (a *agent) heard(sender digest.Member, now time.Duration) {
	if _, ok := a.heardAt[sender]; ok || len(a.heardAt) < 4*a.viewSize+64 {
		a.heardAt[sender] = now
	}
}

// checkSuspicions reports new suspicions as EventSuspect. gms counts them
// but does not name the suspect to its driver, so the engine names the
// members of the view it has not heard from (membership datagrams:
// heartbeats, probes' answers) for SuspectTimeout; a suspicion it cannot
// attribute is reported with a zero Sender.
func (a *agent) checkSuspicions(now time.Duration) {
	m := a.m
	n := m.g.Stats().Suspicions
	if n == a.suspicions {
		return
	}
	newS := int(n - a.suspicions)
	a.suspicions = n
	self := m.Self()
	for _, p := range m.view.Members {
		if newS == 0 {
			break
		}
		if p.Member == self || a.suspected[p.Member] {
			continue
		}
		if at, ok := a.heardAt[p.Member]; !ok || now-at >= m.cfg.SuspectTimeout {
			a.suspected[p.Member] = true
			newS--
			m.ctr.suspicions.Add(1)
			m.events.push(Event{Kind: EventSuspect, Sender: p.Member, View: m.view.ID})
		}
	}
	for ; newS > 0; newS-- {
		m.ctr.suspicions.Add(1)
		m.events.push(Event{Kind: EventSuspect, View: m.view.ID})
	}
}
