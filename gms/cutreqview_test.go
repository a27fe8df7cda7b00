package gms

import (
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
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
