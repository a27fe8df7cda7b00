package nakack

import (
	"bytes"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// TestFragments: a message larger than a bundle is split into fragments with
// their own seqnos; a lost fragment is repaired alone; the message is
// delivered once, whole, under its first seqno, interleaved in order with
// small messages.
func TestFragments(t *testing.T) {
	c := newCluster(t, nil, mB, mA)
	big := bytes.Repeat([]byte("0123456789"), 500) // 5000 B: 4 fragments of 1340
	b := c.p(mB)
	_, err := b.Send([]byte("small1"), c.now)
	require.NoError(t, err)
	seq, err := b.Send(big, c.now)
	require.NoError(t, err)
	require.Equal(t, uint64(2), seq)
	_, err = b.Send([]byte("small2"), c.now)
	require.NoError(t, err)
	b.Flush(c.now)
	require.Equal(t, uint64(7), b.NextSeq())
	ds := c.take()
	require.Len(t, ds, 6)
	// Fragment 3 (seqno 4) lost once.
	c.deliver(ds, func(d dgram, to digest.Member) bool {
		_, first, _ := dataRange(t, d)
		return d.typ == wire.TypeFrag && first == 4
	})
	c.poll()
	require.Equal(t, []uint64{1}, c.rec(mA).seqs(mB))
	after := c.run(c.now+time.Second, nil)
	require.Equal(t, []wire.Range{rg(4, 4)}, xmitRanges(t, after, mB))
	require.Equal(t, []uint64{1, 2, 6}, c.rec(mA).seqs(mB))
	require.Equal(t, string(big), c.rec(mA).dels[1].payload)
	require.Equal(t, string(big), c.rec(mB).dels[1].payload, "delivered to self whole")
}

// TestFragmentLostRangeReportsWholeMessage: a lost range touching a
// fragmented message reports the whole message lost, once.
func TestFragmentLostRangeReportsWholeMessage(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mB, mA)
	big := bytes.Repeat([]byte("x"), 4000) // 3 fragments
	b := c.p(mB)
	for _, p := range [][]byte{[]byte("m1"), big, []byte("m5"), big, []byte("m9")} {
		_, err := b.Send(p, c.now)
		require.NoError(t, err)
	}
	b.Flush(c.now)
	ds := c.take()
	require.Equal(t, uint64(10), b.NextSeq())
	// A gets 1, 2 (frag 0 of 2..4), 5, 8 (frag 2 of 6..8), 9; B purged 3..7.
	for _, d := range ds {
		if _, first, _ := dataRange(t, d); first == 1 || first == 2 || first == 5 || first == 8 || first == 9 {
			c.deliverTo(d, mA)
		}
	}
	b.Poll(c.rec(mB), 100)
	_, err := b.ForcePurge(mB, 7)
	require.NoError(t, err)
	c.run(c.now+time.Second, nil)
	a := c.rec(mA)
	require.Equal(t, []uint64{1, 5, 9}, a.seqs(mB))
	require.Equal(t, []lostEvent{{mB, 2, 4}, {mB, 6, 8}}, a.lostOf(mB),
		"each message a lost range touches is reported whole, once")
}

// TestDepartedSenderCut: a sender leaves; survivors complete its messages
// from each other up to the cut (any holder repairs, never MSG_NOT_FOUND),
// what no survivor holds is declared lost, and the window closes.
func TestDepartedSenderCut(t *testing.T) {
	c := newCluster(t, nil, mA, mB, mC)
	ds := c.send(mC, true, payloads("c", 1, 6)...)
	// A gets 1..4, B gets 1..2 and 4..5; nobody but C got 6.
	for i, d := range ds {
		s := uint64(i + 1)
		if s <= 4 {
			c.deliverTo(d, mA)
		}
		if s <= 2 || s == 4 || s == 5 {
			c.deliverTo(d, mB)
		}
	}
	// C crashes: the view excludes it.
	delete(c.nodes, mC)
	c.order = []digest.Member{mA, mB}
	v2 := View{ID: digest.ViewID{Coord: mA, Counter: 2}, Members: []digest.Member{mA, mB}}
	for _, m := range c.order {
		c.p(m).InstallView(v2, digest.Digest{}, c.now)
	}
	c.run(c.now+100*time.Millisecond, nil)
	// The coordinator collects highest received and fixes the cut at 5.
	ha, _ := c.p(mA).HighestReceived(mC)
	hb, _ := c.p(mB).HighestReceived(mC)
	require.Equal(t, uint64(4), ha)
	require.Equal(t, uint64(5), hb)
	for _, m := range c.order {
		require.NoError(t, c.p(m).CompleteCut(mC, 5, c.now))
	}
	c.run(c.now+time.Second, nil)
	for _, m := range c.order {
		require.Equal(t, span(1, 5), c.rec(m).seqs(mC), "member %v", m)
		require.Zero(t, c.p(m).Stats().MsgNotFoundSent)
	}
	// A range no survivor holds (here none) would be declared lost.
	n, err := c.p(mA).DeclareLost(mC, 6, 5, c.now)
	require.NoError(t, err)
	require.Zero(t, n)
	for _, m := range c.order {
		_, err := c.p(m).CloseWindow(mC)
		require.NoError(t, err)
		_, ok := c.p(m).WindowState(mC)
		require.False(t, ok)
	}
	after := c.run(c.now+time.Second, nil)
	require.Empty(t, xmitRanges(t, after, mC))
}

// TestMergeDigestReportsPurgedAsLost: merging a digest whose holder purged
// what we lack reports it lost once and fetches the rest; our own window is
// never touched.
func TestMergeDigestReportsPurgedAsLost(t *testing.T) {
	c := newCluster(t, nil, mB, mA)
	ds := c.send(mB, true, payloads("b", 1, 10)...)
	c.deliver(ds[:3], nil)
	c.deliver(ds[3:], func(d dgram, to digest.Member) bool { return to == mA })
	c.poll()
	b := c.p(mB)
	_, err := b.ForcePurge(mB, 6)
	require.NoError(t, err)
	own, _ := c.p(mA).WindowState(mA)
	c.p(mA).MergeDigest(digest.New([]digest.Entry{
		{Member: mB, Low: 6, Delivered: 10, Received: 10},
		{Member: mA, Low: 99, Delivered: 99, Received: 99},
	}), c.now)
	ownAfter, _ := c.p(mA).WindowState(mA)
	require.Equal(t, own, ownAfter)
	c.run(c.now+time.Second, nil)
	require.Equal(t, []lostEvent{{mB, 4, 6}}, c.rec(mA).lostOf(mB))
	require.Equal(t, cat(span(1, 3), span(7, 10)), c.rec(mA).seqs(mB))
	require.Zero(t, b.Stats().MsgNotFoundSent)
}

// TestBackPressure: Send refuses before claiming a seqno when the own
// retention window is full, and succeeds again after stability purges.
func TestBackPressure(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.SendWindow, cfg.RecvWindow = 16, 32 }, mA, mB)
	a := c.p(mA)
	for range 16 {
		_, err := a.Send([]byte("x"), c.now)
		require.NoError(t, err)
	}
	_, err := a.Send([]byte("x"), c.now)
	require.ErrorIs(t, err, ErrBackPressure)
	require.Equal(t, uint64(17), a.NextSeq(), "nothing claimed")
	a.Flush(c.now)
	c.run(c.now+time.Millisecond, nil)
	for _, m := range c.order {
		c.p(m).sendStable(c.now)
	}
	c.run(c.now+time.Millisecond, nil)
	seq, err := a.Send([]byte("x"), c.now)
	require.NoError(t, err)
	require.Equal(t, uint64(17), seq)
	require.Equal(t, uint64(1), a.Stats().BackPressure)
}

// TestPendingNonMember: data from a sender without a window waits in the
// bounded queue and is inserted once a view gives it a window, or dropped.
func TestPendingNonMember(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.PendingMax = 2 }, mA, mB)
	cfg := testConfig(mC)
	cfg.Pool = c.pool
	cp, err := New(cfg)
	require.NoError(t, err)
	v2 := View{ID: digest.ViewID{Coord: mA, Counter: 2}, Members: []digest.Member{mA, mB, mC}}
	cp.InstallView(v2, digest.New([]digest.Entry{{Member: mA}, {Member: mB}, {Member: mC}}), 0)
	for _, s := range payloads("c", 1, 3) {
		_, err := cp.Send([]byte(s), 0)
		require.NoError(t, err)
		cp.Flush(0)
	}
	for _, o := range cp.Outbox() {
		c.deliverTo(dgram{from: mC, data: append([]byte(nil), o.Buf.Bytes()...)}, mA)
		o.Buf.Release()
	}
	cp.ClearOutbox()
	a := c.p(mA)
	require.Equal(t, uint64(2), a.Stats().Pending)
	require.Equal(t, uint64(1), a.Stats().Drops.NotMember)
	a.InstallView(v2, digest.Digest{}, c.now)
	a.Poll(c.rec(mA), 100)
	require.Equal(t, []uint64{1, 2}, c.rec(mA).seqs(mC))
	require.Equal(t, uint64(2), a.Stats().PendingInserted)
}

// TestGaps: Gaps lists the missing ranges of a window in (delivered,
// received], nothing for self or an unknown member, and allocates nothing
// into a buffer with room.
func TestGaps(t *testing.T) {
	c := newCluster(t, nil, mB, mA)
	ds := c.send(mB, true, payloads("b", 1, 19)...)
	held := map[uint64]bool{1: true, 2: true, 3: true, 4: true, 6: true, 8: true, 14: true, 15: true, 16: true, 17: true, 19: true}
	for i, d := range ds {
		if held[uint64(i+1)] {
			c.deliverTo(d, mA)
		}
	}
	a := c.p(mA)
	a.Poll(c.rec(mA), 100)
	require.Equal(t, []wire.Range{rg(5, 5), rg(7, 7), rg(9, 13), rg(18, 18)}, a.Gaps(mB, nil))
	require.Empty(t, a.Gaps(mA, nil))
	require.Empty(t, a.Gaps(mC, nil))
	buf := make([]wire.Range, 0, 8)
	require.Zero(t, testing.AllocsPerRun(100, func() { buf = a.Gaps(mB, buf[:0]) }))
}

// TestDepartedSenderOpsRefuseLiveMember: CompleteCut and CloseWindow are
// for departed senders only (a stale cut must never close a live window).
func TestDepartedSenderOpsRefuseLiveMember(t *testing.T) {
	c := newCluster(t, nil, mA, mB)
	require.ErrorIs(t, c.p(mA).CompleteCut(mB, 5, c.now), ErrLive)
	_, err := c.p(mA).CloseWindow(mB)
	require.ErrorIs(t, err, ErrLive)
	_, ok := c.p(mA).WindowState(mB)
	require.True(t, ok)
}

// splitAndClose has C send 1..5 to everyone, then splits c's members
// {A,B} | {C,D}: each side installs a view of its own, cuts the other
// side's windows at the highest seqno it received and closes them. It
// returns the drop rule of the partition.
func splitAndClose(t *testing.T, c *cluster) func(d dgram, to digest.Member) bool {
	t.Helper()
	c.deliver(c.send(mC, false, payloads("c", 1, 5)...), nil)
	c.run(c.now+10*time.Millisecond, nil)
	side := func(m digest.Member) int {
		if m == mA || m == mB {
			return 0
		}
		return 1
	}
	split := func(d dgram, to digest.Member) bool { return side(d.from) != side(to) }
	vAB := View{ID: digest.ViewID{Coord: mA, Counter: 2}, Members: []digest.Member{mA, mB}}
	vCD := View{ID: digest.ViewID{Coord: mC, Counter: 2}, Members: []digest.Member{mC, mD}}
	for _, v := range []View{vAB, vCD} {
		for _, m := range v.Members {
			c.p(m).InstallView(v, digest.Digest{}, c.now)
		}
		for _, g := range c.order {
			if side(g) == side(v.Members[0]) {
				continue
			}
			var cut uint64
			for _, m := range v.Members {
				h, _ := c.p(m).HighestReceived(g)
				cut = max(cut, h)
			}
			for _, m := range v.Members {
				require.NoError(t, c.p(m).CompleteCut(g, cut, c.now))
			}
		}
	}
	c.run(c.now+100*time.Millisecond, split)
	for _, m := range c.order {
		for _, g := range c.order {
			if side(g) != side(m) {
				_, err := c.p(m).CloseWindow(g)
				require.NoError(t, err)
			}
		}
	}
	return split
}

// mergeAfterSplit splits c's members (splitAndClose), has C send 6..20
// (D gets them) and A send 1..4 during the partition, has C's side purge C
// up to 12, and returns the merge view and its digest.
func mergeAfterSplit(t *testing.T, c *cluster) (View, digest.Digest) {
	t.Helper()
	split := splitAndClose(t, c)
	c.send(mC, false, payloads("c", 6, 20)...)
	c.send(mA, false, payloads("a", 1, 4)...)
	c.run(c.now+100*time.Millisecond, split)
	for _, m := range []digest.Member{mC, mD} {
		_, err := c.p(m).ForcePurge(mC, 12)
		require.NoError(t, err)
	}
	md := digest.NewMutable([]digest.Member{mA, mB, mC, mD})
	md.MergeDigest(c.p(mA).Digest())
	md.MergeDigest(c.p(mC).Digest())
	d, err := md.Complete()
	require.NoError(t, err)
	return View{ID: digest.ViewID{Coord: mA, Counter: 3}, Members: []digest.Member{mA, mB, mC, mD}}, d
}

// TestInstallMergeViewResumesAtClosedPoint: {A,B} | {C,D}. Each side cuts
// and closes the other's windows; C keeps sending and its side purges part
// of it. The merge view with its digest resumes C's window at the point A
// and B closed it: what C's side purged is reported lost once, the rest is
// fetched, nothing is delivered twice and no window starts at 0.
func TestInstallMergeViewResumesAtClosedPoint(t *testing.T) {
	c := newCluster(t, nil, mA, mB, mC, mD)
	v3, d := mergeAfterSplit(t, c)
	for _, m := range c.order {
		c.p(m).InstallMergeView(v3, d, c.now)
	}
	for _, m := range []digest.Member{mA, mB} {
		e, ok := c.p(m).WindowState(mC)
		require.True(t, ok)
		require.Equal(t, uint64(12), e.Delivered, "resumes above the holder's low, never at 0")
	}
	c.run(c.now+time.Second, nil)
	for _, m := range []digest.Member{mA, mB} {
		require.Equal(t, cat(span(1, 5), span(13, 20)), c.rec(m).seqs(mC), "member %v", m)
		require.Equal(t, []lostEvent{{mC, 6, 12}}, c.rec(m).lostOf(mC), "member %v", m)
	}
	for _, m := range []digest.Member{mC, mD} {
		require.Equal(t, span(1, 4), c.rec(m).seqs(mA), "member %v", m)
		require.Empty(t, c.rec(m).lostOf(mA))
	}
	for _, m := range c.order {
		require.Zero(t, c.p(m).Stats().MsgNotFoundSent)
	}
}

// TestMergeDigestUnknownSender: a sender never seen starts at its holder's
// Low, as a joiner's window at its join digest: what it sent before is not
// this member's history and nothing of it is reported lost (the rest up to
// the holder's Received is fetched: TestMergeUnseenMember in gms/), and a
// later merge digest that raises the Low reports lost what lies between,
// once.
func TestMergeDigestUnknownSender(t *testing.T) {
	c := newCluster(t, nil, mA, mB)
	a := c.p(mA)
	a.MergeDigest(digest.New([]digest.Entry{{Member: mC, Low: 7, Delivered: 9, Received: 9}}), c.now)
	e, ok := a.WindowState(mC)
	require.True(t, ok)
	require.Equal(t, uint64(7), e.Delivered)
	a.Poll(c.rec(mA), 100)
	require.Empty(t, c.rec(mA).lostOf(mC))
	a.MergeDigest(digest.New([]digest.Entry{{Member: mC, Low: 9, Delivered: 9, Received: 9}}), c.now)
	a.Poll(c.rec(mA), 100)
	require.Equal(t, []lostEvent{{mC, 8, 9}}, c.rec(mA).lostOf(mC))
}

// TestDepartedRepairSuppressed: the survivors holding a departed sender's
// messages repair after a random delay and suppress what another survivor
// repaired meanwhile, so a request is answered about once, not once per
// holder; without the delay every holder answers.
func TestDepartedRepairSuppressed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		jitter time.Duration
		copies uint64 // repairs sent in total for 10 messages
	}{
		{"delayed", 2 * time.Millisecond, 10},
		{"at once", -1, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, func(cfg *Config) { cfg.RepairJitter = tc.jitter }, mA, mB, mC, mD)
			ds := c.send(mD, false, payloads("d", 1, 10)...)
			c.deliver(ds, func(_ dgram, to digest.Member) bool { return to == mA })
			delete(c.nodes, mD)
			c.order = []digest.Member{mA, mB, mC}
			v2 := View{ID: digest.ViewID{Coord: mA, Counter: 2}, Members: c.order}
			for _, m := range c.order {
				c.p(m).InstallView(v2, digest.Digest{}, c.now)
				require.NoError(t, c.p(m).CompleteCut(mD, 10, c.now))
			}
			c.run(c.now+time.Second, nil)
			require.Equal(t, span(1, 10), c.rec(mA).seqs(mD))
			var sent, suppressed uint64
			for _, m := range c.order {
				sent += c.p(m).Stats().Retransmitted
				suppressed += c.p(m).Stats().RepairsSuppressed
			}
			require.Equal(t, tc.copies, sent)
			if tc.jitter > 0 {
				require.Equal(t, uint64(10), suppressed)
			}
		})
	}
}

// TestOverwriteDigestNotRetained: a digest that would need re-delivery of
// purged messages is refused by CheckOverwrite and OverwriteDigest alike,
// and OverwriteDigest then changes nothing; a digest at the purge point
// is installed.
func TestOverwriteDigestNotRetained(t *testing.T) {
	c := newCluster(t, nil, mB, mA)
	c.deliver(c.send(mB, false, payloads("b", 1, 5)...), nil)
	c.poll()
	b := c.p(mB)
	_, err := b.ForcePurge(mB, 4)
	require.NoError(t, err)
	before := b.Digest()
	bad := digest.New([]digest.Entry{{Member: mB, Delivered: 3, Received: 3}, {Member: mA}})
	require.ErrorIs(t, b.CheckOverwrite(bad), ErrNotRetained)
	require.ErrorIs(t, b.OverwriteDigest(bad, c.now), ErrNotRetained)
	require.True(t, before.Equal(b.Digest()), "nothing changed")
	require.Zero(t, b.Poll(c.rec(mB), 100))
	good := digest.New([]digest.Entry{{Member: mB, Delivered: 4, Received: 4}, {Member: mA}})
	require.NoError(t, b.CheckOverwrite(good))
	require.NoError(t, b.OverwriteDigest(good, c.now))
	b.Poll(c.rec(mB), 100)
	require.Equal(t, cat(span(1, 5), []uint64{5}), c.rec(mB).seqs(mB), "own 5 re-delivered")
	require.Equal(t, uint64(6), b.NextSeq())
}

// TestCaptureMergeDigestHoldsAtLow: while a merge capture is held, stability
// purges nothing above the captured Low (the other partition will fetch
// it); once released, stability moves on.
func TestCaptureMergeDigestHoldsAtLow(t *testing.T) {
	c := newCluster(t, nil, mA, mB)
	c.deliver(c.send(mB, false, payloads("b", 1, 10)...), nil)
	c.poll()
	stable := func() {
		for _, m := range c.order {
			c.p(m).sendStable(c.now)
		}
		c.run(c.now+time.Millisecond, nil)
	}
	id, d := c.p(mA).CaptureMergeDigest("merge", c.now)
	e, _ := d.Lookup(mB)
	require.Zero(t, e.Low)
	require.Equal(t, uint64(10), e.Delivered)
	stable()
	for _, m := range c.order {
		w, _ := c.p(m).WindowState(mB)
		require.Zero(t, w.Low, "member %v purged under a merge capture", m)
	}
	require.True(t, c.p(mA).ReleaseCapture(id))
	stable()
	for _, m := range c.order {
		w, _ := c.p(m).WindowState(mB)
		require.Equal(t, uint64(10), w.Low, "member %v", m)
	}
}

// TestMergeViewBeforeCutClosed: a departed sender whose cut is still open
// comes back in a merge view: its window is live again (the cut no longer
// limits delivery) and what it sent meanwhile is fetched and delivered.
func TestMergeViewBeforeCutClosed(t *testing.T) {
	c := newCluster(t, nil, mA, mB)
	c.deliver(c.send(mB, false, payloads("b", 1, 3)...), nil)
	vA := View{ID: digest.ViewID{Coord: mA, Counter: 2}, Members: []digest.Member{mA}}
	a := c.p(mA)
	a.InstallView(vA, digest.Digest{}, c.now)
	require.NoError(t, a.CompleteCut(mB, 3, c.now))
	c.send(mB, false, payloads("b", 4, 6)...) // A does not get them
	v3 := View{ID: digest.ViewID{Coord: mA, Counter: 3}, Members: []digest.Member{mA, mB}}
	md := digest.NewMutable(v3.Members)
	md.MergeDigest(a.Digest())
	md.MergeDigest(c.p(mB).Digest())
	d, err := md.Complete()
	require.NoError(t, err)
	a.InstallMergeView(v3, d, c.now)
	c.p(mB).InstallMergeView(v3, d, c.now)
	require.ErrorIs(t, a.CompleteCut(mB, 3, c.now), ErrLive)
	c.run(c.now+time.Second, nil)
	require.Equal(t, span(1, 6), c.rec(mA).seqs(mB))
	require.Empty(t, c.rec(mA).lostOf(mB))
}

// mergeCBack installs at every member the merge view {A, B, C} with the
// digest merged from A's and C's: departed C comes back.
func mergeCBack(t *testing.T, c *cluster) {
	t.Helper()
	v3 := View{ID: digest.ViewID{Coord: mA, Counter: 3}, Members: []digest.Member{mA, mB, mC}}
	md := digest.NewMutable(v3.Members)
	md.MergeDigest(c.p(mA).Digest())
	md.MergeDigest(c.p(mC).Digest())
	d, err := md.Complete()
	require.NoError(t, err)
	for _, m := range c.order {
		c.p(m).InstallMergeView(v3, d, c.now)
	}
}

// TestMergeViewKeepsCutAsBoundWhereCutNotHeld: C sends m1, m2, a
// message of three fragments (3..5) and one more; A holds 1..3, B only 1
// and 2. C departs and the cut is fixed at 3: A delivers 1 and 2 and
// reports 3 lost at once (its message goes on beyond the cut), while B
// still waits for 3 (Poll only, no time for a repair) when a merge view
// brings C back. C has purged its own 1..5 meanwhile, so both learn from
// its MSG_NOT_FOUND that 4..5 (and, for B, 3) are lost. A ended its event
// at the cut; B, which never held the fragment at the cut and so could
// not tell that the cut ended an event there, must report the same
// ranges: the dropped cut is a boundary for B too.
func TestMergeViewKeepsCutAsBoundWhereCutNotHeld(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mA, mB, mC)
	ds := sendFrag(t, c, 3)
	for _, s := range []uint64{1, 2, 3} {
		c.deliverTo(dataOf(t, ds, s), mA)
	}
	for _, s := range []uint64{1, 2} {
		c.deliverTo(dataOf(t, ds, s), mB)
	}
	vAB := View{ID: digest.ViewID{Coord: mA, Counter: 2}, Members: []digest.Member{mA, mB}}
	for _, m := range []digest.Member{mA, mB} {
		c.p(m).InstallView(vAB, digest.Digest{}, c.now)
		c.applyCut(m, mC, 3)
	}
	c.poll()
	require.Equal(t, []lostEvent{{mC, 3, 3}}, c.rec(mA).lostOf(mC), "A: the message at the cut goes on beyond it")
	require.Empty(t, c.rec(mB).lostOf(mC), "B: 3 not held yet")
	_, err := c.p(mC).ForcePurge(mC, 5)
	require.NoError(t, err)
	mergeCBack(t, c)
	c.run(c.now+time.Second, nil)
	for _, m := range []digest.Member{mA, mB} {
		require.Equal(t, []uint64{1, 2, 6}, c.rec(m).seqs(mC), "member %v", m)
		require.Equal(t, []lostEvent{{mC, 3, 3}, {mC, 4, 5}}, c.rec(m).lostOf(mC), "member %v", m)
	}
}

// TestMergeViewBeforeCutClosedDropsItsLostRanges: C departs from the view
// of A and B while neither holds C's 6 and 7 (A lacks 9, B lacks 8), so
// its cut (10) declares 6..7 lost; before either survivor has delivered up
// to the cut (A and B still fetch 9 and 8 from each other), a merge view
// brings C back: it is alive and still holds 6 and 7. The cut is dropped
// with everything it declared and not yet reported: A and B fetch 6 and
// 7 from C and deliver 1..10, reporting nothing lost.
func TestMergeViewBeforeCutClosedDropsItsLostRanges(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mA, mB, mC)
	ds := c.send(mC, true, payloads("c", 1, 10)...)
	for _, d := range ds {
		_, s, _ := dataRange(t, d)
		if s <= 5 || s == 8 || s == 10 {
			c.deliverTo(d, mA)
		}
		if s <= 5 || s == 9 || s == 10 {
			c.deliverTo(d, mB)
		}
	}
	c.poll()
	vAB := View{ID: digest.ViewID{Coord: mA, Counter: 2}, Members: []digest.Member{mA, mB}}
	for _, m := range []digest.Member{mA, mB} {
		c.p(m).InstallView(vAB, digest.Digest{}, c.now)
		c.applyCut(m, mC, 10, rangeU{6, 7})
	}
	c.poll()
	for _, m := range []digest.Member{mA, mB} {
		require.Equal(t, span(1, 5), c.rec(m).seqs(mC), "member %v: held up at its gap", m)
		require.Empty(t, c.rec(m).lostOf(mC), "member %v", m)
	}
	mergeCBack(t, c)
	c.run(c.now+time.Second, nil)
	for _, m := range []digest.Member{mA, mB} {
		require.Equal(t, span(1, 10), c.rec(m).seqs(mC), "member %v", m)
		require.Empty(t, c.rec(m).lostOf(mC), "member %v: nothing of a live sender that holds it reported lost", m)
	}
}

// TestRegularViewAfterMissedMergeView: as TestInstallMergeViewResumesAtClosedPoint,
// but B misses the merge view (and its digest) and installs the next,
// regular view, which brings no digest. C's window resumes at the point B
// closed it, never at 0: B delivers nothing again, learns from C's
// MSG_NOT_FOUND what C's side purged meanwhile (reported lost once) and
// fetches the rest, ending with A's record of C.
func TestRegularViewAfterMissedMergeView(t *testing.T) {
	c := newCluster(t, nil, mA, mB, mC, mD)
	v3, d := mergeAfterSplit(t, c)
	for _, m := range []digest.Member{mA, mC, mD} {
		c.p(m).InstallMergeView(v3, d, c.now)
	}
	v4 := View{ID: digest.ViewID{Coord: mA, Counter: 4}, Members: v3.Members}
	for _, m := range c.order {
		c.p(m).InstallView(v4, digest.Digest{}, c.now)
	}
	e, ok := c.p(mB).WindowState(mC)
	require.True(t, ok)
	require.Equal(t, uint64(5), e.Delivered, "resumes at the closed point, never at 0")
	c.run(c.now+time.Second, nil)
	for _, m := range []digest.Member{mA, mB} {
		require.Equal(t, cat(span(1, 5), span(13, 20)), c.rec(m).seqs(mC), "member %v: nothing delivered twice", m)
		require.Equal(t, []lostEvent{{mC, 6, 12}}, c.rec(m).lostOf(mC), "member %v", m)
	}
}
