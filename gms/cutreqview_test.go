package gms

import (
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/sim"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// cutReportsIn returns the CUT_REPORTs for sender in n's outbox.
func cutReportsIn(t *testing.T, n *node, sender digest.Member) []*msg {
	t.Helper()
	var out []*msg
	for _, o := range n.g.Outbox() {
		m, err := decode(o.Data, 7)
		require.NoError(t, err)
		if m.typ == typeCutReport && m.member == sender {
			out = append(out, m)
		}
	}
	return out
}

// TestCutReqBeforeViewIgnored: a CUT_REQ for a sender that is still in
// this member's view (the view that dropped it has not reached it yet) is
// not answered: a report taken now would be followed by that sender's data
// until the view is installed, data the coordinator would not know of. Once
// the member installed a view without the sender, it answers (the
// coordinator resends CUT_REQ to members that have not reported).
func TestCutReqBeforeViewIgnored(t *testing.T) {
	h := newHarness(t, 1, lossyNet(1, 0))
	a, b, c := h.add(1), h.add(2), h.add(3)
	all := []*node{a, b, c}
	h.join(0, a)
	h.join(60*time.Millisecond, b, c)
	h.runUntil(func() bool { return converged(all...) && quiet(all...) }, 5*time.Second, "joined")
	v1 := b.g.View()
	require.True(t, v1.Contains(c.self()))
	v2 := digest.ViewID{Coord: a.self(), Counter: v1.ID.Counter + 1}
	req, err := (&msg{typ: typeCutReq, view: v2, member: c.self()}).encode(7, a.self())
	require.NoError(t, err)
	answered := -1
	h.do(h.s.Now(), b, func(now time.Duration) {
		require.NoError(t, b.g.Receive(req, now))
		answered = len(cutReportsIn(t, b, c.self()))
	})
	h.run(h.s.Now() + time.Millisecond)
	require.Zero(t, answered, "B answered a CUT_REQ for C while C is in its view %v", v1.ID)
	require.Equal(t, uint64(1), b.g.Stats().CutReqsEarly)

	// C crashes and is excluded; B now answers a CUT_REQ for it.
	h.s.Crash(c.Member())
	surv := []*node{a, b}
	h.runUntil(func() bool { return converged(surv...) && quiet(surv...) }, h.s.Now()+10*time.Second, "C excluded")
	require.False(t, b.g.View().Contains(c.self()))
	req, err = (&msg{typ: typeCutReq, view: b.g.View().ID, member: c.self()}).encode(7, a.self())
	require.NoError(t, err)
	answered = -1
	h.do(h.s.Now(), b, func(now time.Duration) {
		require.NoError(t, b.g.Receive(req, now))
		answered = len(cutReportsIn(t, b, c.self()))
	})
	h.run(h.s.Now() + time.Millisecond)
	require.Equal(t, 1, answered, "B, in a view without C, answers")
}

// TestCutReqBeforeViewRealNak (real nakack): A, the coordinator, stops
// hearing C (C still hears A, B hears C), and C keeps sending; A excludes
// it. The view that drops C reaches B (and C) late, after
// ViewChangeTimeout, so A starts the cut (CUT_REQ) while B still has C in
// its view and receives C's data. B must not report before it installed
// that view: otherwise it delivers, live, C's messages beyond the cut that
// A never delivers (before the fix, seed 3: A delivered 855 of C's
// messages, B 980).
func TestCutReqBeforeViewRealNak(t *testing.T) {
	h := newNakHarness(t, 3, sim.NetConfig{Jitter: 100 * time.Microsecond})
	h.tweak = func(c *Config) { c.ViewChangeTimeout = 175 * time.Millisecond }
	a, b, c := h.add(1), h.add(2), h.add(3)
	all := []*node{a, b, c}
	h.join(0, a)
	h.join(60*time.Millisecond, b, c)
	h.runUntil(func() bool { return converged(all...) && quiet(all...) }, 5*time.Second, "joined")
	cm := c.self()
	start := h.s.Now()
	h.traffic(c, start, start+3*time.Second, time.Millisecond)
	cutAt := start + 20*time.Millisecond
	h.s.Schedule(cutAt, func(time.Duration) {
		require.NoError(t, h.s.SetLink(c.Member(), a.Member(), sim.Link{Latency: time.Hour}))
	})
	// When A probes C (it is about to suspect it), A's datagrams to B start
	// taking 300ms (to C 400ms): the view that drops C and its resends
	// reach B late. Just before A gives up waiting for B's acknowledgement
	// (and starts the cut) the link to B is fast again, so the CUT_REQ
	// overtakes the view.
	delayed, viewAt := false, time.Duration(0)
	h.s.AddTap(func(ev sim.TapEvent) {
		if ev.Kind != sim.TapSend || ev.From != a.Member() || len(ev.Data) < 3 || ev.At < cutAt {
			return
		}
		switch typ := wire.Type(ev.Data[2]); {
		case typ == typeProbe && ev.To == c.Member() && !delayed:
			delayed = true
			h.s.Schedule(ev.At, func(time.Duration) {
				require.NoError(t, h.s.SetLink(a.Member(), b.Member(), sim.Link{Latency: 300 * time.Millisecond}))
				// C gets the view late too, and keeps sending meanwhile.
				require.NoError(t, h.s.SetLink(a.Member(), c.Member(), sim.Link{Latency: 400 * time.Millisecond}))
			})
		case typ == typeView && delayed && viewAt == 0:
			viewAt = ev.At
			h.s.Schedule(ev.At+160*time.Millisecond, func(time.Duration) {
				require.NoError(t, h.s.SetLink(a.Member(), b.Member(), sim.Link{Jitter: 100 * time.Microsecond}))
			})
		}
	})
	surv := []*node{a, b}
	h.runUntil(func() bool {
		_, openA := a.p().WindowState(cm)
		_, openB := b.p().WindowState(cm)
		return h.s.Now() > cutAt && !a.g.View().Contains(cm) && !b.g.View().Contains(cm) && !openA && !openB &&
			quiet(surv...)
	}, cutAt+20*time.Second, "C excluded and cut")
	require.True(t, delayed)
	require.NotZero(t, viewAt)
	require.NotNil(t, a.app.state[cm])
	require.Equal(t, *a.app.state[cm], *b.app.state[cm], "survivors differ on C's prefix: A %v lost %v, B %v lost %v",
		a.app.state[cm], a.app.lost[cm], b.app.state[cm], b.app.lost[cm])
	require.NotZero(t, b.g.Stats().CutReqsEarly, "the CUT_REQ reached B before the view")
	h.noErrors()
}
