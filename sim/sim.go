package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nakcast/nakcast/digest"
)

// maxSameTimeTicks is how many times a node may be ticked at one virtual
// instant before the simulator declares it spinning (a deadline that never
// moves past now would otherwise hang the run).
const maxSameTimeTicks = 1000

// netStream separates the network's random draws from those
// handed out by NewRand, so that adding a traffic generator does not change
// which datagrams the network drops.
const netStream = 0x6e616b63617374 // "nakcast"

// Sim is one deterministic simulation: a virtual clock, an event queue, a
// virtual network and the nodes on it. Everything happens on the goroutine
// that calls Step or Run; Sim is not safe for concurrent use.
type Sim struct {
	seed  uint64
	now   time.Duration
	q     eventQueue
	rng   *rand.Rand
	net   NetConfig
	links map[linkKey]Link
	block map[linkKey]Blocked

	nodes    []*nodeState
	byMember map[digest.Member]int32

	part      *partition
	partSeq   uint64
	taps      []func(TapEvent)
	checks    []func(now time.Duration) error
	err       error
	steps     uint64
	stats     NetStats
	sendFrom  int32 // node being drained, for the send callback
	sendFn    func(to digest.Member, datagram []byte)
	streamSeq uint64
}

// New returns a simulation at virtual time 0 whose every random choice
// derives from seed.
func New(seed uint64, cfg NetConfig) *Sim {
	if cfg.Latency == 0 {
		cfg.Latency = DefaultLatency
	}
	if cfg.ReorderDelay == 0 {
		cfg.ReorderDelay = 10 * cfg.Latency
	}
	s := &Sim{
		seed:     seed,
		rng:      rand.New(rand.NewPCG(seed, netStream)),
		net:      cfg,
		byMember: make(map[digest.Member]int32),
	}
	s.sendFn = s.send
	return s
}

// Seed returns the seed the simulation was created with.
func (s *Sim) Seed() uint64 { return s.seed }

// Now returns the current virtual time.
func (s *Sim) Now() time.Duration { return s.now }

// Steps returns how many events have been processed.
func (s *Sim) Steps() uint64 { return s.steps }

// NetStats returns what the virtual network has done so far.
func (s *Sim) NetStats() NetStats { return s.stats }

// Net returns the network configuration in force.
func (s *Sim) Net() NetConfig { return s.net }

// SetNet replaces the network configuration from now on (for example to
// stop loss so that a run can settle). Zero Latency and ReorderDelay take
// their defaults as in New.
func (s *Sim) SetNet(cfg NetConfig) {
	if cfg.Latency == 0 {
		cfg.Latency = DefaultLatency
	}
	if cfg.ReorderDelay == 0 {
		cfg.ReorderDelay = 10 * cfg.Latency
	}
	s.net = cfg
}

// NewRand returns a random source derived from the seed, independent of the
// network's and of every other NewRand source. Sources are numbered in call
// order, so the same calls in the same order give the same sources.
func (s *Sim) NewRand() *rand.Rand {
	s.streamSeq++
	return rand.New(rand.NewPCG(s.seed, s.streamSeq))
}

// AddNode puts n on the network and schedules its first timer. It fails if a
// node with the same Member is already present.
func (s *Sim) AddNode(n Node) error {
	m := n.Member()
	if m.IsZero() {
		return errors.New("sim: node with zero member")
	}
	if _, ok := s.byMember[m]; ok {
		return fmt.Errorf("sim: node %v already present", m)
	}
	idx := int32(len(s.nodes))
	s.nodes = append(s.nodes, &nodeState{node: n, member: m, up: true, timerAt: Never, lastTick: -1})
	s.byMember[m] = idx
	s.flush(idx)
	return nil
}

// Node returns the node for m, or nil.
func (s *Sim) Node(m digest.Member) Node {
	if i, ok := s.byMember[m]; ok {
		return s.nodes[i].node
	}
	return nil
}

// Up reports whether m is present and has not crashed.
func (s *Sim) Up(m digest.Member) bool {
	i, ok := s.byMember[m]
	return ok && s.nodes[i].up
}

// Crash stops m at the current virtual time: it is no longer ticked, its
// scheduled actions do not run, and datagrams in flight to it are dropped.
func (s *Sim) Crash(m digest.Member) {
	if i, ok := s.byMember[m]; ok {
		st := s.nodes[i]
		st.up = false
		st.gen++
		st.timerAt = Never
	}
}

// linkOf returns the key of the directed link from→to.
func (s *Sim) linkOf(from, to digest.Member) (linkKey, error) {
	fi, ok1 := s.byMember[from]
	ti, ok2 := s.byMember[to]
	if !ok1 || !ok2 {
		return linkKey{}, fmt.Errorf("sim: link %v->%v: unknown member", from, to)
	}
	return linkKey{fi, ti}, nil
}

// SetLink overrides latency and jitter of the directed link from→to.
func (s *Sim) SetLink(from, to digest.Member, l Link) error {
	k, err := s.linkOf(from, to)
	if err != nil {
		return err
	}
	if s.links == nil {
		s.links = make(map[linkKey]Link)
	}
	s.links[k] = l
	return nil
}

// ResetLink drops SetLink's override of the directed link from→to: it
// takes NetConfig's latency and jitter again.
func (s *Sim) ResetLink(from, to digest.Member) {
	if k, err := s.linkOf(from, to); err == nil {
		delete(s.links, k)
	}
}

// Block makes the directed link from→to drop, from now on, the datagrams
// of the kinds in what (BlockMulticast, BlockUnicast or both; 0 lifts it):
// one-way outages, such as a member whose multicast does not reach the
// others while it hears theirs.
func (s *Sim) Block(from, to digest.Member, what Blocked) error {
	k, err := s.linkOf(from, to)
	if err != nil {
		return err
	}
	if s.block == nil {
		s.block = make(map[linkKey]Blocked)
	}
	if what == 0 {
		delete(s.block, k)
		return nil
	}
	s.block[k] = what
	return nil
}

// Partition splits the network from virtual time at until heal: members in
// different groups cannot reach each other; members named in no group form
// one more group together. A later Partition replaces an earlier one; the
// heal of a replaced partition does nothing. heal <= at means never.
func (s *Sim) Partition(at, heal time.Duration, groups ...[]digest.Member) {
	s.partSeq++
	p := &partition{id: s.partSeq, group: make(map[digest.Member]int)}
	for g, ms := range groups {
		for _, m := range ms {
			p.group[m] = g + 1
		}
	}
	s.Schedule(at, func(time.Duration) { s.part = p })
	if heal > at {
		s.Schedule(heal, func(time.Duration) {
			if s.part == p {
				s.part = nil
			}
		})
	}
}

// Heal ends, at virtual time at, whatever partition is in force then.
func (s *Sim) Heal(at time.Duration) {
	s.Schedule(at, func(time.Duration) { s.part = nil })
}

// Partitioned reports whether a partition is in force.
func (s *Sim) Partitioned() bool { return s.part != nil }

// AddTap registers fn to see every datagram sent, dropped and delivered.
func (s *Sim) AddTap(fn func(TapEvent)) { s.taps = append(s.taps, fn) }

// AddCheck registers an invariant checked after every event; the first
// error fails the simulation (see Err).
func (s *Sim) AddCheck(fn func(now time.Duration) error) { s.checks = append(s.checks, fn) }

// Fail records err as the simulation's failure unless one is recorded
// already; Run stops at the next event.
func (s *Sim) Fail(err error) {
	if s.err == nil && err != nil {
		s.err = fmt.Errorf("seed %d at %v: %w", s.seed, s.now, err)
	}
}

// Err returns the first failure, or nil.
func (s *Sim) Err() error { return s.err }

// Schedule runs fn at virtual time at (now if at is in the past).
func (s *Sim) Schedule(at time.Duration, fn func(now time.Duration)) {
	s.q.push(event{at: max(at, s.now), kind: evAction, node: -1, fn: fn})
}

// Do runs fn at virtual time at on behalf of m: if m is up then, fn runs and
// afterwards m's outgoing datagrams are sent and its timer rescheduled. Use
// it for anything that calls into a node from outside (Send, joins, ...).
func (s *Sim) Do(at time.Duration, m digest.Member, fn func(now time.Duration)) error {
	i, ok := s.byMember[m]
	if !ok {
		return fmt.Errorf("sim: do on unknown member %v", m)
	}
	s.q.push(event{at: max(at, s.now), kind: evAction, node: i, fn: fn})
	return nil
}

// Step processes exactly one event, advancing the clock to it. It returns false when the
// queue is empty or the simulation has failed.
func (s *Sim) Step() bool {
	if s.err != nil || s.q.Len() == 0 {
		return false
	}
	ev := s.q.pop()
	s.now = ev.at
	s.steps++
	switch ev.kind {
	case evDeliver:
		st := s.nodes[ev.node]
		if !st.up {
			s.stats.Drops++
			s.tap(TapDrop, s.nodes[ev.from].member, st.member, ev.data)
			break
		}
		s.stats.Delivered++
		s.tap(TapDeliver, s.nodes[ev.from].member, st.member, ev.data)
		st.node.Receive(s.nodes[ev.from].member, ev.data, s.now)
		s.flush(ev.node)
	case evTimer:
		st := s.nodes[ev.node]
		if !st.up || ev.gen != st.gen {
			break // superseded or crashed
		}
		st.timerAt = Never
		if d := normDeadline(st.node.NextDeadline()); d > s.now {
			s.schedTimer(ev.node, d) // moved later since scheduled
			break
		}
		if st.lastTick == s.now {
			st.sameTicks++
			if st.sameTicks > maxSameTimeTicks {
				s.Fail(fmt.Errorf("node %v: deadline does not advance past %v", st.member, s.now))
				return false
			}
		} else {
			st.lastTick, st.sameTicks = s.now, 0
		}
		st.node.Tick(s.now)
		s.flush(ev.node)
	case evAction:
		if ev.node >= 0 {
			if !s.nodes[ev.node].up {
				break
			}
			ev.fn(s.now)
			s.flush(ev.node)
		} else {
			ev.fn(s.now)
		}
	}
	for _, c := range s.checks {
		if err := c(s.now); err != nil {
			s.Fail(err)
			break
		}
	}
	return s.err == nil
}

// RunUntil processes every event due at or before t and leaves the clock at
// t. It returns the simulation's failure, if any.
func (s *Sim) RunUntil(t time.Duration) error {
	for s.err == nil {
		at, ok := s.q.peek()
		if !ok || at > t {
			break
		}
		s.Step()
	}
	if s.err == nil && t > s.now {
		s.now = t
	}
	return s.err
}

// RunWhile processes events while cond returns true, checking cond every
// interval of virtual time, until the clock reaches limit. It returns
// whether cond became false (done) and the simulation's failure, if any.
func (s *Sim) RunWhile(cond func() bool, interval, limit time.Duration) (done bool, err error) {
	for s.err == nil {
		if !cond() {
			return true, nil
		}
		if s.now >= limit {
			return false, nil
		}
		if err := s.RunUntil(min(s.now+interval, limit)); err != nil {
			return false, err
		}
	}
	return false, s.err
}

// flush drains node i's outbox onto the network and reschedules its timer.
func (s *Sim) flush(i int32) {
	st := s.nodes[i]
	if !st.up {
		return
	}
	s.sendFrom = i
	st.node.Drain(s.sendFn)
	s.sendFrom = -1
	d := normDeadline(st.node.NextDeadline())
	if d < st.timerAt {
		s.schedTimer(i, d)
	}
}

func (s *Sim) schedTimer(i int32, d time.Duration) {
	st := s.nodes[i]
	st.gen++
	st.timerAt = d
	if d == Never {
		return
	}
	s.q.push(event{at: max(d, s.now), kind: evTimer, node: i, gen: st.gen})
}

// send is the Drain callback: it copies the datagram and schedules a copy
// for every receiver that it reaches.
func (s *Sim) send(to digest.Member, datagram []byte) {
	from := s.sendFrom
	fm := s.nodes[from].member
	data := append([]byte(nil), datagram...)
	s.stats.Sent++
	s.stats.Bytes += uint64(len(data))
	s.tap(TapSend, fm, to, data)
	shared := s.net.SharedLoss > 0 && s.rng.Float64() < s.net.SharedLoss
	if s.net.SharedBurst.On() && s.net.SharedBurst.step(&s.nodes[from].sendBad, s.rng.Float64) {
		shared = true
	}
	if shared {
		s.stats.SharedDrops++
		s.tap(TapDrop, fm, digest.Member{}, data)
		return
	}
	if !to.IsZero() {
		ti, ok := s.byMember[to]
		if !ok {
			s.stats.Drops++
			s.tap(TapDrop, fm, to, data)
			return
		}
		s.copyTo(from, ti, data, BlockUnicast)
		return
	}
	for ti := range s.nodes {
		if int32(ti) == from && !s.net.Loopback {
			continue
		}
		if !s.nodes[ti].up {
			continue
		}
		s.copyTo(from, int32(ti), data, BlockMulticast)
	}
}

// copyTo decides the fate of one receiver's copy (kind says whether it is
// a multicast's or a unicast, for Block). The random draws happen in a
// fixed order whatever the outcome, so one copy's fate does not shift the
// draws of the next.
func (s *Sim) copyTo(from, to int32, data []byte, kind Blocked) {
	lossDraw := s.rng.Float64()
	lost := lossDraw < s.net.Loss
	if s.net.Burst.On() && s.net.Burst.step(&s.nodes[to].burstBad, s.rng.Float64) {
		lost = true
	}
	if s.block != nil && s.block[linkKey{from, to}]&kind != 0 {
		lost = true
	}
	fm, tm := s.nodes[from].member, s.nodes[to].member
	if (s.part != nil && !s.part.reach(fm, tm)) || lost {
		s.stats.Drops++
		s.tap(TapDrop, fm, tm, data)
		return
	}
	s.q.push(event{at: s.now + s.delay(from, to), kind: evDeliver, node: to, from: from, data: data})
	if s.net.Duplicate > 0 && s.rng.Float64() < s.net.Duplicate {
		s.stats.Duplicates++
		s.q.push(event{at: s.now + s.delay(from, to), kind: evDeliver, node: to, from: from, data: data})
	}
}

// delay draws one copy's delay following the package's delay model.
func (s *Sim) delay(from, to int32) time.Duration {
	lat, jit := s.net.Latency, s.net.Jitter
	if s.links != nil {
		if l, ok := s.links[linkKey{from, to}]; ok {
			lat, jit = l.Latency, l.Jitter
		}
	}
	d := lat
	if jit > 0 {
		d += time.Duration(s.rng.Int64N(int64(jit)))
	}
	if s.net.Reorder > 0 && s.rng.Float64() < s.net.Reorder {
		d += time.Duration(s.rng.Int64N(int64(s.net.ReorderDelay)))
	}
	return d
}

func (s *Sim) tap(k TapKind, from, to digest.Member, data []byte) {
	if len(s.taps) == 0 {
		return
	}
	ev := TapEvent{Kind: k, At: s.now, From: from, To: to, Data: data}
	for _, fn := range s.taps {
		fn(ev)
	}
}
