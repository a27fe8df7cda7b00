package nakack

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/stretchr/testify/require"
)

// sendFrag has C send m1, m2, a message of frags fragments (seqnos 3..)
// and one more small message, one datagram each, and returns them.
func sendFrag(t *testing.T, c *cluster, frags int) []dgram {
	t.Helper()
	big := bytes.Repeat([]byte("x"), 1200*frags) // frags fragments of the 1400-byte pool
	p := c.p(mC)
	for _, pl := range [][]byte{[]byte("m1"), []byte("m2"), big, []byte("after")} {
		_, err := p.Send(pl, c.now)
		require.NoError(t, err)
	}
	p.Flush(c.now)
	ds := c.take()
	require.Equal(t, uint64(3+frags+1), p.NextSeq(), "m1, m2, %d fragments, one more", frags)
	return ds
}

// noRepairTo drops every datagram to or multicast for m that is not C's.
func noRepairTo(m digest.Member) func(d dgram, to digest.Member) bool {
	return func(d dgram, to digest.Member) bool { return to == m && d.from != mC }
}

// TestCutInsideFragmentedMessage: C's fragmented message 3..5 straddles
// the cut (4, the highest seqno a survivor received: A holds 1..4, B only
// 1..3). Nobody can ever complete it: both survivors must report 3..4 lost
// (its first fragment to the cut) exactly once, after delivering 1 and 2,
// and nothing beyond the cut. Before the fix, A had consumed fragments 3
// and 4 and would have acknowledged the cut at once: CutPending holds the
// acknowledgement until Poll reported the range.
func TestCutInsideFragmentedMessage(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mA, mB, mC)
	ds := sendFrag(t, c, 3)
	for _, s := range []uint64{1, 2, 3, 4} {
		c.deliverTo(dataOf(t, ds, s), mA)
	}
	for _, s := range []uint64{1, 2, 3} {
		c.deliverTo(dataOf(t, ds, s), mB)
	}
	c.crash(mC)
	c.run(c.now+100*time.Millisecond, nil)
	ra, rb := c.report(mA, mC), c.report(mB, mC)
	require.Equal(t, report{delivered: 4, received: 4}, ra, "A consumed fragments 3 and 4")
	require.Equal(t, report{delivered: 3, received: 3}, rb)
	require.True(t, c.p(mA).CutPending(mC) == false, "no cut yet")
	cut := uint64(4) // gms fixCut: highest received; nothing lost (A holds 4)
	c.applyCut(mA, mC, cut)
	require.True(t, c.p(mA).CutPending(mC), "A: delivered reached the cut, the message is not reported yet")
	c.applyCut(mB, mC, cut)
	c.run(c.now+time.Second, nil)
	// The message's last fragment and the next message arrive late: refused.
	c.deliverTo(dataOf(t, ds, 5), mA)
	c.deliverTo(dataOf(t, ds, 5), mB)
	c.deliverTo(dataOf(t, ds, 6), mB)
	c.run(c.now+time.Second, nil)
	for _, m := range c.order {
		require.Equal(t, []uint64{1, 2}, c.rec(m).seqs(mC), "member %v", m)
		require.Equal(t, []lostEvent{{mC, 3, 4}}, c.rec(m).lostOf(mC), "member %v: first fragment to the cut, once", m)
		require.False(t, c.p(m).CutPending(mC), "member %v", m)
		e, _ := c.p(m).WindowState(mC)
		require.Equal(t, cut, e.Delivered, "member %v", m)
		require.Equal(t, cut, e.Received, "member %v", m)
		_, err := c.p(m).CloseWindow(mC)
		require.NoError(t, err)
	}
	require.Equal(t, uint64(1), c.p(mA).Stats().LostRanges)
	require.Equal(t, uint64(2), c.p(mA).Stats().LostMessages)
}

// TestCutInsideFragmentedMessageWithLostFragment: C's message 3..7 (five
// fragments) straddles the cut 6; nobody holds fragment 4 (declared lost),
// A holds 3, 5, 6, B holds 3 and 6 (or only 3) and gets the rest from A
// only after the fix, polling in between. Both report 3..6 lost in one
// event: the lost run 4 is widened over the held fragments of the same
// message, but never beyond the cut, and not before B holds everything up
// to the cut (else B would report 3..4 then 5..6).
func TestCutInsideFragmentedMessageWithLostFragment(t *testing.T) {
	for _, bHolds := range [][]uint64{{1, 2, 3, 6}, {1, 2, 3}} {
		t.Run(fmt.Sprint(bHolds), func(t *testing.T) { testCutWithLostFragment(t, bHolds) })
	}
}

func testCutWithLostFragment(t *testing.T, bHolds []uint64) {
	c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mA, mB, mC)
	ds := sendFrag(t, c, 5)
	for _, s := range []uint64{1, 2, 3, 5, 6} {
		c.deliverTo(dataOf(t, ds, s), mA)
	}
	for _, s := range bHolds {
		c.deliverTo(dataOf(t, ds, s), mB)
	}
	c.crash(mC)
	c.run(c.now+100*time.Millisecond, noRepairTo(mB))
	ra, rb := c.report(mA, mC), c.report(mB, mC)
	require.Equal(t, []rangeU{{4, 4}}, ra.gaps)
	if rb.received == 6 {
		require.Equal(t, []rangeU{{4, 5}}, rb.gaps)
	}
	cut, lost := uint64(6), rangeU{4, 4}
	c.applyCut(mA, mC, cut, lost)
	c.applyCut(mB, mC, cut, lost)
	c.poll()
	require.Empty(t, c.rec(mB).lostOf(mC), "B waits for 5 before consuming the lost run")
	c.run(c.now+time.Second, nil)
	c.deliverTo(dataOf(t, ds, 7), mA)
	c.deliverTo(dataOf(t, ds, 7), mB)
	c.run(c.now+time.Second, nil)
	for _, m := range c.order {
		require.Equal(t, []uint64{1, 2}, c.rec(m).seqs(mC), "member %v", m)
		require.Equal(t, []lostEvent{{mC, 3, 6}}, c.rec(m).lostOf(mC), "member %v", m)
		require.False(t, c.p(m).CutPending(mC), "member %v", m)
		e, _ := c.p(m).WindowState(mC)
		require.Equal(t, cut, e.Delivered, "member %v", m)
	}
}

// TestCutAtLastFragment: the cut falls exactly on the last fragment of
// C's message 3..5 (A holds it all, B only 3): the message is complete,
// B fetches 4 and 5 from A, both deliver it and report nothing lost.
func TestCutAtLastFragment(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mA, mB, mC)
	ds := sendFrag(t, c, 3)
	for _, s := range []uint64{1, 2, 3, 4, 5} {
		c.deliverTo(dataOf(t, ds, s), mA)
	}
	for _, s := range []uint64{1, 2, 3} {
		c.deliverTo(dataOf(t, ds, s), mB)
	}
	c.crash(mC)
	c.run(c.now+100*time.Millisecond, nil)
	cut := uint64(5)
	c.applyCut(mA, mC, cut)
	c.applyCut(mB, mC, cut)
	c.run(c.now+time.Second, nil)
	c.deliverTo(dataOf(t, ds, 6), mB)
	c.run(c.now+time.Second, nil)
	for _, m := range c.order {
		require.Equal(t, []uint64{1, 2, 3}, c.rec(m).seqs(mC), "member %v", m)
		require.Empty(t, c.rec(m).lostOf(mC), "member %v", m)
		require.False(t, c.p(m).CutPending(mC), "member %v", m)
		e, _ := c.p(m).WindowState(mC)
		require.Equal(t, cut, e.Delivered, "member %v", m)
	}
}

// TestMergeAfterCutInsideFragmentedMessage: A cut C inside C's message
// 3..5 (cut 4: 3..4 reported lost) and closed its window; a merge brings C
// back and A's window resumes at 4: fragment 5 (an orphan now) is reported
// lost as 5..5, never 3..4 again, and C's next message is delivered.
func TestMergeAfterCutInsideFragmentedMessage(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mA, mC)
	ds := sendFrag(t, c, 3)
	for _, s := range []uint64{1, 2, 3, 4} {
		c.deliverTo(dataOf(t, ds, s), mA)
	}
	a := c.p(mA)
	a.InstallView(View{ID: digest.ViewID{Coord: mA, Counter: 2}, Members: []digest.Member{mA}}, digest.Digest{}, c.now)
	require.NoError(t, a.CompleteCut(mC, 4, c.now))
	a.Poll(c.rec(mA), 100)
	require.Equal(t, []lostEvent{{mC, 3, 4}}, c.rec(mA).lostOf(mC))
	_, err := a.CloseWindow(mC)
	require.NoError(t, err)
	v3 := View{ID: digest.ViewID{Coord: mA, Counter: 3}, Members: []digest.Member{mA, mC}}
	md := digest.NewMutable(v3.Members)
	md.MergeDigest(a.Digest())
	md.MergeDigest(c.p(mC).Digest())
	d, err := md.Complete()
	require.NoError(t, err)
	a.InstallMergeView(v3, d, c.now)
	c.p(mC).InstallMergeView(v3, d, c.now)
	e, _ := a.WindowState(mC)
	require.Equal(t, uint64(4), e.Delivered, "resumes at the cut")
	c.run(c.now+time.Second, nil)
	require.Equal(t, []uint64{1, 2, 6}, c.rec(mA).seqs(mC))
	require.Equal(t, []lostEvent{{mC, 3, 4}, {mC, 5, 5}}, c.rec(mA).lostOf(mC), "each seqno reported once")
}

// TestOverwriteInsideFragmentedMessageThenCut: B installs a state transfer
// digest that ends inside C's message M (3..7) at 4 (insideDigest: its
// holder never delivers M), then C crashes and the cut falls at the
// highest seqno a survivor received, 4: nothing of M beyond it reached
// anyone. B's skip past M's first fragments must not be silent: whether B
// was reassembling M (holding 3 and 4) or held part of it below the
// digest's point (3), it reports M lost from its first fragment to the
// cut, once, as A (reassembling M) does, and holds its acknowledgement
// (CutPending) until then. (Had B held a fragment beyond the point, it
// would have reported M whole at once, C being alive.) Without a fragment
// of M, B could not tell that the digest ends inside a message: see
// doc.go.
func TestOverwriteInsideFragmentedMessageThenCut(t *testing.T) {
	for _, bHolds := range [][]uint64{{1, 2, 3}, {1, 2, 3, 4}} {
		t.Run(fmt.Sprint(bHolds), func(t *testing.T) {
			c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mA, mB, mC)
			ds := sendFrag(t, c, 5)
			for _, s := range []uint64{1, 2, 3, 4} {
				c.deliverTo(dataOf(t, ds, s), mA)
			}
			for _, s := range bHolds {
				c.deliverTo(dataOf(t, ds, s), mB)
			}
			c.poll()
			require.NoError(t, c.p(mB).OverwriteDigest(insideDigest(t, c.p(mA).Digest(), 4), c.now))
			c.crash(mC)
			c.run(c.now+100*time.Millisecond, nil)
			cut := uint64(4)
			for _, m := range []digest.Member{mA, mB} {
				require.Equal(t, cut, c.report(m, mC).received, "member %v", m)
				c.applyCut(m, mC, cut)
			}
			require.True(t, c.p(mB).CutPending(mC), "B: at the cut, M not reported yet")
			c.run(c.now+time.Second, nil)
			for _, m := range []digest.Member{mA, mB} {
				require.Equal(t, []lostEvent{{mC, 3, cut}}, c.rec(m).lostOf(mC), "member %v: M from its first fragment to the cut, once", m)
				require.False(t, c.p(m).CutPending(mC), "member %v", m)
				e, _ := c.p(m).WindowState(mC)
				require.Equal(t, cut, e.Delivered, "member %v", m)
			}
		})
	}
}
