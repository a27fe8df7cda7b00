package nakack

import (
	"bytes"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// Joiners and fragmented messages. C sends m1 (1), m2 (2), a message M
// of five fragments (3..7) and "after" (8) (sendFrag); A, the
// coordinator, has consumed up to d and hands its digest to the joiners.
// A digest reports the end of the last whole message its holder delivered
// (sender.reported): with d in 3..6 A is reassembling M and its digest
// says 2, so a joiner delivers M whole like A. A digest can still end
// inside M when its holder's window passes through M without delivering
// it (insideDigest): a joiner given one was not a member when M began for
// that holder either, so it skips M's fragments above the join point
// silently, never reports them lost, and goes on with 8.

// joinFragCluster builds A (coordinator) and C, has C send sendFrag(5)
// and A receive and deliver 1..d; it returns C's datagrams and A's
// digest, captured as for a JoinRsp: its point for C is wholeBefore(d).
func joinFragCluster(t *testing.T, d uint64) (*cluster, []dgram, digest.Digest) {
	t.Helper()
	c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mA, mC)
	ds := sendFrag(t, c, 5)
	for s := uint64(1); s <= d; s++ {
		c.deliverTo(dataOf(t, ds, s), mA)
	}
	c.poll()
	id, dig := c.p(mA).CaptureDigest("join", c.now)
	e, ok := dig.Lookup(mC)
	require.True(t, ok)
	require.Equal(t, wholeBefore(d), e.Delivered)
	w, _ := c.p(mA).WindowState(mC)
	require.Equal(t, d, w.Delivered, "the window counts the fragments consumed")
	require.True(t, c.p(mA).ReleaseCapture(id))
	return c, ds, dig
}

// wholeBefore is the point a member that consumed C's seqnos 1..d reports
// (sendFrag(5)): d, or 2 while it is reassembling M (d in 3..6).
func wholeBefore(d uint64) uint64 {
	if d >= 3 && d < 7 {
		return 2
	}
	return d
}

// insideDigest returns dig with C's delivered point set to d (inside M
// for d in 3..6): the digest of a holder whose window passes through M
// without delivering it, such as a member that itself joined inside M and
// skips M's tail, or one that reported M lost (a lost run widened to M's
// last fragment) and is consuming M's remaining fragments. Such a holder
// reports the window's point, since it will never deliver M.
func insideDigest(t *testing.T, dig digest.Digest, d uint64) digest.Digest {
	t.Helper()
	es := dig.Entries()
	for i := range es {
		if es[i].Member == mC {
			es[i].Delivered = d
			es[i].Received = max(es[i].Received, d)
			return digest.New(es)
		}
	}
	t.Fatal("no entry for C")
	return digest.Digest{}
}

// addJoiners installs one view of c's members plus joiners: the members
// with no join digest (the joiners are brand-new: windows at 0), each
// joiner with join (its window for every member starts at join's
// delivered value).
func (c *cluster) addJoiners(join digest.Digest, joiners ...digest.Member) {
	c.t.Helper()
	members := append(slices.Clone(c.view.Members), joiners...)
	v := View{ID: digest.ViewID{Coord: members[0], Counter: c.view.ID.Counter + 1}, Members: members}
	c.view = v
	for _, m := range c.order {
		c.p(m).InstallView(v, digest.Digest{}, c.now)
	}
	for _, m := range joiners {
		cfg := testConfig(m)
		cfg.Pool = c.pool
		cfg.MaxBundle = 1
		h := &countingHandler{}
		cfg.Logger = slog.New(h)
		p, err := New(cfg)
		require.NoError(c.t, err)
		p.InstallView(v, join, c.now)
		c.nodes[m] = &node{p: p, rec: &recorder{}, log: h}
		c.order = append(c.order, m)
	}
}

// bigPayload is M's payload as sendFrag builds it.
var bigPayload = string(bytes.Repeat([]byte("x"), 1200*5))

// checkExisting: A, a member before the join, delivers C's messages 1, 2,
// M (at 3) and 8, whole, and reports nothing lost: the joiners' rule does
// not touch it.
func checkExisting(t *testing.T, c *cluster) {
	t.Helper()
	require.Equal(t, []uint64{1, 2, 3, 8}, c.rec(mA).seqs(mC))
	require.Equal(t, bigPayload, c.rec(mA).dels[2].payload)
	require.Empty(t, c.rec(mA).lost)
}

// checkJoiner: joiner m delivered want (seqnos of C's messages), M whole
// if in want, reported nothing lost, and its window for C is at 8 with no
// gap.
func checkJoiner(t *testing.T, c *cluster, m digest.Member, want []uint64) {
	t.Helper()
	require.Equal(t, want, c.rec(m).seqs(mC), "joiner %v", m)
	for _, d := range c.rec(m).dels {
		if d.seq == 3 {
			require.Equal(t, bigPayload, d.payload, "joiner %v: M whole", m)
		}
	}
	require.Empty(t, c.rec(m).lost, "joiner %v", m)
	require.Zero(t, c.p(m).Stats().LostRanges, "joiner %v", m)
	require.Zero(t, c.p(m).Stats().Drops.Reassembly, "joiner %v", m)
	e, ok := c.p(m).WindowState(mC)
	require.True(t, ok)
	require.Equal(t, uint64(8), e.Delivered, "joiner %v", m)
	require.Empty(t, c.p(m).Gaps(mC, nil), "joiner %v", m)
}

// TestJoinInsideFragmentedMessage: A has consumed C's seqnos up to d,
// every seqno from M's fragment 0's predecessor (2) to M's last fragment
// (7: M delivered). With A's digest (capture) the join point is 2 while A
// reassembles M (d in 3..6): the joiners deliver M whole, then 8, like A.
// With a digest that ends inside M at d (inside: its holder does not
// deliver M) they skip M's fragments above d: M only for d = 2. Two
// joiners with the same digest, one receiving C's datagrams above the
// join point in order, the other in reverse order (so M's last fragment
// and 8 wait for the rest), deliver the same, report nothing lost and
// request nothing (nothing is missing). Before the joiner rule, a joiner
// with an inside digest (3..6) reported 3..7 lost (seqnos below its own
// start included); before digests stopped at message boundaries, A's own
// digest was such a digest.
func TestJoinInsideFragmentedMessage(t *testing.T) {
	for d := uint64(2); d <= 7; d++ {
		for _, inside := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d/inside=%v", d, inside), func(t *testing.T) {
				c, ds, dig := joinFragCluster(t, d)
				jp := wholeBefore(d)
				if inside {
					dig, jp = insideDigest(t, dig, d), d
				}
				c.addJoiners(dig, mD, mB)
				for s := d + 1; s <= 8; s++ {
					c.deliverTo(dataOf(t, ds, s), mA)
				}
				for s := jp + 1; s <= 8; s++ {
					c.deliverTo(dataOf(t, ds, s), mD)
					c.deliverTo(dataOf(t, ds, 8+jp+1-s), mB)
					c.poll()
				}
				sent := c.run(c.now+time.Second, nil)
				require.Empty(t, ofType(sent, wire.TypeXmitReq))
				checkExisting(t, c)
				want := []uint64{8}
				if jp < 3 {
					want = []uint64{3, 8}
				}
				checkJoiner(t, c, mD, want)
				checkJoiner(t, c, mB, want)
				require.Equal(t, c.rec(mD).dels, c.rec(mB).dels)
			})
		}
	}
}

// TestJoinInsideFragmentedMessageTailLost: the digest ends inside M
// (insideDigest at 4) and the joiner misses some of M's fragments above it: 5 and 6
// (it holds 7 and 8), or 5..7 (it holds 8), or everything (it learns of 8
// from C's Highest). It cannot tell what it lacks from the window alone,
// so it requests the gap, only above its start, gets the repairs from C,
// skips M's fragments silently and delivers 8: no stall, no lost range,
// no request at or below 4.
func TestJoinInsideFragmentedMessageTailLost(t *testing.T) {
	for _, holds := range [][]uint64{{7, 8}, {8}, {}} {
		t.Run(fmt.Sprint(holds), func(t *testing.T) {
			c, ds, dig := joinFragCluster(t, 4)
			c.addJoiners(insideDigest(t, dig, 4), mD)
			for s := uint64(5); s <= 8; s++ {
				c.deliverTo(dataOf(t, ds, s), mA)
			}
			for _, s := range holds {
				c.deliverTo(dataOf(t, ds, s), mD)
			}
			c.poll()
			require.Empty(t, c.rec(mD).dels)
			sent := c.run(c.now+time.Second, nil)
			reqs := xmitRanges(t, sent, mC)
			require.NotEmpty(t, reqs)
			for _, r := range reqs {
				require.Greater(t, r.From, uint64(4), "requests stay above the join point: %v", reqs)
				require.LessOrEqual(t, r.To, uint64(8), "%v", reqs)
			}
			checkExisting(t, c)
			checkJoiner(t, c, mD, []uint64{8})
		})
	}
}

// TestJoinInsideFragmentedMessageCut: A has consumed 1..4 when D joins
// with a digest inside M (insideDigest at 4) and B with A's own digest
// (2: A is reassembling M); then C crashes. Nobody holds M's fragment 5
// (and, in the second case, 6), which the cut declares lost. A, a member
// since before M began, reports M lost from its first fragment to its
// last (3..7) and delivers 8; so does B, which fetched 3 and 4 from A
// (it is owed M like A); D holds 7 and 8, so it knows the lost run lies
// inside M, which began before its start: it reports nothing and delivers
// 8. With the cut inside M (at 6, nobody holding 7 or 8), A and B report
// 3..6 (first fragment to the cut) and D again nothing: its window
// reaches the cut with no reassembly under way, so no report is pending
// (CutPending).
func TestJoinInsideFragmentedMessageCut(t *testing.T) {
	for _, tc := range []struct {
		name    string
		held    []uint64 // what A and the joiners hold above 4
		cut     uint64
		lost    rangeU
		aLost   []lostEvent
		aSeqs   []uint64
		joinDel []uint64
	}{
		{"lost-inside", []uint64{6, 7, 8}, 8, rangeU{5, 5}, []lostEvent{{mC, 3, 7}}, []uint64{1, 2, 8}, []uint64{8}},
		{"lost-two-inside", []uint64{7, 8}, 8, rangeU{5, 6}, []lostEvent{{mC, 3, 7}}, []uint64{1, 2, 8}, []uint64{8}},
		{"cut-inside", []uint64{6}, 6, rangeU{5, 5}, []lostEvent{{mC, 3, 6}}, []uint64{1, 2}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ds, dig := joinFragCluster(t, 4)
			c.addJoiners(insideDigest(t, dig, 4), mD)
			c.addJoiners(dig, mB)
			for _, s := range tc.held {
				c.deliverTo(dataOf(t, ds, s), mA)
				c.deliverTo(dataOf(t, ds, s), mD)
				c.deliverTo(dataOf(t, ds, s), mB)
			}
			c.crash(mC)
			c.run(c.now+100*time.Millisecond, nil)
			for _, m := range c.order {
				r := c.report(m, mC)
				require.Equal(t, tc.cut, r.received, "member %v", m)
				require.Equal(t, []rangeU{tc.lost}, r.gaps, "member %v", m)
			}
			for _, m := range c.order {
				c.applyCut(m, mC, tc.cut, tc.lost)
			}
			c.run(c.now+time.Second, nil)
			require.Equal(t, tc.aSeqs, c.rec(mA).seqs(mC))
			require.Equal(t, tc.aLost, c.rec(mA).lostOf(mC))
			wantB := tc.aSeqs[2:] // as A, from B's join point (2) on
			if len(wantB) == 0 {
				wantB = nil
			}
			require.Equal(t, wantB, c.rec(mB).seqs(mC))
			require.Equal(t, tc.aLost, c.rec(mB).lostOf(mC))
			require.Equal(t, tc.joinDel, c.rec(mD).seqs(mC))
			require.Empty(t, c.rec(mD).lost)
			for _, m := range c.order {
				require.False(t, c.p(m).CutPending(mC), "member %v", m)
				e, _ := c.p(m).WindowState(mC)
				require.Equal(t, tc.cut, e.Delivered, "member %v", m)
				_, err := c.p(m).CloseWindow(mC)
				require.NoError(t, err)
			}
		})
	}
}

// TestJoinThenOverwriteInsideFragmentedMessage: the joiners D and B
// started inside M (insideDigest at 4: their join rule skips M); A, a
// member since before M, and B receive fragment 5, and D too or not. D
// then installs a state transfer digest.
//   - From A, which is reassembling M (it consumed 3..5): A's digest says
//     2, the end of the last whole message it delivered (its state lacks
//     M and A delivers M after it). D would have to deliver M, whose
//     first fragments lie at or below its join point and were never held:
//     CheckOverwrite refuses it (ErrNotRetained) and OverwriteDigest
//     changes nothing, so gms abandons that provider before touching the
//     application state.
//   - From B, which skipped fragment 5 (it will never deliver M): B's
//     digest ends inside M (5) and its state lacks M. The state, not the
//     join, now decides: D cannot deliver M, so it reports M lost (3..7)
//     once rather than skipping it silently, and delivers 8, as B does
//     (silently). Whether D had skipped fragment 5 already (the digest at
//     its own point, nothing moves) or not (it skips to 5) makes no
//     difference.
func TestJoinThenOverwriteInsideFragmentedMessage(t *testing.T) {
	for _, dHolds5 := range []bool{false, true} {
		t.Run(fmt.Sprint(dHolds5), func(t *testing.T) {
			c, ds, dig := joinFragCluster(t, 4)
			c.addJoiners(insideDigest(t, dig, 4), mD, mB)
			c.deliverTo(dataOf(t, ds, 5), mA)
			c.deliverTo(dataOf(t, ds, 5), mB)
			if dHolds5 {
				c.deliverTo(dataOf(t, ds, 5), mD)
			}
			c.poll()
			d := c.p(mD)
			before, _ := d.WindowState(mC)
			id, st := c.p(mA).CaptureDigest("state to D", c.now)
			e, _ := st.Lookup(mC)
			require.Equal(t, uint64(2), e.Delivered, "A is reassembling M")
			require.ErrorIs(t, d.CheckOverwrite(st), ErrNotRetained)
			require.ErrorIs(t, d.OverwriteDigest(st, c.now), ErrNotRetained)
			after, _ := d.WindowState(mC)
			require.Equal(t, before, after, "nothing changed")
			require.True(t, c.p(mA).ReleaseCapture(id))

			id, st = c.p(mB).CaptureDigest("state to D", c.now)
			e, _ = st.Lookup(mC)
			require.Equal(t, uint64(5), e.Delivered, "B skips M")
			require.NoError(t, d.CheckOverwrite(st))
			require.NoError(t, d.OverwriteDigest(st, c.now))
			require.True(t, c.p(mB).ReleaseCapture(id))
			for s := uint64(6); s <= 8; s++ {
				for _, m := range []digest.Member{mA, mB, mD} {
					c.deliverTo(dataOf(t, ds, s), m)
				}
			}
			c.run(c.now+time.Second, nil)
			checkExisting(t, c)
			checkJoiner(t, c, mB, []uint64{8})
			require.Equal(t, []uint64{8}, c.rec(mD).seqs(mC))
			require.Equal(t, []lostEvent{{mC, 3, 7}}, c.rec(mD).lostOf(mC))
			ew, _ := d.WindowState(mC)
			require.Equal(t, uint64(8), ew.Delivered)
		})
	}
}

// TestOverwriteInsideFragmentedMessage: an existing member B installs a
// state transfer digest from A while A is reassembling M (it consumed 3
// and 4), B being behind M, inside it or past it. A's digest says 2, the
// end of the last whole message A delivered: A's state lacks M and A
// delivers M after it. B goes to 2 (back, or it is there) and delivers M
// whole too, then 8: after the state both apps get M exactly once and
// nothing is reported lost. A stability round before the transfer purges
// nothing of M anywhere, C's own window included: A reports 2 while it
// reassembles M. (Until digests stopped at message boundaries A's digest
// said 4 and B could only report M lost: the states differed by M.)
func TestOverwriteInsideFragmentedMessage(t *testing.T) {
	for _, bHolds := range [][]uint64{{1, 2}, {1, 2, 3}, {1, 2, 3, 4}, {1, 2, 3, 4, 5}, {1, 2, 3, 4, 5, 6, 7, 8}} {
		t.Run(fmt.Sprint(bHolds), func(t *testing.T) {
			c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mA, mB, mC)
			ds := sendFrag(t, c, 5)
			for s := uint64(1); s <= 4; s++ {
				c.deliverTo(dataOf(t, ds, s), mA)
			}
			for _, s := range bHolds {
				c.deliverTo(dataOf(t, ds, s), mB)
			}
			c.poll()
			c.stableRound()
			for _, m := range c.order {
				e, _ := c.p(m).WindowState(mC)
				require.Equal(t, uint64(2), e.Low, "member %v: M retained", m)
			}
			markA, markB := len(c.rec(mA).dels), len(c.rec(mB).dels)
			id, st := c.p(mA).CaptureDigest("state to B", c.now)
			e, _ := st.Lookup(mC)
			require.Equal(t, uint64(2), e.Delivered, "A's state lacks M")
			require.NoError(t, c.p(mB).CheckOverwrite(st))
			require.NoError(t, c.p(mB).OverwriteDigest(st, c.now))
			require.True(t, c.p(mA).ReleaseCapture(id))
			for s := uint64(5); s <= 8; s++ {
				c.deliverTo(dataOf(t, ds, s), mA)
			}
			c.run(c.now+time.Second, nil)
			checkExisting(t, c)
			for _, x := range []struct {
				m    digest.Member
				mark int
			}{{mA, markA}, {mB, markB}} {
				var after []delivery
				for _, d := range c.rec(x.m).dels[x.mark:] {
					if d.sender == mC {
						after = append(after, d)
					}
				}
				require.Len(t, after, 2, "member %v after the state: M and 8", x.m)
				require.Equal(t, delivery{mC, 3, bigPayload}, after[0], "member %v: M whole", x.m)
				require.Equal(t, uint64(8), after[1].seq, "member %v", x.m)
				require.Empty(t, c.rec(x.m).lost, "member %v", x.m)
			}
			e, _ = c.p(mB).WindowState(mC)
			require.Equal(t, uint64(8), e.Delivered)
			require.Empty(t, c.p(mB).Gaps(mC, nil))
			c.stableRound()
			for _, m := range c.order {
				e, _ := c.p(m).WindowState(mC)
				require.Equal(t, uint64(8), e.Low, "member %v", m)
			}
		})
	}
}

// TestOverwriteDigestInsideFragmentedMessage: an existing member B
// installs a state transfer digest that ends inside M (insideDigest at
// 4): its holder's window passed through M without delivering it (it
// joined inside M, or reported M lost), so the holder's state lacks M for
// good. B, behind M, inside it (reassembling it, at the digest's point or
// not) or past it, never delivers M or a part of it after the state: it
// reports M lost (3..7) once and goes on with 8, no gap left. With B
// reassembling M exactly at the digest's point (holding 1..4) nothing
// moves, but the reassembly ends there all the same.
func TestOverwriteDigestInsideFragmentedMessage(t *testing.T) {
	for _, bHolds := range [][]uint64{{1, 2}, {1, 2, 3}, {1, 2, 3, 4}, {1, 2, 3, 4, 5}, {1, 2, 3, 4, 5, 6, 7, 8}} {
		t.Run(fmt.Sprint(bHolds), func(t *testing.T) {
			c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mA, mB, mC)
			ds := sendFrag(t, c, 5)
			for _, s := range bHolds {
				c.deliverTo(dataOf(t, ds, s), mB)
			}
			c.poll()
			markB := len(c.rec(mB).dels)
			require.NoError(t, c.p(mB).OverwriteDigest(insideDigest(t, c.p(mA).Digest(), 4), c.now))
			for s := uint64(1); s <= 8; s++ {
				c.deliverTo(dataOf(t, ds, s), mA)
			}
			c.run(c.now+time.Second, nil)
			checkExisting(t, c)
			var after []uint64
			for _, d := range c.rec(mB).dels[markB:] {
				if d.sender == mC {
					after = append(after, d.seq)
				}
			}
			require.Equal(t, []uint64{8}, after, "B after the state: never M or a part of it")
			require.Equal(t, []lostEvent{{mC, 3, 7}}, c.rec(mB).lostOf(mC))
			e, _ := c.p(mB).WindowState(mC)
			require.Equal(t, uint64(8), e.Delivered)
			require.Empty(t, c.p(mB).Gaps(mC, nil))
		})
	}
}
