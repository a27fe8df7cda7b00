package nakack

import (
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// isStability reports whether d is a STABILITY, and whether it carries
// FlagReport.
func isStability(t *testing.T, d dgram) (stab, report bool) {
	t.Helper()
	if d.typ != wire.TypeStability {
		return false, false
	}
	h, _, err := wire.DecodeHeader(d.data, testGroup)
	require.NoError(t, err)
	return true, h.Flags&wire.FlagReport != 0
}

// TestSendLimitWaitsForLatePurge: with tight windows (RecvWindow ==
// SendWindow == 64) A's first STABILITY is lost on its way to B. A purged
// its 64 messages, but B's window still starts at 0: A sends nothing
// beyond 64 (B would have to discard it) until B reports that it purged.
// B's next report shows it missed the STABILITY (its Low is below the
// stable point): A repeats it to B at once, and the round after B's purge
// frees A. B discards nothing.
func TestSendLimitWaitsForLatePurge(t *testing.T) {
	c := newCluster(t, tightWindows, mA, mB)
	a, b := c.p(mA), c.p(mB)
	c.deliver(c.send(mA, false, payloads("a", 1, 64)...), nil)
	c.poll()
	loseStability := func(d dgram, to digest.Member) bool { s, _ := isStability(t, d); return s && to == mB }
	b.sendStable(c.now)
	a.sendStable(c.now)
	c.run(c.now, loseStability)
	require.Equal(t, uint64(64), a.OwnLow())
	require.Zero(t, b.senders[mA].low(), "B missed the STABILITY")
	require.Equal(t, uint64(64), a.SendLimit(), "B's window ends at 64")
	_, err := a.Send([]byte("a65"), c.now)
	require.ErrorIs(t, err, ErrBackPressure)

	// B's next report: A repeats the STABILITY to B alone.
	b.sendStable(c.now)
	ds := c.take()
	c.deliver(ds, nil)
	var repeats []dgram
	for _, d := range c.take() {
		if s, report := isStability(t, d); s && !report && d.to == mB {
			repeats = append(repeats, d)
		}
		c.deliver([]dgram{d}, nil)
	}
	require.Len(t, repeats, 1)
	require.Equal(t, uint64(64), b.senders[mA].low(), "the repeat purged B")
	require.Equal(t, uint64(64), a.SendLimit(), "until B reports its purge")

	c.stableRound()
	c.stableRound()
	require.Equal(t, uint64(128), a.SendLimit())
	c.deliver(c.send(mA, false, payloads("a", 65, 128)...), nil)
	c.run(c.now+time.Second, nil)
	require.Equal(t, span(1, 128), c.rec(mB).seqs(mA))
	require.Zero(t, b.Stats().Drops.Full)
}

// TestStableChase: C's STABLE is lost. The round waits one chase delay
// after its first report (B's), then asks C again with a
// STABILITY carrying FlagReport (unicast, C alone); C answers with its
// STABLE at once and the round closes: a lost STABLE costs the round a
// chase delay, not a StableInterval.
func TestStableChase(t *testing.T) {
	c := newCluster(t, nil, mA, mB, mC)
	a := c.p(mA)
	c.deliver(c.send(mB, false, payloads("b", 1, 10)...), nil)
	c.poll()
	loseOnce := true
	lose := func(d dgram, to digest.Member) bool {
		if d.typ == wire.TypeStable && d.from == mC && loseOnce {
			loseOnce = false
			return true
		}
		return false
	}
	for _, m := range c.order {
		c.p(m).sendStable(c.now)
	}
	start := c.now
	ds := c.run(c.now+a.chaseDelay()-1, lose)
	for _, d := range ds {
		s, _ := isStability(t, d)
		require.False(t, s, "no STABILITY before the chase")
	}
	ds = c.run(start+a.chaseDelay(), lose)
	var chases, stabs int
	for _, d := range ds {
		if s, report := isStability(t, d); report {
			require.Equal(t, mC, d.to)
			chases++
		} else if s && d.to.IsZero() {
			stabs++
		}
	}
	require.Equal(t, 1, chases)
	require.Equal(t, 1, stabs, "C's answer closed the round")
	require.Equal(t, uint64(10), c.p(mC).senders[mB].low())
	require.Equal(t, uint64(1), a.Stats().StableChased)
}

// TestStabilityAlignsReports: a member schedules its next STABLE one
// StableInterval after a STABILITY (less at most reportSpread), so every
// member reports for the next round together, the coordinator, whose own
// timer restarts with the STABILITY, with them.
func TestStabilityAlignsReports(t *testing.T) {
	const ival = 80 * time.Millisecond
	c := newCluster(t, func(cfg *Config) { cfg.StableInterval = ival }, mA, mB, mC)
	c.deliver(c.send(mB, false, payloads("b", 1, 10)...), nil)
	c.poll()
	c.p(mC).sendStable(c.now)
	c.now += ival / 2
	c.p(mB).sendStable(c.now)
	c.p(mA).sendStable(c.now)
	c.run(c.now, nil)
	require.Equal(t, uint64(10), c.p(mA).OwnLow()+c.p(mA).senders[mB].low())
	for _, m := range c.order {
		d := c.p(m).stableAt
		require.LessOrEqual(t, d, c.now+ival, "%v", m)
		require.GreaterOrEqual(t, d, c.now+ival-c.p(m).reportSpread(), "%v", m)
	}
}

// TestStabilitySettled: a round is settled (wire.FlagSettled, counted in
// StabilitySettled by the coordinator and by the members that receive it)
// only when no member lacks a message another member has: while B misses
// the tail of A's stream it is not, once B has it, it is.
func TestStabilitySettled(t *testing.T) {
	c := newCluster(t, nil, mA, mB)
	ds := c.send(mA, true, payloads("a", 1, 5)...)
	require.Len(t, ds, 5)
	c.deliver(ds[:3], nil) // 4 and 5 lost, and nothing after them
	c.poll()
	stableRoundNoPoll(c)
	a, b := c.p(mA).Stats(), c.p(mB).Stats()
	require.Positive(t, b.StabilityReceived)
	require.Zero(t, a.StabilitySettled, "B lacks 4 and 5")
	require.Zero(t, b.StabilitySettled)

	c.deliver(ds[3:], nil)
	c.poll()
	stableRoundNoPoll(c)
	require.Equal(t, uint64(1), c.p(mA).Stats().StabilitySettled)
	require.Equal(t, uint64(1), c.p(mB).Stats().StabilitySettled)
}
