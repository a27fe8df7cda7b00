package nakack

import (
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// Lost-range events are canonical: a maximal run of seqnos a member is
// told lost is one event, whatever its window's size and position and
// whenever the pieces of the run became known, so two members that lose
// the same seqnos report them with the same boundaries.

// TestLostRangeWholeBeyondCapacity: A and C lack all of B's 1..200 and B
// purged 1..150; A's window holds 64 seqnos, C's 128. Both report [1,150]
// as one range, A although it can mark only 64 at a time, and both then
// deliver 151..201.
func TestLostRangeWholeBeyondCapacity(t *testing.T) {
	c := newCluster(t, func(cfg *Config) {
		cfg.SendWindow, cfg.RecvWindow, cfg.MaxBundle = 512, 512, 8
		cfg.StableInterval = 5 * time.Millisecond
		switch cfg.Self {
		case mA:
			cfg.SendWindow, cfg.RecvWindow = 64, 64
		case mC:
			cfg.SendWindow, cfg.RecvWindow = 128, 128
		}
	}, mB, mA, mC)
	c.send(mB, false, payloads("b", 1, 200)...) // nobody gets it
	c.poll()
	_, err := c.p(mB).ForcePurge(mB, 150)
	require.NoError(t, err)
	c.deliver(c.send(mB, false, "b201"), nil)
	c.run(c.now+2*time.Second, nil)
	for _, m := range []digest.Member{mA, mC} {
		r := c.rec(m)
		require.Equal(t, []lostEvent{{mB, 1, 150}}, r.lostOf(mB), "member %v", m)
		require.Equal(t, span(151, 201), r.seqs(mB), "member %v", m)
	}
}

// TestLostRangeWaitsForItsEnd: A lacks B's 51..200 (C lacks nothing). B
// purged up to 99: A's request draws a MSG_NOT_FOUND that makes 51..99
// lost. Before B's repair of 100.. reaches A, B purges up to 150 as well:
// A's next request draws a second MSG_NOT_FOUND. A reports [51,150] once,
// not [51,99] then [100,150]: a lost run is reported only once the seqno
// after it is held (or the run reaches the highest seqno known), since a
// gap after it may still turn out lost too. A member that asked only after
// the second purge reports the same range.
func TestLostRangeWaitsForItsEnd(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 10 }, mB, mA, mC)
	ds := c.send(mB, false, payloads("b", 1, 200)...)
	for _, d := range ds {
		if _, _, last := dataRange(t, d); last <= 50 {
			c.deliverTo(d, mA)
		}
		c.deliverTo(d, mC)
	}
	c.poll()
	_, err := c.p(mB).ForcePurge(mB, 99)
	require.NoError(t, err)
	c.deliver(c.send(mB, false, "b201"), nil)
	// A's first request reaches B; B's answer (repairs of 100.. and the
	// MSG_NOT_FOUND up to 99) is cut down to the MSG_NOT_FOUND.
	toB := func(d dgram, to digest.Member) bool { return to != mB }
	a := c.p(mA)
	c.now = a.NextDeadline()
	a.Tick(c.now)
	c.deliver(c.take(), toB)
	for _, d := range ofType(c.take(), wire.TypeMsgNotFound) {
		c.deliverTo(d, mA)
	}
	c.poll()
	_, err = c.p(mB).ForcePurge(mB, 150)
	require.NoError(t, err)
	c.run(c.now+2*time.Second, nil)
	require.Equal(t, []lostEvent{{mB, 51, 150}}, c.rec(mA).lostOf(mB))
	require.Equal(t, cat(span(1, 50), span(151, 201)), c.rec(mA).seqs(mB))
}
