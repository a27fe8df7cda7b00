package nakack

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// The delivered point a member reports (STABLE, the digests it hands out)
// is the end of the last whole message it delivered or reported lost
// (sender.reported), never a point inside a fragmented message it is still
// reassembling.

// stableRound has every member send its STABLE and shuttles what follows
// (the coordinator's STABILITY) without advancing the clock.
func (c *cluster) stableRound() {
	for _, m := range c.order {
		c.p(m).sendStable(c.now)
	}
	c.run(c.now, nil)
}

// reportedOf returns what m reports for sender s: its live digest's entry,
// a captured digest's entry (the capture released again) and its STABLE's
// entry (taken from its outbox, not sent on).
func reportedOf(t *testing.T, c *cluster, m, s digest.Member) (live, captured, stable uint64) {
	t.Helper()
	p := c.p(m)
	e, ok := p.Digest().Lookup(s)
	require.True(t, ok)
	id, d := p.CaptureDigest("test", c.now)
	ce, ok := d.Lookup(s)
	require.True(t, ok)
	require.True(t, p.ReleaseCapture(id))
	require.Empty(t, p.Outbox())
	p.sendStable(c.now)
	out := p.Outbox()
	require.Len(t, out, 1)
	h, body, err := wire.DecodeHeader(out[0].Buf.Bytes(), testGroup)
	require.NoError(t, err)
	require.Equal(t, wire.TypeStable, h.Type)
	st, err := wire.DecodeStable(h, body)
	require.NoError(t, err)
	stable = ^uint64(0)
	for i := 0; i < st.Digest.Len(); i++ {
		if se := st.Digest.At(i); se.Member == s {
			stable = se.Delivered
		}
	}
	c.take() // dropped
	return e.Delivered, ce.Delivered, stable
}

// TestReportedPointStopsAtMessageBoundaries: B consumes C's messages m1
// (1), m2 (2), M (3..7, five fragments) and "after" (8) one seqno per
// Poll, and C self-delivers its own the same way. At every step the
// window's delivered point (WindowState) counts the fragments consumed,
// while what the member reports (its Digest, a capture, its STABLE to the
// coordinator A) is the end of the last whole message: 2 while M is being
// reassembled, then 7 once M is delivered. It never goes back and never
// exceeds the window's point.
func TestReportedPointStopsAtMessageBoundaries(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mA, mB, mC)
	ds := sendFrag(t, c, 5)
	for _, d := range ds {
		c.deliverTo(d, mB)
	}
	for _, m := range []digest.Member{mB, mC} {
		p, rec := c.p(m), c.rec(m)
		for raw := uint64(0); raw <= 8; raw++ {
			w, _ := p.WindowState(mC)
			require.Equal(t, raw, w.Delivered, "member %v", m)
			want := wholeBefore(raw)
			live, captured, stable := reportedOf(t, c, m, mC)
			require.Equal(t, want, live, "member %v at %d: Digest", m, raw)
			require.Equal(t, want, captured, "member %v at %d: CaptureDigest", m, raw)
			require.Equal(t, want, stable, "member %v at %d: STABLE", m, raw)
			if raw < 8 {
				require.Equal(t, 1, p.Poll(rec, 1))
			}
		}
		require.Equal(t, []uint64{1, 2, 3, 8}, rec.seqs(mC), "member %v", m)
		require.Equal(t, bigPayload, rec.dels[2].payload, "member %v", m)
	}
}

// TestStabilityKeepsMessageUntilDeliveredWhole: A and C have delivered
// all of C's messages, B has consumed M's fragments 3..5 and lacks 6 and 7
// (it holds 8). A stability round purges C's messages only up to 2,
// everywhere, C's own window included: B has not delivered M whole. B's
// request is repaired, B delivers M and 8, and the next round purges up to
// 8. (When members reported the window's point, the first round purged up
// to 5: a digest or a member needing M's first fragments could no longer
// get them.) The same holds for C's own message while C itself is
// reassembling it (its own Poll stopped inside M).
func TestStabilityKeepsMessageUntilDeliveredWhole(t *testing.T) {
	lows := func(c *cluster, want uint64) {
		t.Helper()
		for _, m := range c.order {
			e, _ := c.p(m).WindowState(mC)
			require.Equal(t, want, e.Low, "member %v", m)
		}
	}
	t.Run("receiver", func(t *testing.T) {
		c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mA, mB, mC)
		ds := sendFrag(t, c, 5)
		for _, d := range ds {
			c.deliverTo(d, mA)
			if _, first, _ := dataRange(t, d); first != 6 && first != 7 {
				c.deliverTo(d, mB)
			}
		}
		c.poll()
		w, _ := c.p(mB).WindowState(mC)
		require.Equal(t, uint64(5), w.Delivered)
		c.stableRound()
		lows(c, 2)
		sent := c.run(c.now+time.Second, nil)
		require.NotEmpty(t, xmitRanges(t, sent, mC))
		require.Empty(t, ofType(sent, wire.TypeMsgNotFound))
		for _, m := range c.order {
			require.Equal(t, []uint64{1, 2, 3, 8}, c.rec(m).seqs(mC), "member %v", m)
			require.Empty(t, c.rec(m).lost, "member %v", m)
		}
		c.stableRound()
		lows(c, 8)
	})
	t.Run("own", func(t *testing.T) {
		c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 }, mA, mB, mC)
		ds := sendFrag(t, c, 5)
		for _, d := range ds {
			c.deliverTo(d, mA)
			c.deliverTo(d, mB)
		}
		for _, m := range []digest.Member{mA, mB} {
			c.p(m).Poll(c.rec(m), 1<<20)
		}
		c.p(mC).Poll(c.rec(mC), 4) // 1, 2 and M's fragments 3, 4
		c.stableRound()
		lows(c, 2)
		c.poll()
		c.stableRound()
		lows(c, 8)
		for _, m := range c.order {
			require.Equal(t, []uint64{1, 2, 3, 8}, c.rec(m).seqs(mC), "member %v", m)
		}
	})
}

// TestAllocsStableDuringReassembly: STABLE and the MSG_NOT_FOUND digest
// (appendDigest) of a member that is reassembling a fragmented message
// cost no allocation, nor does the round and purge that follow (the
// coordinator A folds its own STABLE, sent inside the message, and B's).
func TestAllocsStableDuringReassembly(t *testing.T) {
	f := newFixture(t, nil)
	// A is coordinator of {A, B}: B's STABLE completes each round.
	f.view = View{ID: digest.ViewID{Coord: mA, Counter: 2}, Members: []digest.Member{mA, mB}}
	f.a.InstallView(f.view, digest.Digest{}, 0)
	payload := bytes.Repeat([]byte("f"), 1000)
	const count = 4
	frag := func(seq uint64, i uint32) *wire.Buffer {
		b := f.pool.Get(8192)
		d, err := wire.EncodeFrag(b.B, wire.Header{Group: testGroup, Sender: mB},
			wire.Frag{Origin: mB, Seq: seq, Index: i, Count: count, Total: count * uint32(len(payload)), Payload: payload})
		if err != nil {
			panic(err)
		}
		b.N = len(d)
		return b
	}
	next := uint64(1)
	var es [2]digest.Entry
	require.Zero(t, allocs(t, func() {
		first := next
		for i := range uint32(count) {
			f.recv(frag(first+uint64(i), i))
			if i == 1 {
				f.a.Poll(&f.h, 1<<20) // inside the message
				f.a.sendStable(f.now)
				f.a.entries = f.a.appendDigest(f.a.entries[:0])
				if f.a.entries[1].Delivered != first-1 {
					panic("reported inside the message")
				}
			}
		}
		next += count
		f.a.Poll(&f.h, 1<<20)
		f.stableFromB(&es, next-1)
	}))
	// A's STABLE, sent inside the last message, held the purge at its
	// first fragment - 1.
	e, _ := f.a.WindowState(mB)
	require.Equal(t, next-1-count, e.Low)
	require.Equal(t, int(next-1)/count, f.h.n)
}

// fragSeeds is how many seeds the randomised fragment tests run.
func fragSeeds(full, short int) int {
	if testing.Short() || raceEnabled {
		return short
	}
	return full
}

// sentMsg is one message a member sent: seqnos first..last.
type sentMsg struct {
	first, last uint64
	payload     string
}

// TestFragmentedStateTransferAndJoinSeeds: A (coordinator), B and C send
// small and fragmented messages (2-5 fragments) under 0-30% loss of data
// datagrams and reordering, each member polling with small limits so
// that its windows, its own included, often stop inside a fragmented
// message; stability rounds run now and then. At a step drawn from the
// seed a joiner D gets A's digest, and at another one member (the
// requester) installs the state and digest another member (the provider)
// captures, the provider's state being what its application had
// delivered. Checked: at every step, what every member reports for every
// sender is at or below its window's point, never goes back, and is
// never inside a message; the requester can always install the digest;
// in the end the requester's state followed by what it delivered after
// it is, per sender, exactly that sender's messages, whole, as everybody
// else delivers them (the provider too); the joiner delivers exactly the
// messages that begin after its join point, which is never inside a
// message; nobody reports anything lost; and a last stability round
// purges everything everywhere. Seeds replay (go test -run
// 'TestFragmentedStateTransferAndJoinSeeds/<seed>').
func TestFragmentedStateTransferAndJoinSeeds(t *testing.T) {
	insideTransfers := 0
	for seed := range uint64(fragSeeds(300, 40)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			if fragStateTransferSeed(t, seed) {
				insideTransfers++
			}
		})
		if t.Failed() {
			return
		}
	}
	t.Logf("transfers whose provider was reassembling a message at the capture: %d", insideTransfers)
	require.NotZero(t, insideTransfers)
}

// fragStateTransferSeed runs one seed; it reports whether the provider
// was reassembling a message of some sender when it captured its digest.
func fragStateTransferSeed(t *testing.T, seed uint64) (inside bool) {
	r := rand.New(rand.NewPCG(seed, 7))
	c := newCluster(t, func(cfg *Config) { cfg.MaxBundle = 1 + r.IntN(4) }, mA, mB, mC)
	founders := slices.Clone(c.order)
	loss := r.Float64() * 0.3
	const steps = 60
	joinAt, xferAt := r.IntN(steps), r.IntN(steps)
	releaseAt := xferAt + r.IntN(10)

	sent := map[digest.Member][]sentMsg{}
	msgAt := map[digest.Member]map[uint64]sentMsg{}
	for _, m := range founders {
		msgAt[m] = map[uint64]sentMsg{}
	}
	shuttle := func(ds []dgram) {
		r.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
		for _, d := range ds {
			for _, m := range c.order {
				if (d.typ == wire.TypeData || d.typ == wire.TypeFrag) && r.Float64() < loss {
					continue
				}
				c.deliverTo(d, m)
			}
		}
	}
	limits := []int{1, 1, 2, 3, 5, 1 << 20}
	pollSome := func() {
		for _, m := range c.order {
			c.p(m).Poll(c.rec(m), limits[r.IntN(len(limits))])
		}
	}
	// last[m][s]: what m reported for s at the previous check.
	last := map[digest.Member]map[digest.Member]uint64{}
	check := func() {
		t.Helper()
		for _, m := range c.order {
			if last[m] == nil {
				last[m] = map[digest.Member]uint64{}
			}
			d := c.p(m).Digest()
			for _, s := range founders {
				e, ok := d.Lookup(s)
				if !ok {
					continue
				}
				w, _ := c.p(m).WindowState(s)
				require.LessOrEqual(t, e.Delivered, w.Delivered, "member %v, sender %v", m, s)
				require.GreaterOrEqual(t, e.Delivered, last[m][s], "member %v, sender %v: went back", m, s)
				last[m][s] = e.Delivered
				if x, ok := msgAt[s][e.Delivered]; ok {
					require.Equal(t, x.last, e.Delivered, "member %v, sender %v: reported inside %d..%d", m, s, x.first, x.last)
				}
			}
		}
	}

	var (
		provider, requester digest.Member
		state               []delivery // the provider's application state
		mark                int        // the requester's deliveries before the transfer
		capID               CaptureID
		joinPoint           digest.Digest
	)
	for step := 0; step < steps; step++ {
		for _, m := range founders {
			if r.IntN(3) != 0 {
				continue
			}
			p := c.p(m)
			for range 1 + r.IntN(2) {
				pl := fmt.Appendf(nil, "%v/%d/", m, p.NextSeq())
				if r.IntN(2) == 0 {
					pl = append(pl, bytes.Repeat([]byte{'f'}, 1400*(1+r.IntN(4)))...)
				}
				seq, err := p.Send(pl, c.now)
				if err != nil {
					require.ErrorIs(t, err, ErrBackPressure)
					break
				}
				x := sentMsg{first: seq, last: p.NextSeq() - 1, payload: string(pl)}
				sent[m] = append(sent[m], x)
				for s := x.first; s <= x.last; s++ {
					msgAt[m][s] = x
				}
			}
			p.Flush(c.now)
		}
		if r.IntN(5) == 0 {
			for _, m := range c.order {
				c.p(m).sendStable(c.now)
			}
		}
		if step == joinAt {
			id, d := c.p(mA).CaptureDigest("join", c.now)
			c.addJoiners(d, mD)
			require.True(t, c.p(mA).ReleaseCapture(id))
			joinPoint = d
			last[mD] = nil
		}
		if step == xferAt {
			i := r.IntN(len(founders))
			provider, requester = founders[i], founders[(i+1+r.IntN(len(founders)-1))%len(founders)]
			pp := c.p(provider)
			for _, s := range pp.order {
				inside = inside || s.reasm.active
			}
			state = slices.Clone(c.rec(provider).dels)
			mark = len(c.rec(requester).dels)
			var d digest.Digest
			capID, d = pp.CaptureDigest("state", c.now)
			require.NoError(t, c.p(requester).CheckOverwrite(d), "requester %v, provider %v", requester, provider)
			require.NoError(t, c.p(requester).OverwriteDigest(d, c.now))
			last[requester] = nil // a rewind moves the reported point back
		}
		if step == releaseAt && capID != 0 {
			require.True(t, c.p(provider).ReleaseCapture(capID))
			capID = 0
		}
		pollSome()
		for range 3 {
			ds := c.take()
			if len(ds) == 0 {
				break
			}
			shuttle(ds)
			pollSome()
		}
		check()
		c.now += time.Millisecond
		for _, m := range c.order {
			c.p(m).Tick(c.now)
		}
	}
	if capID != 0 {
		require.True(t, c.p(provider).ReleaseCapture(capID))
	}
	c.run(c.now+5*time.Second, nil)
	check()

	for _, s := range founders {
		var all []delivery
		for _, x := range sent[s] {
			all = append(all, delivery{s, x.first, x.payload})
		}
		of := func(ds []delivery) []delivery {
			var out []delivery
			for _, d := range ds {
				if d.sender == s {
					out = append(out, d)
				}
			}
			return out
		}
		for _, m := range founders {
			got := of(c.rec(m).dels)
			if m == requester {
				got = append(of(state), of(c.rec(m).dels[mark:])...)
			}
			require.Equal(t, all, got, "member %v, sender %v (provider %v, requester %v)", m, s, provider, requester)
		}
		jp, ok := joinPoint.Lookup(s)
		require.True(t, ok)
		if x, ok := msgAt[s][jp.Delivered]; ok {
			require.Equal(t, x.last, jp.Delivered, "sender %v: join point inside %d..%d", s, x.first, x.last)
		}
		var want []delivery
		for _, d := range all {
			if d.seq > jp.Delivered {
				want = append(want, d)
			}
		}
		require.Equal(t, want, of(c.rec(mD).dels), "joiner, sender %v (join point %d)", s, jp.Delivered)
	}
	for _, m := range c.order {
		require.Empty(t, c.rec(m).lost, "member %v", m)
		require.Zero(t, c.p(m).Stats().MsgNotFoundSent, "member %v", m)
	}
	c.stableRound()
	for _, m := range c.order {
		for _, s := range founders {
			e, _ := c.p(m).WindowState(s)
			want := uint64(0)
			if n := len(sent[s]); n > 0 {
				want = sent[s][n-1].last
			}
			require.Equal(t, want, e.Low, "member %v, sender %v: everything stable", m, s)
		}
	}
	return inside
}
