package nakack

import (
	"testing"
	"time"

	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// A receiver purges only on STABILITY: one that gets it late, or loses it,
// still holds the previous window when the sender, already purged, sends the
// next one. A sender sends nothing beyond RecvWindow above the lowest Low the
// members reported (SendLimit), so that happens only to a member whose
// window is smaller than the sender's RecvWindow (configs differ) or after a
// forced purge. Those tests pin down what happens beyond a window's
// capacity.

// tightWindows gives every member RecvWindow == SendWindow == 64, bundles of
// 8 messages.
func tightWindows(cfg *Config) {
	cfg.SendWindow, cfg.RecvWindow, cfg.MaxBundle = 64, 64, 8
}

// TestLateStabilityRerequestsFullDrops: B drops A's second window as Full
// because the STABILITY that lets it purge the first is late (or lost and
// only the next round's arrives) and A assumes receive windows of 128
// (its RecvWindow) where B's holds 64. The purge that finally comes
// re-checks the gaps: B requests 65..128 one reorder delay later (not
// after a backoff, and not never: the deadlock of sim seed 28 with tight
// windows), and A is no longer back-pressured once the next round purges.
func TestLateStabilityRerequestsFullDrops(t *testing.T) {
	for _, lost := range []bool{false, true} {
		t.Run(map[bool]string{false: "late", true: "lost-next-round"}[lost], func(t *testing.T) {
			c := newCluster(t, func(cfg *Config) {
				tightWindows(cfg)
				if cfg.Self == mA {
					cfg.RecvWindow = 128
				}
			}, mA, mB)
			a, b := c.p(mA), c.p(mB)
			c.deliver(c.send(mA, false, payloads("a", 1, 64)...), nil)
			c.poll()
			_, err := a.Send([]byte("a65"), c.now)
			require.ErrorIs(t, err, ErrBackPressure, "A's ring is full until stability")

			// Stability round: B reports, A (coordinator) purges and multicasts
			// STABILITY, which B does not get now.
			b.sendStable(c.now)
			a.sendStable(c.now)
			var stability []dgram
			c.deliver(c.take(), nil)
			for _, d := range c.take() {
				if d.typ == wire.TypeStability {
					stability = append(stability, d)
				}
			}
			require.Len(t, stability, 1)
			require.Equal(t, uint64(64), a.own.low())

			c.deliver(c.send(mA, false, payloads("a", 65, 128)...), nil)
			require.Equal(t, uint64(64), b.Stats().Drops.Full, "B's window still holds 1..64")
			require.Equal(t, uint64(128), b.senders[mA].highest)

			// Nothing B can request fits its window: no request, but the gap
			// is not forgotten (the timer stays armed as a safety net).
			ds := c.run(c.now+time.Second, nil)
			require.Empty(t, xmitRanges(t, ds, mA))
			require.True(t, b.senders[mA].armed, "known gap beyond capacity keeps the timer armed")
			require.NotEqual(t, NoDeadline, b.NextDeadline())

			// The purge comes: late, or with the next round.
			if lost {
				b.sendStable(c.now)
				a.sendStable(c.now)
				c.deliver(c.take(), nil) // B's STABLE to A; A's STABILITY to B
				c.deliver(c.take(), nil)
			} else {
				c.deliverTo(stability[0], mB)
			}
			require.Equal(t, uint64(64), b.senders[mA].low())
			require.LessOrEqual(t, b.NextDeadline(), c.now+b.cfg.NakDelay+b.cfg.NakJitter,
				"the purge re-checks the gaps: request after the reorder delay")
			ds = c.run(c.now+b.cfg.NakDelay+b.cfg.NakJitter, nil)
			require.Equal(t, []wire.Range{rg(65, 128)}, xmitRanges(t, ds, mA))
			require.Equal(t, span(1, 128), c.rec(mB).seqs(mA))
			require.False(t, b.senders[mA].armed)

			// The next round frees A's ring.
			b.sendStable(c.now)
			a.sendStable(c.now)
			c.run(c.now+time.Millisecond, nil)
			require.Equal(t, uint64(128), a.own.low())
			_, err = a.Send([]byte("a129"), c.now)
			require.NoError(t, err)
		})
	}
}

// TestHighestRearmsKnownGap: a HIGHEST that announces nothing new still
// arms the timer of a window with a known gap and no timer.
func TestHighestRearmsKnownGap(t *testing.T) {
	c := newCluster(t, tightWindows, mA, mB)
	b := c.p(mB)
	ds := c.send(mA, true, payloads("a", 1, 3)...)
	c.deliverTo(ds[0], mB)
	c.deliverTo(ds[2], mB)
	s := b.senders[mA]
	require.True(t, s.armed)
	b.disarm(s) // as if a path had forgotten it
	buf := make([]byte, 256)
	d, err := wire.EncodeHighest(buf, wire.Header{Group: testGroup, Sender: mA}, wire.Highest{View: c.view.ID, Highest: 3})
	require.NoError(t, err)
	c.deliverTo(dgram{from: mA, typ: wire.TypeHighest, data: d}, mB)
	require.True(t, s.armed)
	c.run(c.now+time.Second, nil)
	require.Equal(t, span(1, 3), c.rec(mB).seqs(mA))
}

// TestMsgNotFoundBeyondCapacity: A (window of 64) lacks all of B's 1..200
// and B purged 1..150. The MSG_NOT_FOUND's lost range [1,150] does not fit
// A's window: A marks 1..64 at once and the rest as stability purges make
// room; it reports [1,150] lost at once, as one range (nothing beyond the
// capacity can be held: lostEnd), and consumes the later marks silently,
// then fetches and delivers 151..201. Without the pending marks A would stop
// at 64 for ever: 65..150 neither held, nor lost, nor requestable.
func TestMsgNotFoundBeyondCapacity(t *testing.T) {
	c := newCluster(t, func(cfg *Config) {
		tightWindows(cfg)
		cfg.StableInterval = 5 * time.Millisecond
		if cfg.Self == mB {
			cfg.SendWindow, cfg.RecvWindow = 512, 512
		}
	}, mB, mA)
	c.send(mB, false, payloads("b", 1, 200)...) // A gets none of it
	c.poll()
	n, err := c.p(mB).ForcePurge(mB, 150)
	require.NoError(t, err)
	require.Equal(t, 150, n)
	c.deliver(c.send(mB, false, "b201"), nil)
	c.run(c.now+2*time.Second, nil)

	a := c.rec(mA)
	require.Equal(t, span(151, 201), a.seqs(mB))
	var seqs []uint64
	for _, l := range a.lostOf(mB) {
		seqs = append(seqs, span(l.from, l.to)...)
	}
	require.Equal(t, span(1, 150), seqs, "every purged seqno reported lost once, in order")
	require.Equal(t, []lostEvent{{mB, 1, 150}}, a.lostOf(mB), "as one range")
	st := c.p(mA).Stats()
	require.Equal(t, uint64(150), st.LostMessages)
	require.False(t, c.p(mA).senders[mB].armed)
	require.Equal(t, 1, c.nodes[mA].log.n, "logged once")
}
