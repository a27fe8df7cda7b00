package nakack

import (
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// seed000 builds design.md item 1: A has delivered 1..50 of B (and, with
// hold, also holds 100..120); B has sent 1..200, delivered them, and is
// forced to purge 1..150; B sends 201 and A asks for what it lacks. It
// returns the cluster, A's request and B's answer (repairs and MSG_NOT_FOUND).
func seed000(t *testing.T, hold bool) (c *cluster, repairs []dgram, mnf dgram) {
	c = newCluster(t, func(cfg *Config) { cfg.MaxBundle = 10 }, mB, mA)
	var ds []dgram
	for _, r := range [][2]int{{1, 50}, {51, 99}, {100, 120}, {121, 200}} {
		ds = append(ds, c.send(mB, false, payloads("b", r[0], r[1])...)...)
	}
	for _, d := range ds {
		_, first, last := dataRange(t, d)
		if last <= 50 || (hold && first >= 100 && last <= 120) {
			c.deliverTo(d, mA)
		}
	}
	c.poll()
	require.Equal(t, span(1, 50), c.rec(mA).seqs(mB))
	require.Equal(t, span(1, 200), c.rec(mB).seqs(mB))
	n, err := c.p(mB).ForcePurge(mB, 150)
	require.NoError(t, err)
	require.Equal(t, 150, n)

	c.deliver(c.send(mB, false, "b201"), nil)
	a := c.p(mA)
	c.now = a.NextDeadline()
	a.Tick(c.now)
	req := c.take()
	want := []wire.Range{rg(51, 200)}
	if hold {
		want = []wire.Range{rg(51, 99), rg(121, 200)}
	}
	require.Equal(t, want, xmitRanges(t, req, mB))
	c.deliver(req, func(d dgram, to digest.Member) bool { return to != mB })
	out := c.take()
	for _, d := range out {
		switch d.typ {
		case wire.TypeData:
			repairs = append(repairs, d)
		case wire.TypeMsgNotFound:
			mnf = d
			require.Equal(t, mA, d.to, "MSG_NOT_FOUND goes to the requester")
		}
	}
	require.Len(t, repairs, 5, "151..200 in bundles of 10")
	require.NotNil(t, mnf.data)
	return c, repairs, mnf
}

// TestSeed000MsgNotFound: seeds 000/001 with the numbers of design.md: A
// ends with 1..50 and 151..201 delivered, exactly one lost report [51,150],
// one WARN log, and never asks for 51..150 again, whatever the order of the
// repairs and the MSG_NOT_FOUND; with 100..120 held it delivers them and
// reports [51,99] and [121,150].
func TestSeed000MsgNotFound(t *testing.T) {
	orders := map[string]func(rep []dgram, mnf dgram) []dgram{
		"repairs-before": func(rep []dgram, mnf dgram) []dgram { return append(append([]dgram{}, rep...), mnf) },
		"repairs-after":  func(rep []dgram, mnf dgram) []dgram { return append([]dgram{mnf}, rep...) },
		"interleaved": func(rep []dgram, mnf dgram) []dgram {
			return append(append(append([]dgram{}, rep[:2]...), mnf), rep[2:]...)
		},
		"mnf-twice": func(rep []dgram, mnf dgram) []dgram {
			return append(append([]dgram{mnf}, rep...), mnf)
		},
	}
	for _, hold := range []bool{false, true} {
		for name, order := range orders {
			t.Run(map[bool]string{false: "", true: "hold100-120/"}[hold]+name, func(t *testing.T) {
				c, rep, mnf := seed000(t, hold)
				for _, d := range order(rep, mnf) {
					c.deliverTo(d, mA)
					c.poll() // delivery interleaved with arrivals
				}
				after := c.run(c.now+5*time.Second, nil)
				a := c.rec(mA)
				if hold {
					require.Equal(t, cat(span(1, 50), span(100, 120), span(151, 201)), a.seqs(mB))
					require.Equal(t, []lostEvent{{mB, 51, 99}, {mB, 121, 150}}, a.lostOf(mB))
				} else {
					require.Equal(t, cat(span(1, 50), span(151, 201)), a.seqs(mB))
					require.Equal(t, []lostEvent{{mB, 51, 150}}, a.lostOf(mB))
				}
				require.Equal(t, 1, c.nodes[mA].log.n, "logged once")
				for _, r := range xmitRanges(t, after, mB) {
					require.Greater(t, r.From, uint64(150), "asked again for a purged seqno")
				}
				require.Empty(t, xmitRanges(t, after, mB), "no request at all once complete")
				e, _ := c.p(mA).WindowState(mB)
				require.Equal(t, uint64(201), e.Delivered)
				st := c.p(mA).Stats()
				require.Equal(t, map[bool]uint64{false: 1, true: 2}[hold], st.LostRanges)
				require.Equal(t, uint64(100)-map[bool]uint64{false: 0, true: 21}[hold], st.LostMessages)
				require.False(t, c.p(mA).senders[mB].armed)
			})
		}
	}
}

// TestForgedMsgNotFound: a MSG_NOT_FOUND from a non-original sender, for
// another view, or that would move nothing changes nothing.
func TestForgedMsgNotFound(t *testing.T) {
	encode := func(sender digest.Member, view digest.ViewID, low, highest uint64) dgram {
		b := make([]byte, 1400)
		d, err := wire.EncodeMsgNotFound(b, wire.Header{Group: testGroup, Sender: sender}, view, mA,
			rg(1, low), low, highest, wire.EntrySlice{{Member: sender, Low: low, Delivered: highest, Received: highest}})
		require.NoError(t, err)
		return dgram{from: sender, to: mA, typ: wire.TypeMsgNotFound, data: d}
	}
	cases := map[string]func(c *cluster) dgram{
		"non-original sender": func(c *cluster) dgram { return encode(mC, c.view.ID, 150, 201) },
		"wrong view": func(c *cluster) dgram {
			return encode(mB, digest.ViewID{Coord: mB, Counter: 99}, 150, 201)
		},
		"moves nothing":  func(c *cluster) dgram { return encode(mB, c.view.ID, 50, 201) },
		"unknown sender": func(c *cluster) dgram { return encode(mD, c.view.ID, 150, 201) },
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 10 }, mB, mA, mC)
			ds := c.send(mB, false, payloads("b", 1, 201)...)
			for _, d := range ds {
				if _, _, last := dataRange(t, d); last <= 50 || last == 201 {
					c.deliverTo(d, mA)
				}
			}
			c.poll()
			before, _ := c.p(mA).WindowState(mB)
			c.deliverTo(mk(c), mA)
			c.poll()
			after, _ := c.p(mA).WindowState(mB)
			require.Equal(t, before, after)
			require.Empty(t, c.rec(mA).lost)
			require.Equal(t, uint64(1), c.p(mA).Stats().MsgNotFoundIgnored)
			require.Zero(t, c.nodes[mA].log.n)
			// The gap is still requested.
			c.now = c.p(mA).NextDeadline()
			c.p(mA).Tick(c.now)
			require.Equal(t, []wire.Range{rg(51, 200)}, xmitRanges(t, c.take(), mB))
		})
	}
}

// appState folds deliveries into per-sender logs: the application state of
// seed 003 (per-sender FIFO makes it order-independent across senders).
type appState map[digest.Member][]string

func (s appState) clone() appState {
	out := appState{}
	for k, v := range s {
		out[k] = append([]string(nil), v...)
	}
	return out
}

func (s appState) apply(ds []delivery) {
	for _, d := range ds {
		s[d.sender] = append(s[d.sender], d.payload)
	}
}

// TestSeed003OverwriteDigest: B (hd 5 for itself) installs A's state whose
// digest says B:3. B keeps its send seqno (next is 6), re-delivers its own 4
// and 5, and the folded application states of A and B end equal. With a
// third sender C, B is either ahead of the digest for C (re-delivers from
// what it retains) or behind (skips: those messages are in the state).
func TestSeed003OverwriteDigest(t *testing.T) {
	for _, tc := range []string{"two-members", "C-ahead", "C-behind"} {
		t.Run(tc, func(t *testing.T) {
			c := newCluster(t, nil, mA, mB, mC)
			toA := func(d dgram, to digest.Member) bool { return to != mA }
			notA := func(d dgram, to digest.Member) bool { return to == mA }
			// B sends 1..5; A gets 1..3 only.
			ds := c.send(mB, true, payloads("b", 1, 5)...)
			c.deliver(ds[:3], nil)
			c.deliver(ds[3:], notA)
			if tc != "two-members" {
				cs := c.send(mC, true, payloads("c", 1, 6)...)
				switch tc {
				case "C-ahead": // A has c1..c4, B all six
					c.deliver(cs[:4], nil)
					c.deliver(cs[4:], notA)
				case "C-behind": // A has c1..c4, B only c1..c2
					c.deliver(cs[:2], nil)
					c.deliver(cs[2:4], toA)
				}
			}
			c.poll()
			require.Equal(t, span(1, 5), c.rec(mB).seqs(mB))
			// A captures state and digest at one point.
			stateA := appState{}
			stateA.apply(c.rec(mA).dels)
			id, dA := c.p(mA).CaptureDigest("state transfer to B", c.now)
			e, _ := dA.Lookup(mB)
			require.Equal(t, uint64(3), e.Delivered)
			// B installs it.
			b := c.p(mB)
			require.NoError(t, b.OverwriteDigest(dA, c.now))
			require.Equal(t, uint64(6), b.NextSeq())
			stateB := stateA.clone()
			markB := len(c.rec(mB).dels)
			markA := len(c.rec(mA).dels)
			c.p(mB).Poll(c.rec(mB), 100)
			require.Equal(t, []uint64{4, 5}, c.rec(mB).seqs(mB)[5:], "B re-delivers its own 4 and 5")
			require.True(t, c.p(mA).ReleaseCapture(id))
			// Traffic goes on; everything heals.
			c.deliver(c.send(mB, false, "b6"), nil)
			c.deliver(c.send(mC, false, "c7"), nil)
			c.run(c.now+5*time.Second, nil)
			stateA.apply(c.rec(mA).dels[markA:])
			stateB.apply(c.rec(mB).dels[markB:])
			require.Equal(t, stateA, stateB)
			require.Equal(t, payloads("b", 1, 6), stateB[mB])
			if tc != "two-members" {
				require.Equal(t, payloads("c", 1, 7), stateB[mC])
			}
			require.Empty(t, c.rec(mB).lost)
			require.Empty(t, c.rec(mA).lost)
			require.Equal(t, uint64(7), b.NextSeq())
		})
	}
}

// TestSeed002JoinDigest: a joiner whose join digest lacks a member creates
// no window for it (never one at 0) and holds its data; the entry, when
// set, starts the window at the digest's delivered value.
func TestSeed002JoinDigest(t *testing.T) {
	c := newCluster(t, nil, mA, mB, mC)
	c.deliver(c.send(mC, false, payloads("c", 1, 50)...), nil)
	c.poll()
	// D joins with a digest that lacks C.
	cfg := testConfig(mD)
	cfg.Pool = c.pool
	d, err := New(cfg)
	require.NoError(t, err)
	c.nodes[mD] = &node{p: d, rec: &recorder{}, log: &countingHandler{}}
	c.order = append(c.order, mD)
	v2 := View{ID: digest.ViewID{Coord: mA, Counter: 2}, Members: []digest.Member{mA, mB, mC, mD}}
	join := digest.New([]digest.Entry{{Member: mA}, {Member: mB}, {Member: mD}})
	d.InstallView(v2, join, c.now)
	for _, m := range []digest.Member{mA, mB, mC} {
		c.p(m).InstallView(v2, digest.Digest{}, c.now)
	}
	_, ok := d.WindowState(mC)
	require.False(t, ok, "no window for a member the join digest lacks")
	require.False(t, d.Digest().Contains(mC))
	// C's next message waits in the pending queue.
	c.deliver(c.send(mC, false, "c51"), nil)
	require.Equal(t, uint64(1), d.Stats().Pending)
	c.poll()
	require.Empty(t, c.rec(mD).seqs(mC))
	// The entry arrives: the window starts at 50, the held message delivers.
	full := c.p(mA).Digest()
	eC, _ := full.Lookup(mC)
	require.Equal(t, uint64(51), eC.Delivered)
	d.SetDigest(digest.New([]digest.Entry{{Member: mC, Delivered: 50, Received: 50}}), c.now)
	st, ok := d.WindowState(mC)
	require.True(t, ok)
	require.Equal(t, uint64(50), st.Low)
	c.poll()
	require.Equal(t, []uint64{51}, c.rec(mD).seqs(mC))
	after := c.run(c.now+time.Second, nil)
	require.Empty(t, xmitRanges(t, after, mC), "never asks for what precedes its digest")
}

// TestSeed002ForcedPurgeOnlyWayToMsgNotFound: stability never purges a
// sender that some member's digest lacks; only a forced purge then makes
// the sender answer MSG_NOT_FOUND, and the joiner resolves it as in seed 000.
func TestSeed002ForcedPurgeOnlyWayToMsgNotFound(t *testing.T) {
	for _, forced := range []bool{false, true} {
		t.Run(map[bool]string{false: "stability-only", true: "forced-purge"}[forced], func(t *testing.T) {
			c := newCluster(t, nil, mA, mB, mC)
			cfg := testConfig(mD)
			cfg.Pool = c.pool
			cfg.PendingMax = -1 // D drops what it cannot place
			d, err := New(cfg)
			require.NoError(t, err)
			c.nodes[mD] = &node{p: d, rec: &recorder{}, log: &countingHandler{}}
			c.order = append(c.order, mD)
			v2 := View{ID: digest.ViewID{Coord: mA, Counter: 2}, Members: []digest.Member{mA, mB, mC, mD}}
			d.InstallView(v2, digest.New([]digest.Entry{{Member: mA}, {Member: mB}, {Member: mD}}), c.now)
			for _, m := range []digest.Member{mA, mB, mC} {
				c.p(m).InstallView(v2, digest.Digest{}, c.now)
			}
			c.deliver(c.send(mC, true, payloads("c", 1, 10)...), nil)
			c.deliver(c.send(mA, false, payloads("a", 1, 3)...), nil)
			c.run(c.now+time.Millisecond, nil)
			// Stability rounds: A's messages purge, C's never (D lacks C).
			for range 3 {
				for _, m := range c.order {
					c.p(m).sendStable(c.now)
				}
				c.run(c.now+time.Millisecond, nil)
			}
			for _, m := range c.order {
				if e, ok := c.p(m).WindowState(mC); ok {
					require.Zero(t, e.Low, "member %v purged C", m)
				}
				e, _ := c.p(m).WindowState(mA)
				require.Equal(t, uint64(3), e.Low, "member %v", m)
			}
			if forced {
				_, err := c.p(mC).ForcePurge(mC, 5)
				require.NoError(t, err)
			}
			// D gets C's entry at 0 (the seed's bug), then C sends 11.
			d.SetDigest(digest.New([]digest.Entry{{Member: mC}}), c.now)
			c.deliver(c.send(mC, false, "c11"), nil)
			c.run(c.now+5*time.Second, nil)
			if forced {
				require.Equal(t, uint64(1), c.p(mC).Stats().MsgNotFoundSent)
				require.Equal(t, []lostEvent{{mC, 1, 5}}, c.rec(mD).lostOf(mC))
				require.Equal(t, span(6, 11), c.rec(mD).seqs(mC))
			} else {
				require.Zero(t, c.p(mC).Stats().MsgNotFoundSent)
				require.Empty(t, c.rec(mD).lost)
				require.Equal(t, span(1, 11), c.rec(mD).seqs(mC))
			}
		})
	}
}

// TestStabilityOnlyFromCoordinator: members purge only on STABILITY from
// their current view's coordinator; captures hold the purge point back.
func TestStabilityOnlyFromCoordinator(t *testing.T) {
	c := newCluster(t, nil, mA, mB, mC)
	c.deliver(c.send(mB, false, payloads("b", 1, 10)...), nil)
	c.poll()
	stability := func(from digest.Member, view digest.ViewID, upto uint64) dgram {
		b := make([]byte, 1400)
		d, err := wire.EncodeStability(b, wire.Header{Group: testGroup, Sender: from}, view,
			wire.EntrySlice{{Member: mB, Low: upto, Delivered: upto, Received: upto}})
		require.NoError(t, err)
		return dgram{from: from, typ: wire.TypeStability, data: d}
	}
	low := func(m digest.Member) uint64 { e, _ := c.p(m).WindowState(mB); return e.Low }
	c.deliverTo(stability(mB, c.view.ID, 10), mC)
	require.Zero(t, low(mC), "not from the coordinator")
	c.deliverTo(stability(mA, digest.ViewID{Coord: mA, Counter: 0}, 10), mC)
	require.Zero(t, low(mC), "another view")
	require.Equal(t, uint64(2), c.p(mC).Stats().Drops.WrongView)
	c.deliverTo(stability(mA, c.view.ID, 4), mC)
	require.Equal(t, uint64(4), low(mC))

	// A capture at C (delivered 10 of B) while more arrives: the round
	// purges only to the captured value.
	id, _ := c.p(mC).CaptureDigest("join", c.now)
	c.deliver(c.send(mB, false, payloads("b", 11, 20)...), nil)
	c.poll()
	round := func() {
		for _, m := range c.order {
			c.p(m).sendStable(c.now)
		}
		c.run(c.now+time.Millisecond, nil)
	}
	round()
	for _, m := range c.order {
		require.Equal(t, uint64(10), low(m), "member %v", m)
	}
	c.p(mC).ReleaseCapture(id)
	round()
	for _, m := range c.order {
		require.Equal(t, uint64(20), low(m), "member %v", m)
	}
}

// TestCoordinatorFoldsOwnWhenOthersReported: the coordinator does not wait
// for its own STABLE timer once every other member's STABLE is in: the
// round closes, and the windows are purged, on the last arrival.
func TestCoordinatorFoldsOwnWhenOthersReported(t *testing.T) {
	c := newCluster(t, nil, mA, mB, mC)
	c.deliver(c.send(mA, false, payloads("a", 1, 10)...), nil)
	c.poll()
	low := func(m digest.Member) uint64 { e, _ := c.p(m).WindowState(mA); return e.Low }
	stable := func(m digest.Member) {
		c.p(m).sendStable(c.now)
		c.deliver(c.take(), nil)
	}
	stable(mB)
	require.Zero(t, c.p(mA).Stats().StabilitySent, "C has not reported")
	require.Zero(t, low(mA))
	stable(mC)
	require.Equal(t, uint64(1), c.p(mA).Stats().StabilitySent, "closed on C's STABLE, without A's timer")
	c.deliver(c.take(), nil)
	for _, m := range c.order {
		require.Equal(t, uint64(10), low(m), "member %v", m)
	}
}

// TestMsgNotFoundOnlyForOwnView: the original sender answers MSG_NOT_FOUND
// only to a request for its current view, the only one the requester would
// take. A graceful leaver still asking after the view that dropped it
// (stability no longer waits for it, so the sender may have purged past it:
// gms TestRejoinNewIncarnation, seed 71) gets the repairs the sender holds
// and no MSG_NOT_FOUND; a member still in the view whose request names the
// previous view gets the answer once it asks in the new one.
func TestMsgNotFoundOnlyForOwnView(t *testing.T) {
	for _, tc := range []string{"requester left", "requester behind a view"} {
		t.Run(tc, func(t *testing.T) {
			c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 10 }, mB, mA)
			for _, d := range c.send(mB, false, payloads("b", 1, 200)...) {
				if _, _, last := dataRange(t, d); last <= 50 {
					c.deliverTo(d, mA)
				}
			}
			c.poll()
			_, err := c.p(mB).ForcePurge(mB, 150)
			require.NoError(t, err)
			c.deliver(c.send(mB, false, "b201"), nil)
			a := c.p(mA)
			c.now = a.NextDeadline()
			a.Tick(c.now)
			req := c.take()
			require.Equal(t, []wire.Range{rg(51, 200)}, xmitRanges(t, req, mB))

			members := []digest.Member{mB}
			if tc == "requester behind a view" {
				members = append(members, mA)
			}
			v2 := View{ID: digest.ViewID{Coord: mB, Counter: 2}, Members: members}
			c.p(mB).InstallView(v2, digest.Digest{}, c.now)
			c.take()
			c.deliver(req, func(d dgram, to digest.Member) bool { return to != mB })
			out := c.take()
			var repaired []uint64
			for _, d := range out {
				require.NotEqual(t, wire.TypeMsgNotFound, d.typ, "MSG_NOT_FOUND to a request for another view")
				if d.typ == wire.TypeData {
					_, first, last := dataRange(t, d)
					repaired = append(repaired, span(first, last)...)
				}
			}
			require.Equal(t, span(151, 200), repaired, "what is held is repaired all the same")
			st := c.p(mB).Stats()
			require.Zero(t, st.MsgNotFoundSent)
			require.Equal(t, uint64(1), st.NotFoundOtherView)
			if tc == "requester left" {
				return
			}
			// A installs the view; its next request is answered.
			a.InstallView(v2, digest.Digest{}, c.now)
			c.take()
			c.now += time.Second
			a.Tick(c.now)
			req = c.take()
			require.NotEmpty(t, xmitRanges(t, req, mB))
			c.deliver(req, func(d dgram, to digest.Member) bool { return to != mB })
			var mnf int
			for _, d := range c.take() {
				if d.typ == wire.TypeMsgNotFound {
					mnf++
					require.Equal(t, mA, d.to)
				}
			}
			require.Equal(t, 1, mnf)
			require.Equal(t, uint64(1), c.p(mB).Stats().MsgNotFoundSent)
		})
	}
}

// TestNoMsgNotFoundToRequestCrossingItsStable: A asks B for 51..60 and
// then gets them (the original multicast, late), delivers them and
// reports them in its STABLE; B, the coordinator, gets the STABLE first,
// purges 1..60 and only then the request. The request crossed A's own
// report: A has what it asked for, and B answers it with nothing, not
// with a MSG_NOT_FOUND (which must never be sent in a run without forced
// purges, crashes or partitions).
func TestNoMsgNotFoundToRequestCrossingItsStable(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 10 }, mB, mA)
	ds := c.send(mB, false, payloads("b", 1, 60)...)
	var late []dgram
	for _, d := range ds {
		if _, first, _ := dataRange(t, d); first > 50 {
			late = append(late, d)
			continue
		}
		c.deliverTo(d, mA)
	}
	c.poll()
	c.deliver(c.send(mB, false, "b61"), nil) // A learns of 51..60 by the gap
	a := c.p(mA)
	c.now = a.NextDeadline()
	a.Tick(c.now)
	req := c.take()
	require.Equal(t, []wire.Range{rg(51, 60)}, xmitRanges(t, req, mB))
	for _, d := range late {
		c.deliverTo(d, mA)
	}
	c.poll()
	c.stableRound()
	e, _ := c.p(mB).WindowState(mB)
	require.Equal(t, uint64(61), e.Low, "B purged what A reported delivered")
	c.deliver(req, func(d dgram, to digest.Member) bool { return to != mB })
	require.Empty(t, ofType(c.take(), wire.TypeMsgNotFound))
	st := c.p(mB).Stats()
	require.Zero(t, st.MsgNotFoundSent)
	require.NotZero(t, st.StaleRequests)
}
