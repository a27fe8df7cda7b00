package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/gms"
	"github.com/stretchr/testify/require"
)

// Slow receivers through the engine (Config.Membership.LagLimit,
// LagTimeout, ExcludeLaggards): three members of a dynamic group, member
// 0 sending, member 2's application stalled (pull mode, polling nothing)
// or slow (a handler that takes 2ms a message). The protocol's side is
// tested on the simulator (sim/laggard_test.go); these check the wiring:
// the event on every member, the policy, the state fetched again after an
// exclusion.

const (
	lagTestWindow = 256
	lagTestLimit  = 64
)

// openLagGroup opens the three members with exclude as the policy; every
// member has a counterApp and fetches the state when it joins. Member 2's
// is fed by slow when set (push mode, 8 messages per agent cycle), else
// by Poll only.
func openLagGroup(t *testing.T, exclude bool, slow *slowHandler) ([]*Member, []*recorder) {
	recs := []*recorder{newRecorder(-1), newRecorder(-1), newRecorder(-1)}
	ms := openJoined(t, 3, func(i int, c *Config) {
		app := counterApp{recs[i]}
		switch {
		case i < 2:
			c.Handler = recs[i]
		case slow != nil:
			slow.rec = recs[i]
			c.Handler, c.Agent.DeliverBatch = slow, 8
		}
		c.Tuning.Window = lagTestWindow
		c.Membership.LagLimit = lagTestLimit
		c.Membership.LagTimeout = 300 * time.Millisecond
		c.Membership.ExcludeLaggards = exclude
		c.Membership.GetState, c.Membership.SetState, c.Membership.FetchState = app.getState, app.setState, i > 0
	})
	return ms, recs
}

// slowHandler hands what it delivers to rec, taking 2ms a message while
// slow is set: an application that consumes slower than the group sends.
type slowHandler struct {
	rec  *recorder
	slow atomic.Bool
}

func (h *slowHandler) Deliver(s digest.Member, seq uint64, p []byte) {
	if h.slow.Load() {
		time.Sleep(2 * time.Millisecond) // the application's work on the message
	}
	h.rec.Deliver(s, seq, p)
}

func (h *slowHandler) Lost(s digest.Member, from, to uint64) { h.rec.Lost(s, from, to) }

// sendPaced sends from m, one message per millisecond (Send waits under
// back-pressure), until ctx ends.
func sendPaced(ctx context.Context, m *Member, wg *sync.WaitGroup) {
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			if err := m.Send(ctx, payloadOf(0, i, 200)); err != nil {
				return
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
			}
		}
	})
}

// waitLagging waits for m's EventPeerLagging naming laggard and returns
// it, failing on ctx's end; the events before it are returned too.
func waitLagging(t *testing.T, ctx context.Context, m *Member, laggard digest.Member) (Event, []Event) {
	t.Helper()
	var before []Event
	for {
		e, err := m.NextEvent(ctx)
		require.NoError(t, err, "waiting on %v for EventPeerLagging of %v; events %v", m.Self(), laggard, before)
		if e.Kind == EventPeerLagging && e.Sender == laggard {
			return e, before
		}
		before = append(before, e)
	}
}

// ownRetained is what m retains of its own messages (Received - Low of its
// own window): what stability has not freed.
func ownRetained(m *Member) uint64 {
	s := m.Stats()
	for _, w := range s.Senders {
		if w.Member == m.Self() {
			return w.Received - min(w.Low, w.Received)
		}
	}
	return 0
}

// lagRun is a lag group (openLagGroup) with member 0 sending (sendPaced)
// until halt, and member 2's handler slow if it has one.
type lagRun struct {
	ms      []*Member
	recs    []*recorder
	ctx     context.Context
	laggard digest.Member // member 2's first incarnation
	wg      sync.WaitGroup
	halt    context.CancelFunc
}

func startLagRun(t *testing.T, exclude bool, slow *slowHandler) *lagRun {
	ms, recs := openLagGroup(t, exclude, slow)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	for _, m := range ms {
		waitViewSize(t, ctx, m, 3)
	}
	r := &lagRun{ms: ms, recs: recs, ctx: ctx, laggard: ms[2].Self()}
	if slow != nil {
		slow.slow.Store(true)
	}
	sctx, halt := context.WithCancel(ctx)
	r.halt = halt
	t.Cleanup(func() { halt(); r.wg.Wait() })
	sendPaced(sctx, ms[0], &r.wg)
	return r
}

// TestPeerLaggingWait: with the default policy every member, the laggard
// included, reports EventPeerLagging naming member 2 with a lag above the
// limit; the group keeps waiting (no view change) and the sender holds at
// most its window meanwhile.
func TestPeerLaggingWait(t *testing.T) {
	r := startLagRun(t, false, nil)
	ms, ctx, laggard := r.ms, r.ctx, r.laggard
	var most uint64
	for _, m := range ms {
		e, before := waitLagging(t, ctx, m, laggard)
		require.Greater(t, e.From, uint64(lagTestLimit))
		for _, b := range before {
			require.NotEqual(t, EventView, b.Kind, "the group keeps waiting")
		}
		most = max(most, ownRetained(ms[0]))
	}
	require.NoError(t, pollUntil(ctx, func() bool {
		most = max(most, ownRetained(ms[0]))
		return most >= lagTestWindow*3/4
	}), "the sender never waited for the laggard: it retains %d", most)
	r.halt()
	r.wg.Wait()
	require.LessOrEqual(t, most, uint64(lagTestWindow), "the sender's retention is bounded by its window")
	require.Equal(t, 3, len(ms[0].Stats().Members))
	require.Equal(t, uint64(1), ms[0].Stats().Membership.Laggards)
	for _, m := range ms {
		require.Equal(t, uint64(1), m.Stats().Membership.LagReports)
	}
	// Member 2 consumes again: the group catches up and everything becomes stable.
	require.NoError(t, pollUntil(ctx, func() bool {
		for ms[2].Poll(HandlerFunc(func(digest.Member, uint64, []byte) {}), 1024) > 0 {
		}
		return ownRetained(ms[0]) == 0
	}))
}

// TestPeerLaggingExclude: with ExcludeLaggards the survivors report
// member 2 (slow) lagging and install a view without it, and what the
// sender held for it is freed; member 2 is told it was excluded, rejoins
// as a new incarnation and, with FetchState, fetches the application
// state again (EventState); its application, fast again, then delivers
// what follows the state, in order.
func TestPeerLaggingExclude(t *testing.T) {
	slow := &slowHandler{}
	r := startLagRun(t, true, slow)
	ms, recs, ctx, laggard := r.ms, r.recs, r.ctx, r.laggard
	for _, m := range ms[:2] {
		e, _ := waitLagging(t, ctx, m, laggard)
		require.Greater(t, e.From, uint64(lagTestLimit))
		v := waitViewSize(t, ctx, m, 2)
		require.NotContains(t, v.Members, laggard)
	}
	require.Equal(t, uint64(1), ms[0].Stats().Membership.LaggardsExcluded)
	require.NoError(t, pollUntil(ctx, func() bool { return ownRetained(ms[0]) < lagTestWindow/2 }),
		"the sender's retention is freed after the exclusion")

	slow.slow.Store(false)

	// The laggard: excluded, rejoined, state fetched (the EventState of
	// its Open comes before).
	var left, state bool
	for !state {
		e, err := ms[2].NextEvent(ctx)
		require.NoError(t, err)
		switch {
		case e.Kind == EventLeft:
			require.True(t, errors.Is(e.Err, gms.ErrExcluded), "left: %v", e.Err)
			left = true
		case e.Kind == EventState && left:
			require.NoError(t, e.Err)
			state = true
		}
	}
	require.NotEqual(t, laggard, ms[2].Self(), "a new incarnation")
	sender := ms[0].Self()
	var installed int
	require.NoError(t, recs[2].waitFor(ctx, func() bool { installed = recs[2].count[sender]; return true }))
	require.NoError(t, recs[2].waitFor(ctx, func() bool { return recs[2].count[sender] >= installed+100 }),
		"the rejoined member delivers what follows its state")
	require.NoError(t, recs[2].waitFor(ctx, func() bool { return len(recs[2].errs) == 0 }), "%v", recs[2].errs)
}
