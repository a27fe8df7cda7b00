package nakack

import (
	"bytes"
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

// purgeAndSend has B purge its window up to upTo and then send one more
// message, next, to everyone, and runs the cluster for two seconds: the
// members ask for what they lack and learn what is lost.
func purgeAndSend(t *testing.T, c *cluster, upTo uint64, next string) {
	t.Helper()
	_, err := c.p(mB).ForcePurge(mB, upTo)
	require.NoError(t, err)
	c.deliver(c.send(mB, false, next), nil)
	c.run(c.now+2*time.Second, nil)
}

// requireSameLoss checks that A and C each reported exactly lost of B's
// seqnos and delivered exactly seqs of them.
func requireSameLoss(t *testing.T, c *cluster, lost []lostEvent, seqs []uint64) {
	t.Helper()
	for _, m := range []digest.Member{mA, mC} {
		r := c.rec(m)
		require.Equal(t, lost, r.lostOf(mB), "member %v", m)
		require.Equal(t, seqs, r.seqs(mB), "member %v", m)
	}
}

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
	purgeAndSend(t, c, 150, "b201")
	requireSameLoss(t, c, []lostEvent{{mB, 1, 150}}, span(151, 201))
}

// unseenByA64 returns a cluster B, A, C in which A's window holds 64
// seqnos (the others' 512) and B has sent 1..200, which nobody got.
func unseenByA64(t *testing.T) *cluster {
	c := newCluster(t, func(cfg *Config) {
		cfg.SendWindow, cfg.RecvWindow, cfg.MaxBundle = 512, 512, 8
		cfg.StableInterval = 5 * time.Millisecond
		if cfg.Self == mA {
			cfg.SendWindow, cfg.RecvWindow = 64, 64
		}
	}, mB, mA, mC)
	c.send(mB, false, payloads("b", 1, 200)...)
	c.poll()
	return c
}

// TestLostRangeCapacityPurgeInSteps: A and C lack all of B's 1..200; A's
// window holds 64 seqnos, C's 512. B purges up to 100 and A alone learns
// it (C hears nothing): A's run reaches its window's capacity, so the
// window consumes 1..64 silently and A reports nothing yet, since what
// follows 100 is not known. B then purges up to 150 and everyone talks
// again: A learns the later point in a second step, C in one. Both report
// [1,150] as one range, not [1,100] then [101,150], and deliver 151..201.
func TestLostRangeCapacityPurgeInSteps(t *testing.T) {
	c := unseenByA64(t)
	_, err := c.p(mB).ForcePurge(mB, 100)
	require.NoError(t, err)
	c.deliver(c.send(mB, false, "b201"), nil)
	c.run(c.now+300*time.Millisecond, func(_ dgram, to digest.Member) bool { return to == mC })
	a := c.p(mA)
	st, _ := a.WindowState(mB)
	require.Equal(t, uint64(64), st.Delivered, "A's window consumes what it can hold")
	require.Empty(t, c.rec(mA).lostOf(mB), "reported before its end is known")
	cons, _ := a.Consumed(mB)
	require.Zero(t, cons, "the application has consumed nothing of the run")
	_, err = c.p(mB).ForcePurge(mB, 150)
	require.NoError(t, err)
	c.run(c.now+2*time.Second, nil)
	requireSameLoss(t, c, []lostEvent{{mB, 1, 150}}, span(151, 201))
}

// TestLostRangePendingUnwoundAtDeparture: C holds all of B's 1..200, A
// none, and B purged up to 100: A learns it, its run reaches its window's
// capacity (64), the window consumes 1..64 silently and the event is
// pending. B then crashes before A's window could purge anything (no
// stability round). The application was told nothing, and C holds what
// A's window consumed: the departure gives those seqnos back to A's
// window as missing, A fetches them from C and ends with the same record
// of B as C (all delivered, nothing lost), from where its application
// stood when the view dropped B.
func TestLostRangePendingUnwoundAtDeparture(t *testing.T) {
	c := newCluster(t, func(cfg *Config) {
		cfg.SendWindow, cfg.RecvWindow, cfg.MaxBundle = 512, 512, 8
		cfg.StableInterval = time.Hour // no purge: A's window keeps 1..64
		if cfg.Self == mA {
			cfg.SendWindow, cfg.RecvWindow = 64, 64
		}
	}, mC, mA, mB)
	c.deliver(c.send(mB, false, payloads("b", 1, 200)...), func(_ dgram, to digest.Member) bool { return to == mA })
	c.poll()
	_, err := c.p(mB).ForcePurge(mB, 100)
	require.NoError(t, err)
	c.deliver(c.send(mB, false, "b201"), nil)
	c.run(c.now+300*time.Millisecond, nil)
	a := c.p(mA)
	st, _ := a.WindowState(mB)
	require.Equal(t, uint64(64), st.Delivered)
	require.Empty(t, c.rec(mA).lostOf(mB))
	require.Empty(t, c.rec(mA).seqs(mB))
	c.crash(mB)
	cons, _ := a.Consumed(mB)
	require.Zero(t, cons)
	st, _ = a.WindowState(mB)
	require.Zero(t, st.Delivered, "the window gives back what it consumed of the event")
	for _, m := range []digest.Member{mA, mC} {
		c.applyCut(m, mB, 201)
	}
	for range 8 { // gms raises the cut's stable point as A delivers (CutBlocked)
		c.run(c.now+500*time.Millisecond, nil)
		st, _ = a.WindowState(mB)
		for _, m := range []digest.Member{mA, mC} {
			_, err := c.p(m).PurgeCut(mB, st.Delivered, c.now)
			require.NoError(t, err)
		}
	}
	for _, m := range []digest.Member{mA, mC} {
		require.Empty(t, c.rec(m).lostOf(mB), "member %v", m)
		require.Equal(t, span(1, 201), c.rec(m).seqs(mB), "member %v", m)
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

// sendWithFrag has B send "b1".."b<n>" one datagram each, but for a
// message of two fragments (1200*2 bytes, two datagrams) at seqnos
// frag, frag+1, and returns the datagrams.
func sendWithFrag(t *testing.T, c *cluster, frag uint64, n int) []dgram {
	t.Helper()
	p := c.p(mB)
	for seq := uint64(1); seq <= uint64(n); seq++ {
		pl := []byte("b" + itoa(int(seq)))
		if seq == frag {
			pl = bytes.Repeat([]byte("x"), 2400)
		} else if seq == frag+1 {
			continue
		}
		_, err := p.Send(pl, c.now)
		require.NoError(t, err)
		p.Flush(c.now)
	}
	require.Equal(t, uint64(n+1), p.NextSeq())
	return c.take()
}

// TestLostRangeOverHeldFragments (TestWholeGroupRandomised's seed 75967
// in small): B sends 1, a message M of two fragments and more small
// messages, one datagram each; A receives 1 and one fragment of M, C only
// 1; B purges up to 10, past M. The lost seqnos are the same for A and C
// (what A holds of M can never be delivered), so both report one range,
// [2,10]: M's held fragment neither ends the run nor splits it (not
// [2,3] then [4,10] when A holds M's second fragment, nor [2,2] then
// [3,10] when it holds M's first).
func TestLostRangeOverHeldFragments(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frag  uint64 // M's first fragment
		aHeld uint64 // what A holds of M
	}{
		{"second fragment held", 2, 3},
		{"first fragment held", 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mB, mA, mC)
			ds := sendWithFrag(t, c, tc.frag, 10)
			c.deliverTo(dataOf(t, ds, 1), mA)
			c.deliverTo(dataOf(t, ds, tc.aHeld), mA)
			c.deliverTo(dataOf(t, ds, 1), mC)
			c.poll()
			purgeAndSend(t, c, 10, "b11")
			requireSameLoss(t, c, []lostEvent{{mB, 2, 10}}, []uint64{1, 11})
		})
	}
}

// TestLostRangeWaitsForHeldMessage: B purged 1..2 only; A lacks 2 and
// M's second fragment 4 (B still holds it) and holds M's first fragment
// 3. Whether the run 2 goes on through M depends on 4 (lost or not): A
// waits for the repair of 4, then reports [2,2] and delivers M and 5,
// like C, which lacked only 2.
func TestLostRangeWaitsForHeldMessage(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mB, mA, mC)
	ds := sendWithFrag(t, c, 3, 5)
	for _, s := range []uint64{1, 3, 5} {
		c.deliverTo(dataOf(t, ds, s), mA)
	}
	for _, s := range []uint64{1, 3, 4, 5} {
		c.deliverTo(dataOf(t, ds, s), mC)
	}
	c.poll()
	_, err := c.p(mB).ForcePurge(mB, 2)
	require.NoError(t, err)
	c.run(c.now+2*time.Second, nil)
	requireSameLoss(t, c, []lostEvent{{mB, 2, 2}}, []uint64{1, 3, 5})
}

// TestLostRangeHeldBackDecidedByCut: B purged 1..2; A and C lack 2 and
// hold M's first fragment 3, and M's second fragment 4 reaches nobody (B's
// repairs of it are lost too). The run 2 waits for M's fate; B crashes and
// the cut falls at 3, inside M: 2 is missing again once B departed (no
// survivor holds it, so the cut declares it lost) and, with no repair or
// declaration to come for M, the cut itself lets Poll go on. Both
// survivors report 2 lost, then M
// from its first fragment to the cut (lostAtCut), and nothing stays
// unreported when they acknowledge the cut.
func TestLostRangeHeldBackDecidedByCut(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mA, mC, mB)
	ds := sendWithFrag(t, c, 3, 4)
	for _, m := range []digest.Member{mA, mC} {
		for _, s := range []uint64{1, 3} {
			c.deliverTo(dataOf(t, ds, s), m)
		}
	}
	c.poll()
	_, err := c.p(mB).ForcePurge(mB, 2)
	require.NoError(t, err)
	no4 := func(d dgram, to digest.Member) bool {
		if d.from != mB || (d.typ != wire.TypeData && d.typ != wire.TypeFrag) {
			return false
		}
		_, first, last := dataRange(t, d)
		return first <= 4 && 4 <= last
	}
	c.run(c.now+500*time.Millisecond, no4)
	for _, m := range []digest.Member{mA, mC} {
		require.Empty(t, c.rec(m).lostOf(mB), "member %v: 2 is lost, M undecided", m)
		require.NotZero(t, c.p(m).Stats().NotFoundConfirmed, "member %v", m)
	}
	c.crash(mB)
	for _, m := range []digest.Member{mA, mC} {
		// Once B has departed, 2 is missing again (depart): the reports
		// show nobody holds it, and the coordinator declares it lost.
		r := c.report(m, mB)
		require.Equal(t, uint64(3), r.received, "member %v", m)
		require.Equal(t, []rangeU{{2, 2}}, r.gaps, "member %v", m)
		c.applyCut(m, mB, 3, rangeU{2, 2})
	}
	c.run(c.now+time.Second, nil)
	for _, m := range []digest.Member{mA, mC} {
		require.Equal(t, []lostEvent{{mB, 2, 2}, {mB, 3, 3}}, c.rec(m).lostOf(mB), "member %v", m)
		require.Equal(t, []uint64{1}, c.rec(m).seqs(mB), "member %v", m)
		require.False(t, c.p(m).CutPending(mB), "member %v", m)
	}
}

// TestDepartedSenderNotFoundRefetched: B purged 1..2 after C received
// 1..3 and A only 1. B's MSG_NOT_FOUND marks 2 lost at A, which cannot
// report it yet: 3 is missing (B's repairs of it are lost), so the run's
// end is unknown. B crashes. Once B has departed, 2 is missing again at
// A (its report shows it; before, it counted as received), C holds 2 and 3, so the cut declares nothing
// lost and A fetches them from C: A and C end with the same record of B,
// 1..3 delivered and nothing lost, where A would otherwise report 2 lost.
func TestDepartedSenderNotFoundRefetched(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mA, mC, mB)
	ds := c.send(mB, true, "b1", "b2", "b3")
	c.deliverTo(dataOf(t, ds, 1), mA)
	for _, s := range []uint64{1, 2, 3} {
		c.deliverTo(dataOf(t, ds, s), mC)
	}
	c.poll()
	_, err := c.p(mB).ForcePurge(mB, 2)
	require.NoError(t, err)
	no3 := func(d dgram, to digest.Member) bool {
		if d.from != mB || to != mA || d.typ != wire.TypeData {
			return false
		}
		_, first, last := dataRange(t, d)
		return first <= 3 && 3 <= last
	}
	c.run(c.now+500*time.Millisecond, no3)
	require.NotZero(t, c.p(mA).Stats().NotFoundConfirmed)
	require.Empty(t, c.rec(mA).lostOf(mB), "2 is lost, the run's end undecided")
	c.crash(mB)
	r := c.report(mA, mB)
	require.Equal(t, report{delivered: 1, received: 2, gaps: []rangeU{{2, 2}}}, r)
	for _, m := range []digest.Member{mA, mC} {
		c.applyCut(m, mB, 3)
	}
	c.run(c.now+time.Second, nil)
	requireSameLoss(t, c, nil, []uint64{1, 2, 3})
}

// TestOnLostHook: Config.OnLost is told of exactly the ranges the handler's
// Lost gets, each just before it.
func TestOnLostHook(t *testing.T) {
	var hooked []lostEvent
	var c *cluster
	c = newCluster(t, func(cfg *Config) {
		cfg.SendWindow, cfg.RecvWindow, cfg.MaxBundle = 512, 512, 8
		if cfg.Self == mA {
			cfg.OnLost = func(s digest.Member, from, to uint64) {
				// The handler has not been told of this range yet.
				require.Len(t, c.rec(mA).lostOf(s), len(hooked))
				hooked = append(hooked, lostEvent{s, from, to})
			}
		}
	}, mB, mA, mC)
	c.send(mB, false, payloads("b", 1, 200)...) // nobody gets it
	c.poll()
	purgeAndSend(t, c, 150, "b201")
	require.Equal(t, []lostEvent{{mB, 1, 150}}, hooked)
	require.Equal(t, hooked, c.rec(mA).lostOf(mB))
}

// TestCapturePendingLost: A's window holds 64 of B's seqnos and B purged
// 1..150 of what A lacks. The run reaches A's window's capacity: the
// window consumes what fits silently and Poll reports nothing until the
// run's end is known, then [1,150] once. A digest captured in between (a
// state transfer's) must say delivered 0: the application was told
// nothing of 1..150, and a requester installing the digest with the state
// must still get them (reported lost) rather than skip them.
func TestCapturePendingLost(t *testing.T) {
	c := unseenByA64(t)
	_, err := c.p(mB).ForcePurge(mB, 150)
	require.NoError(t, err)
	c.deliver(c.send(mB, false, "b201"), nil)
	a := c.p(mA)
	seen := false
	c.run(c.now+2*time.Second, func(dgram, digest.Member) bool {
		st, _ := a.WindowState(mB)
		if seen || st.Delivered == 0 || st.Delivered >= 150 {
			return false
		}
		seen = true
		require.Empty(t, c.rec(mA).lostOf(mB), "reported before its end is known")
		id, d := a.CaptureDigest("test", c.now)
		a.ReleaseCapture(id)
		e, ok := d.Lookup(mB)
		require.True(t, ok)
		require.Equal(t, uint64(0), e.Delivered, "window delivered %d", st.Delivered)
		cons, _ := a.Consumed(mB)
		require.Equal(t, uint64(0), cons)
		return false
	})
	require.True(t, seen, "the window never consumed part of the run")
	require.Equal(t, []lostEvent{{mB, 1, 150}}, c.rec(mA).lostOf(mB))
	require.Equal(t, span(151, 201), c.rec(mA).seqs(mB))
}
