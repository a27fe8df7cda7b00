package nakack

import (
	"bytes"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/stretchr/testify/require"
)

// crash removes m from the cluster (it sends nothing more) and installs the
// view of the survivors at each of them.
func (c *cluster) crash(m digest.Member) {
	delete(c.nodes, m)
	var rest []digest.Member
	for _, x := range c.order {
		if x != m {
			rest = append(rest, x)
		}
	}
	c.order = rest
	v := View{ID: digest.ViewID{Coord: rest[0], Counter: c.view.ID.Counter + 1}, Members: rest}
	c.view = v
	for _, x := range rest {
		c.p(x).InstallView(v, digest.Digest{}, c.now)
	}
}

// report is a survivor's report for a departed sender's cut, as gms takes
// it (WindowState and Gaps, one step).
type report struct {
	delivered, received uint64
	gaps                []rangeU
}

type rangeU struct{ from, to uint64 }

func (c *cluster) report(m, sender digest.Member) report {
	e, ok := c.p(m).WindowState(sender)
	require.True(c.t, ok)
	r := report{delivered: e.Delivered, received: e.Received}
	for _, g := range c.p(m).Gaps(sender, nil) {
		r.gaps = append(r.gaps, rangeU{g.From, g.To})
	}
	return r
}

// applyCut is a survivor applying the coordinator's fix (gms NakackProtocol
// order: CompleteCut, then DeclareLost per range).
func (c *cluster) applyCut(m, sender digest.Member, cut uint64, lost ...rangeU) {
	require.NoError(c.t, c.p(m).CompleteCut(sender, cut, c.now))
	for _, r := range lost {
		_, err := c.p(m).DeclareLost(sender, r.from, r.to, c.now)
		require.NoError(c.t, err)
	}
}

// dataOf returns the data datagram (DATA or FRAG) of ds starting at first.
func dataOf(t *testing.T, ds []dgram, first uint64) dgram {
	t.Helper()
	for _, d := range ds {
		if _, f, _ := dataRange(t, d); f == first {
			return d
		}
	}
	t.Fatalf("no datagram at %d", first)
	return dgram{}
}

// TestDelayedDatagramOfDepartedSenderDeclaredLost: C crashes; the
// coordinator A fixes its cut at 5 from the survivors' reports and declares
// 3..4 lost (nobody reported them). C's datagrams 3, 4 and 6 were delayed in
// the network: 3 reaches B after B reported and before B applied the fix
// (the coordinator has already declared it lost), 4 reaches B after the
// fix, 6 (beyond the cut) reaches both after it. None is delivered: every
// survivor reports 3..4 lost exactly once and delivers 1, 2, 5: the same
// prefix. The refused messages are counted in Drops.Departed.
func TestDelayedDatagramOfDepartedSenderDeclaredLost(t *testing.T) {
	c := newCluster(t, nil, mA, mB, mC)
	ds := c.send(mC, true, payloads("c", 1, 6)...)
	require.Len(t, ds, 6)
	for _, s := range []uint64{1, 2} {
		c.deliverTo(dataOf(t, ds, s), mA)
		c.deliverTo(dataOf(t, ds, s), mB)
	}
	c.deliverTo(dataOf(t, ds, 5), mB)
	c.crash(mC)
	c.run(c.now+100*time.Millisecond, nil)

	// The coordinator collects the reports and fixes the cut.
	ra, rb := c.report(mA, mC), c.report(mB, mC)
	require.Equal(t, uint64(2), ra.received)
	require.Equal(t, uint64(5), rb.received)
	require.Equal(t, []rangeU{{3, 4}}, rb.gaps)
	cut, lost := uint64(5), rangeU{3, 4} // what gms fixCut computes from them
	c.applyCut(mA, mC, cut, lost)

	// 3 reaches B now: reported missing, declared lost, fix still in flight.
	c.deliverTo(dataOf(t, ds, 3), mB)
	c.run(c.now+10*time.Millisecond, nil)
	c.applyCut(mB, mC, cut, lost)
	c.deliverTo(dataOf(t, ds, 4), mB)
	c.deliverTo(dataOf(t, ds, 4), mA)
	c.deliverTo(dataOf(t, ds, 6), mA)
	c.deliverTo(dataOf(t, ds, 6), mB)
	c.run(c.now+time.Second, nil)

	for _, m := range c.order {
		require.Equal(t, []uint64{1, 2, 5}, c.rec(m).seqs(mC), "member %v", m)
		require.Equal(t, []lostEvent{{mC, 3, 4}}, c.rec(m).lostOf(mC), "member %v", m)
		e, _ := c.p(m).WindowState(mC)
		require.Equal(t, cut, e.Received, "member %v: nothing beyond the cut is held", m)
		require.Equal(t, cut, e.Delivered, "member %v", m)
		require.Empty(t, c.p(m).Gaps(mC, nil), "member %v", m)
	}
	require.Equal(t, uint64(3), c.p(mB).Stats().Drops.Departed, "B: 3 (before the fix), 4 (lost), 6 (beyond the cut)")
	require.Equal(t, uint64(2), c.p(mA).Stats().Drops.Departed, "A: 4 (lost), 6 (beyond the cut)")
	for _, m := range c.order {
		_, err := c.p(m).CloseWindow(mC)
		require.NoError(t, err)
	}
}

// TestDepartedSenderPeerRepairAccepted: data of a departed sender below the
// cut that is not declared lost is still accepted, from a peer's repair
// before and after the fix, and from the departed sender itself once the
// cut is fixed (a graceful leaver answers retransmissions until its cut
// closes).
func TestDepartedSenderPeerRepairAccepted(t *testing.T) {
	c := newCluster(t, nil, mA, mB, mC)
	ds := c.send(mC, true, payloads("c", 1, 5)...)
	for _, s := range []uint64{1, 2, 3} {
		c.deliverTo(dataOf(t, ds, s), mA)
	}
	c.deliverTo(dataOf(t, ds, 1), mB)
	c.deliverTo(dataOf(t, ds, 3), mB)
	c.crash(mC)
	// B repairs 2 from A before the fix (a gap below its received).
	c.run(c.now+100*time.Millisecond, nil)
	require.Equal(t, []uint64{1, 2, 3}, c.rec(mB).seqs(mC))
	// 4 reaches B before the fix: refused (sent by the departed sender
	// itself, not yet covered by a report's cut).
	c.deliverTo(dataOf(t, ds, 4), mB)
	require.Equal(t, uint64(1), c.p(mB).Stats().Drops.Departed)
	ra, rb := c.report(mA, mC), c.report(mB, mC)
	require.Equal(t, uint64(3), ra.received)
	require.Equal(t, uint64(3), rb.received)
	// A graceful leaver announced 5: the cut is 5, nothing declared lost.
	for _, m := range c.order {
		c.applyCut(m, mC, 5)
	}
	// The leaver's answers (its own datagrams) are accepted after the fix.
	c.deliverTo(dataOf(t, ds, 4), mA)
	c.deliverTo(dataOf(t, ds, 5), mB)
	c.run(c.now+time.Second, nil)
	for _, m := range c.order {
		require.Equal(t, span(1, 5), c.rec(m).seqs(mC), "member %v", m)
		require.Empty(t, c.rec(m).lostOf(mC), "member %v", m)
	}
}

// TestDelayedFragmentOfDepartedSenderDeclaredLost: a fragmented message
// (3..5) straddles the range declared lost (4..5): its first fragment is
// held by both survivors, the other two were delayed and reach A before the
// fix and B after it. Both report the whole message lost once and deliver
// the same prefix.
func TestDelayedFragmentOfDepartedSenderDeclaredLost(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mA, mB, mC)
	big := bytes.Repeat([]byte("x"), 3000) // 3 fragments
	p := c.p(mC)
	for _, pl := range [][]byte{[]byte("m1"), []byte("m2"), big, []byte("m6"), []byte("m7")} {
		_, err := p.Send(pl, c.now)
		require.NoError(t, err)
	}
	p.Flush(c.now)
	ds := c.take()
	require.Equal(t, uint64(8), p.NextSeq())
	for _, s := range []uint64{1, 2, 3} {
		c.deliverTo(dataOf(t, ds, s), mA)
		c.deliverTo(dataOf(t, ds, s), mB)
	}
	c.deliverTo(dataOf(t, ds, 6), mB)
	c.crash(mC)
	c.run(c.now+100*time.Millisecond, nil)
	ra, rb := c.report(mA, mC), c.report(mB, mC)
	require.Equal(t, uint64(3), ra.received)
	require.Equal(t, []rangeU{{4, 5}}, rb.gaps)
	cut, lost := uint64(6), rangeU{4, 5}
	c.deliverTo(dataOf(t, ds, 4), mA) // delayed, after A's report
	c.applyCut(mA, mC, cut, lost)
	c.deliverTo(dataOf(t, ds, 5), mA)
	c.run(c.now+10*time.Millisecond, nil)
	c.applyCut(mB, mC, cut, lost)
	c.deliverTo(dataOf(t, ds, 4), mB)
	c.deliverTo(dataOf(t, ds, 5), mB)
	c.deliverTo(dataOf(t, ds, 7), mA)
	c.deliverTo(dataOf(t, ds, 7), mB)
	c.run(c.now+time.Second, nil)
	for _, m := range c.order {
		require.Equal(t, []uint64{1, 2, 6}, c.rec(m).seqs(mC), "member %v", m)
		require.Equal(t, []lostEvent{{mC, 3, 5}}, c.rec(m).lostOf(mC), "member %v: the whole message, once", m)
		e, _ := c.p(m).WindowState(mC)
		require.Equal(t, cut, e.Received, "member %v", m)
		require.Equal(t, uint64(3), c.p(m).Stats().Drops.Departed, "member %v: 4, 5, 7", m)
	}
}
