package nakack

import (
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// A request that crossed its requester's STABLE (design.md, "Stale
// requests"): the requester asked for a range, then got it (the original
// multicast, late, or someone else's repair), delivered it and reported it
// in its STABLE; the round closed and the sender purged the range; only
// then does the request reach the sender. Every member of the view the
// STABILITY was computed over delivered what it made stable, so the sender
// drops such a request as stale and never answers it with MSG_NOT_FOUND.
// What the sender purged beyond the stable point (a forced purge), and
// requests from members whose delivery the stable point does not speak for
// (another view: a merge, a joiner, a member excluded from the view), get
// MSG_NOT_FOUND exactly as before.

// handRequest hands target an XMIT_REQ from requester, made in view, with
// the given delivered point and ranges, and returns what target sends.
func (c *cluster) handRequest(requester, target digest.Member, view digest.ViewID, delivered uint64, rs ...wire.Range) []dgram {
	c.t.Helper()
	b := c.pool.Get(1400)
	d, err := wire.EncodeXmitReq(b.B, wire.Header{Group: testGroup, Sender: requester}, view, target, delivered, rs)
	require.NoError(c.t, err)
	b.N = len(d)
	require.NoError(c.t, c.p(target).Receive(b, c.now))
	b.Release()
	return c.take()
}

// notFound decodes the MSG_NOT_FOUNDs in ds.
func notFound(t *testing.T, ds []dgram) []wire.MsgNotFound {
	t.Helper()
	var out []wire.MsgNotFound
	for _, d := range ofType(ds, wire.TypeMsgNotFound) {
		h, body, err := wire.DecodeHeader(d.data, testGroup)
		require.NoError(t, err)
		m, err := wire.DecodeMsgNotFound(h, body)
		require.NoError(t, err)
		out = append(out, m)
	}
	return out
}

// repairedSeqs returns the seqnos of origin that the data datagrams in ds
// carry.
func repairedSeqs(t *testing.T, ds []dgram, origin digest.Member) []uint64 {
	t.Helper()
	var out []uint64
	for _, d := range ds {
		if d.typ != wire.TypeData && d.typ != wire.TypeFrag {
			continue
		}
		if o, first, last := dataRange(t, d); o == origin {
			out = append(out, span(first, last)...)
		}
	}
	return out
}

// crossedRequest runs the crossing in cluster c (B the sender, A the
// requester): B sends 1..30, A misses 11..20 and asks for them; the
// request is held while the data reaches A late and a stability round
// over every member purges B's 1..30. It returns A's held request.
func crossedRequest(t *testing.T, c *cluster) []dgram {
	t.Helper()
	var late []dgram
	for _, d := range c.send(mB, true, payloads("b", 1, 30)...) {
		if _, first, _ := dataRange(t, d); first >= 11 && first <= 20 {
			c.deliver([]dgram{d}, func(_ dgram, to digest.Member) bool { return to == mA })
			late = append(late, d)
			continue
		}
		c.deliver([]dgram{d}, nil)
	}
	c.poll()
	a := c.p(mA)
	c.now = a.NextDeadline()
	a.Tick(c.now)
	req := ofType(c.take(), wire.TypeXmitReq)
	require.Equal(t, []wire.Range{rg(11, 20)}, xmitRanges(t, req, mB))
	for _, d := range late {
		c.deliverTo(d, mA)
	}
	c.poll()
	require.Equal(t, span(1, 30), c.rec(mA).seqs(mB))
	c.stableRound()
	require.Equal(t, uint64(30), c.p(mB).OwnLow(), "the round purged what A delivered")
	return req
}

// TestRequestCrossingItsStable: the held request reaches B after the
// purge, whether B coordinates the round or a third member does (its
// STABILITY then crosses the network), with multicast or unicast
// requests: B drops it as stale, sends nothing at all (the requester has
// everything) and counts it.
func TestRequestCrossingItsStable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members []digest.Member
		unicast bool
	}{
		{"sender coordinates", []digest.Member{mB, mA, mC}, false},
		{"third member coordinates", []digest.Member{mC, mB, mA}, false},
		{"unicast requests", []digest.Member{mC, mB, mA}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, func(cfg *Config) { cfg.UnicastNaks = tc.unicast }, tc.members...)
			req := crossedRequest(t, c)
			b := c.p(mB)
			stale := b.Stats().StaleRequests
			c.deliver(req, func(_ dgram, to digest.Member) bool { return to != mB })
			require.Empty(t, c.take(), "neither MSG_NOT_FOUND nor repairs")
			st := b.Stats()
			require.Zero(t, st.MsgNotFoundSent)
			require.Equal(t, stale+1, st.StaleRequests)
			require.Empty(t, c.rec(mA).lostOf(mB))
		})
	}
}

// TestStablePointTrimsRequest: ranges that reach above the stable point
// are stale up to it and repaired above it; what B purged by force
// beyond the stable point is answered with MSG_NOT_FOUND for exactly that
// part (31..35), the part the stable point does not cover.
func TestStablePointTrimsRequest(t *testing.T) {
	c := newCluster(t, nil, mC, mB, mA)
	crossedRequest(t, c)
	b := c.p(mB)
	for _, d := range c.send(mB, true, payloads("b", 31, 40)...) {
		c.deliver([]dgram{d}, func(_ dgram, to digest.Member) bool { return to == mA })
	}
	c.poll()
	_, err := b.ForcePurge(mB, 35)
	require.NoError(t, err)
	require.Equal(t, uint64(35), b.OwnLow())
	stale := b.Stats().StaleRequests
	out := c.handRequest(mA, mB, c.view.ID, 10, rg(11, 20), rg(25, 40))
	mnf := notFound(t, out)
	require.Len(t, mnf, 1)
	require.Equal(t, rg(31, 35), mnf[0].Missing)
	require.Equal(t, uint64(35), mnf[0].Low)
	require.Equal(t, span(36, 40), repairedSeqs(t, out, mB))
	require.Equal(t, stale+2, b.Stats().StaleRequests, "[11,20] wholly, [25,40] up to 30")
}

// TestStablePointIsPerView: the stable point of one view says nothing of
// a member that was not in it: in the next view (here D, merged in from
// another partition, whose digest B has not seen) a request for what
// the earlier round purged gets MSG_NOT_FOUND, as before.
func TestStablePointIsPerView(t *testing.T) {
	c := newCluster(t, nil, mB, mA)
	crossedRequest(t, c)
	b := c.p(mB)
	v2 := View{ID: digest.ViewID{Coord: mB, Counter: 2}, Members: []digest.Member{mB, mA, mD}}
	b.InstallView(v2, digest.Digest{}, c.now)
	c.take()
	out := c.handRequest(mD, mB, v2.ID, 10, rg(11, 20))
	mnf := notFound(t, out)
	require.Len(t, mnf, 1)
	require.Equal(t, rg(11, 20), mnf[0].Missing)
	require.Equal(t, mD, mnf[0].Requester)
}

// TestStablePointOnlyForViewMembers: a request that names the current
// view but comes from a member outside it (a departed sender, which B
// still serves) is not covered by the view's stable point: its delivery
// was not part of the round.
func TestStablePointOnlyForViewMembers(t *testing.T) {
	c := newCluster(t, nil, mB, mA, mD)
	b := c.p(mB)
	v2 := View{ID: digest.ViewID{Coord: mB, Counter: 2}, Members: []digest.Member{mB, mA}}
	for _, m := range []digest.Member{mB, mA} {
		c.p(m).InstallView(v2, digest.Digest{}, c.now)
	}
	c.take()
	c.deliver(c.send(mB, false, payloads("b", 1, 20)...), nil)
	c.poll()
	for _, m := range []digest.Member{mB, mA} {
		c.p(m).sendStable(c.now)
	}
	c.run(c.now, nil)
	require.Equal(t, uint64(20), b.OwnLow())
	out := c.handRequest(mD, mB, v2.ID, 0, rg(5, 20))
	mnf := notFound(t, out)
	require.Len(t, mnf, 1)
	require.Equal(t, rg(5, 20), mnf[0].Missing)
	require.Zero(t, b.Stats().StaleRequests)
}

// TestAllocsStaleRequest: dropping a request that crossed its STABLE
// allocates nothing.
func TestAllocsStaleRequest(t *testing.T) {
	c := newCluster(t, nil, mB, mA)
	crossedRequest(t, c)
	b := c.p(mB)
	buf := c.pool.Get(1400)
	d, err := wire.EncodeXmitReq(buf.B, wire.Header{Group: testGroup, Sender: mA}, c.view.ID, mB, 10, []wire.Range{rg(11, 20)})
	require.NoError(t, err)
	buf.N = len(d)
	require.Zero(t, allocs(t, func() {
		if err := b.Receive(buf, c.now); err != nil {
			panic(err)
		}
		c.now += time.Millisecond
	}))
	buf.Release()
	require.Empty(t, b.Outbox())
	require.Zero(t, b.Stats().MsgNotFoundSent)
}
