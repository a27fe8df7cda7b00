package bench

import (
	"context"
	"sync"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine"
)

// ViewRecord is one view a member installed (MemberResult.Views): when
// (Ns, CLOCK_MONOTONIC, as the harness read the event), its id and its
// members' IDs, coordinator first.
type ViewRecord struct {
	Ns      int64    `json:"ns"`
	View    string   `json:"view"`
	Members []uint64 `json:"members"`
}

// EventRecord is one engine event other than a view (MemberResult.Events):
// Kind is engine.EventKind's name (suspect, unsuspect, lost, lagging,
// peerlagging, left, state); Member the member it names (the suspect, the
// lost range's sender, the laggard), From and To the lost range or, for
// lagging, From the messages received but not delivered, for peerlagging
// the laggard's lag behind the group; Err the event's error.
type EventRecord struct {
	Ns     int64  `json:"ns"`
	Kind   string `json:"kind"`
	View   string `json:"view,omitempty"`
	Member uint64 `json:"member,omitempty"`
	From   uint64 `json:"from,omitempty"`
	To     uint64 `json:"to,omitempty"`
	Err    string `json:"err,omitempty"`
}

// eventLog reads a member's events (engine.Member.NextEvent) on a
// goroutine of its own from Open to Close and keeps them with the time
// it read them; full is closed once a view of at least the run's member
// count is installed.
type eventLog struct {
	views  []ViewRecord
	events []EventRecord
	full   chan struct{}
	once   sync.Once
	cancel context.CancelFunc
	done   chan struct{}
}

// recordEvents starts reading m's events; members is the view size that
// closes full.
func recordEvents(m *engine.Member, members int) *eventLog {
	ctx, cancel := context.WithCancel(context.Background())
	l := &eventLog{full: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			e, err := m.NextEvent(ctx)
			if err != nil {
				return
			}
			l.add(e, members)
		}
	}()
	return l
}

func (l *eventLog) add(e engine.Event, members int) {
	now := Nanotime()
	if e.Kind == engine.EventView {
		v := ViewRecord{Ns: now, View: e.View.String(), Members: make([]uint64, len(e.Members))}
		for i, x := range e.Members {
			v.Members[i] = x.ID
		}
		l.views = append(l.views, v)
		if len(e.Members) >= members {
			l.once.Do(func() { close(l.full) })
		}
		return
	}
	r := EventRecord{Ns: now, Kind: e.Kind.String(), From: e.From, To: e.To}
	if !e.View.IsZero() {
		r.View = e.View.String()
	}
	if e.Sender != (digest.Member{}) {
		r.Member = e.Sender.ID
	}
	if e.Err != nil {
		r.Err = e.Err.Error()
	}
	l.events = append(l.events, r)
}

// waitFull waits until the member's view holds the run's members, ctx
// ends or timeout passes; it reports whether the view is full.
func (l *eventLog) waitFull(ctx context.Context, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-l.full:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// stop ends the reading once the member is closed and takes the events
// still queued; the log is the caller's to read afterwards.
func (l *eventLog) stop(m *engine.Member, members int) {
	l.cancel()
	<-l.done
	var buf [64]engine.Event
	for {
		n := m.PollEvents(buf[:])
		if n == 0 {
			return
		}
		for _, e := range buf[:n] {
			l.add(e, members)
		}
	}
}
