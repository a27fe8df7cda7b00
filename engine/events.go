package engine

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/nakcast/nakcast/digest"
)

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds.
const (
	// EventView: a view was installed (View, Members, coordinator first).
	// With static membership there is one, at Open.
	EventView EventKind = iota + 1
	// EventLost: Sender's seqnos From..To will never be delivered (the
	// sender purged them before this member got them: docs/guarantees.md).
	EventLost
	// EventSuspect: this member suspects Sender (a member of View) of
	// having failed: silent for Config.Membership.SuspectTimeout and its
	// Config.Membership.ProbeAttempts probes unanswered. The coordinator excludes it (an EventView follows), or,
	// if it is heard from again first, the suspicion is withdrawn
	// (EventUnsuspect). Reported once per suspicion, by the members that
	// suspect it themselves (Stats.Suspicions counts them).
	EventSuspect
	// EventLagging: Sender (this member: the application is not
	// consuming) has From messages of some sender received but not
	// delivered, more than half the window; stability, and so every
	// sender, will soon wait for it. Reported once per episode. (Lag of
	// any member, seen by the coordinator: EventPeerLagging.)
	EventLagging
	// EventLeft: this member is no longer in the group: Err is nil after
	// the graceful leave of Close, wraps gms.ErrExcluded when the group
	// excluded it (a false suspicion or a partition: the engine rejoins at
	// once as a new incarnation, and an EventView follows).
	EventLeft
	// EventState: a state transfer completed (Err nil: the state was
	// installed through Config.Membership.SetState) or gave up (Err).
	EventState
	// EventUnsuspect: this member withdraws its suspicion of Sender (an
	// EventSuspect came before): Sender, still a member of View, was heard
	// from again, and this member no longer reports it. Another member's
	// report may still have it excluded (an EventView follows). A
	// coordinator that has already queued the suspect's exclusion keeps
	// its suspicion (no EventUnsuspect). Stats.Unsuspicions counts them.
	EventUnsuspect
	// EventPeerLagging: Sender, a member of View (this member too), lags
	// behind the group: From messages of the group's traffic it has not
	// delivered while another member has, above
	// Config.Membership.LagLimit for LagTimeout. Reported on every member
	// once per episode (dynamic membership). With
	// Config.Membership.ExcludeLaggards an EventView without it follows.
	EventPeerLagging
)

// String names the kind.
func (k EventKind) String() string {
	switch k {
	case EventView:
		return "view"
	case EventLost:
		return "lost"
	case EventSuspect:
		return "suspect"
	case EventLagging:
		return "lagging"
	case EventLeft:
		return "left"
	case EventState:
		return "state"
	case EventUnsuspect:
		return "unsuspect"
	case EventPeerLagging:
		return "peerlagging"
	}
	return "unknown"
}

// Event is a membership or delivery event. Fields beyond Kind are set as the
// kind says.
type Event struct {
	Kind     EventKind
	View     digest.ViewID
	Members  []digest.Member
	Sender   digest.Member
	From, To uint64
	Err      error
}

// eventQueueCap bounds the queued events; older ones are dropped (and
// counted) when the application does not read them.
const eventQueueCap = 4096

// eventQueue is a bounded FIFO of events, written by the agent (rarely: not
// per message) and read by the application.
type eventQueue struct {
	mu      sync.Mutex
	buf     []Event
	head    int
	n       int
	dropped uint64
	notify  chan struct{} // cap 1: signalled on push
	done    chan struct{} // closed by close
	closed  bool
	once    sync.Once
	// queued is n, for pop's look without the lock.
	queued atomic.Int32
}

func (q *eventQueue) init() {
	q.once.Do(func() { q.notify, q.done = make(chan struct{}, 1), make(chan struct{}) })
}

func (q *eventQueue) push(e Event) {
	q.init()
	q.mu.Lock()
	if q.buf == nil {
		q.buf = make([]Event, eventQueueCap)
	}
	if q.n == len(q.buf) {
		q.head = (q.head + 1) % len(q.buf)
		q.n--
		q.dropped++
	}
	q.buf[(q.head+q.n)%len(q.buf)] = e
	q.n++
	q.queued.Store(int32(q.n))
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *eventQueue) pop(dst []Event) int {
	if q.queued.Load() == 0 {
		return 0 // the common poll: nothing queued, no lock
	}
	q.mu.Lock()
	k := 0
	for k < len(dst) && q.n > 0 {
		dst[k] = q.buf[q.head]
		q.buf[q.head] = Event{}
		q.head = (q.head + 1) % len(q.buf)
		q.n--
		k++
	}
	q.queued.Store(int32(q.n))
	q.mu.Unlock()
	return k
}

func (q *eventQueue) close() {
	q.init()
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.done)
	}
	q.mu.Unlock()
}

// PollEvents moves up to len(dst) queued events into dst, oldest first, and
// returns how many. It never blocks and does not allocate.
func (m *Member) PollEvents(dst []Event) int { return m.events.pop(dst) }

// NextEvent waits for the next event: the convenience form of PollEvents.
// It returns ctx's error when ctx ends first, and ErrClosed once the member
// is closed and no event is left.
func (m *Member) NextEvent(ctx context.Context) (Event, error) {
	q := &m.events
	q.init()
	var one [1]Event
	d := m.startDriving()
	defer d.stop()
	for {
		if q.pop(one[:]) == 1 {
			return one[0], nil
		}
		q.mu.Lock()
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return Event{}, ErrClosed
		}
		if m.invoked() {
			// The agent runs here: one DoWork, then look again.
			if err := ctx.Err(); err != nil {
				return Event{}, err
			}
			m.driveOnce(&d)
			continue
		}
		select {
		case <-q.notify:
		case <-q.done:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}
