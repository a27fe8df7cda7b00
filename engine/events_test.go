package engine

import (
	"context"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/gms"
	"github.com/stretchr/testify/require"
)

// TestLostRangeEvent forces the seed-000 situation: sender A purges
// messages 1..10 before B (a member of the static view that starts late)
// has them. B's request is answered with MSG_NOT_FOUND, and B reports
// [1,10] exactly once, to the Handler and as an EventLost, then delivers
// message 11.
func TestLostRangeEvent(t *testing.T) {
	ids := testMembers(2)
	g := testGroup()
	a, err := Open(context.Background(), Config{
		Group:      g,
		Self:       ids[0],
		Logger:     quietLogger(),
		Handler:    HandlerFunc(func(digest.Member, uint64, []byte) {}),
		Membership: MembershipConfig{Members: ids},
	})
	require.NoError(t, err)
	for range 10 {
		require.NoError(t, a.TrySend([]byte("gone")))
	}
	// Wait until A has sent and delivered all ten to itself, then purge
	// them by force (an operator action: normally B's absence keeps them).
	// "Sent" means written: the iteration that delivers them writes their
	// datagrams after it releases the lock, so wait for the next iteration
	// (lastNow moves) too; otherwise B, opened meanwhile, can read them.
	deadline := time.Now().Add(5 * time.Second)
	var seen time.Duration // lastNow of an iteration that had delivered all ten
	for {
		a.mu.Lock()
		if e, _ := a.proto.WindowState(a.Self()); e.Delivered == 10 && seen == 0 {
			seen = a.ag.lastNow
		} else if seen != 0 && a.ag.lastNow != seen {
			n, err := a.proto.ForcePurge(a.Self(), 10)
			a.mu.Unlock()
			require.NoError(t, err)
			require.Equal(t, 10, n)
			break
		}
		a.mu.Unlock()
		require.True(t, time.Now().Before(deadline))
		time.Sleep(time.Millisecond) // polling the agent's progress, bounded
	}
	rec := newRecorder(1)
	b, err := Open(context.Background(), Config{Group: g, Self: ids[1], Logger: quietLogger(), Handler: rec, Membership: MembershipConfig{Members: ids}})
	require.NoError(t, err)
	defer closeAll(t, []*Member{a, b}, 5*time.Second)
	require.NoError(t, a.TrySend([]byte("eleven")))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var lost Event
	for lost.Kind != EventLost {
		lost, err = b.NextEvent(ctx)
		require.NoError(t, err, "a: %+v\n%s\nb: %+v\n%s", a.Stats(), protoDump(a), b.Stats(), protoDump(b))
		if lost.Kind == EventView {
			require.Equal(t, ids, lost.Members)
		}
	}
	require.Equal(t, Event{Kind: EventLost, Sender: ids[0], From: 1, To: 10}, lost)
	select {
	case <-rec.cond:
	case <-ctx.Done():
		t.Fatal("message 11 not delivered")
	}
	rec.mu.Lock()
	require.Equal(t, 1, rec.lost)
	require.Equal(t, uint64(11), rec.last[ids[0]])
	rec.mu.Unlock()
	s := b.Stats()
	require.Equal(t, uint64(1), s.LostRanges)
	// B confirms A's MSG_NOT_FOUND with a challenge (open mode) before it
	// acts, and keeps asking meanwhile: A may answer more than once, B acts
	// once.
	require.GreaterOrEqual(t, s.MsgNotFoundReceived, uint64(1))
	require.Equal(t, uint64(1), s.Protocol.NotFoundConfirmed)
	require.GreaterOrEqual(t, a.Stats().Protocol.ChallengesAnswered, uint64(1))
	var evs [4]Event
	require.Zero(t, b.PollEvents(evs[:]), "reported once")
}

// TestLaggingEvent: a pull-mode member whose application does not poll is
// reported as lagging once its backlog passes half the window.
func TestLaggingEvent(t *testing.T) {
	ms := openGroup(t, 2, func(i int, c *Config) {
		c.Tuning.Window = 256
		if i == 0 {
			c.Handler = HandlerFunc(func(digest.Member, uint64, []byte) {})
		}
	})
	for range 200 {
		require.NoError(t, ms[0].TrySend([]byte("x")))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		e, err := ms[1].NextEvent(ctx)
		require.NoError(t, err)
		if e.Kind == EventLagging {
			require.Equal(t, ms[1].Self(), e.Sender)
			require.Greater(t, e.From, uint64(128))
			break
		}
	}
	s := ms[1].Stats()
	require.Equal(t, uint64(1), s.LaggingEpisodes)
	require.Greater(t, s.Backlog, uint64(128))
	for n := 0; n < 200; n += ms[1].Poll(newRecorder(-1), 64) {
	}
}

// TestSuspicionEvents: the gms listener turns Suspected and Unsuspected
// into EventSuspect and EventUnsuspect naming the suspect and the
// installed view, in order, and counts each (Stats.Suspicions,
// Stats.Unsuspicions).
func TestSuspicionEvents(t *testing.T) {
	ids := testMembers(3)
	var m Member
	m.view = gms.View{ID: digest.ViewID{Coord: ids[0], Counter: 4},
		Members: []gms.Peer{{Member: ids[0]}, {Member: ids[1]}, {Member: ids[2]}}}
	l := (*listener)(&m)
	l.Suspected(ids[1])
	l.Unsuspected(ids[1])
	l.Suspected(ids[1])
	var evs [4]Event
	require.Equal(t, 3, m.PollEvents(evs[:]))
	vid := m.view.ID
	require.Equal(t, []Event{
		{Kind: EventSuspect, Sender: ids[1], View: vid},
		{Kind: EventUnsuspect, Sender: ids[1], View: vid},
		{Kind: EventSuspect, Sender: ids[1], View: vid},
	}, evs[:3])
	require.Equal(t, uint64(2), m.ctr.suspicions.Load())
	require.Equal(t, uint64(1), m.ctr.unsuspicions.Load())
	require.Equal(t, "suspect", EventSuspect.String())
	require.Equal(t, "unsuspect", EventUnsuspect.String())
}
