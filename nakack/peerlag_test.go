package nakack

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMemberLags: the coordinator measures each member's lag behind the
// group from the STABLE reports: per other sender, the most any member
// other than that sender delivered of it, less what the member delivered,
// summed. A sender's own messages in flight are not lag; a member that
// does not coordinate measures nothing.
func TestMemberLags(t *testing.T) {
	c := newCluster(t, nil, mA, mB, mC)
	require.Empty(t, c.p(mA).AppendMemberLags(nil), "no report yet")
	c.deliver(c.send(mB, true, payloads("b", 1, 10)...), nil)
	c.p(mC).Poll(c.rec(mC), 3) // C: 3 of B's
	c.deliver(c.send(mA, true, payloads("a", 1, 10)...), nil)
	c.p(mA).Poll(c.rec(mA), 1<<30)
	c.p(mB).Poll(c.rec(mB), 1<<30)
	c.now = 50 * time.Millisecond
	stableRoundNoPoll(c)

	// C delivered none of A's 10 (B did) and 3 of B's 10 (A did all).
	require.Equal(t, []MemberLag{{Member: mA}, {Member: mB}, {Member: mC, Lag: 10 + 7}}, c.p(mA).AppendMemberLags(nil))
	require.Empty(t, c.p(mB).AppendMemberLags(nil), "B does not coordinate")

	// C catches up; the next round shows it.
	c.p(mC).Poll(c.rec(mC), 1<<30)
	c.now = 80 * time.Millisecond
	stableRoundNoPoll(c)
	require.Equal(t, []MemberLag{{Member: mA}, {Member: mB}, {Member: mC}}, c.p(mA).AppendMemberLags(nil))
	buf := make([]MemberLag, 0, 4)
	require.Zero(t, testing.AllocsPerRun(100, func() { buf = c.p(mA).AppendMemberLags(buf[:0]) }))

	// A new view starts afresh: nobody has reported in it.
	v := View{ID: c.view.ID, Members: c.view.Members}
	v.ID.Counter++
	c.p(mA).InstallView(v, c.p(mA).Digest(), c.now)
	require.Empty(t, c.p(mA).AppendMemberLags(nil))
}
