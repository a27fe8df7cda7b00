package gms

import (
	"fmt"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/sim"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// sentJoinRsp is a JoinRsp (kind 0) seen on the network.
type sentJoinRsp struct {
	at   time.Duration
	from digest.Member
	to   digest.Member
	v    View
	dig  digest.Digest
}

// seed002 is the setting of 002_d6613d63a762f156.txt on the real nakack:
// v1={A,B}; C joins (v2); A's protocol digest lacks C's entry (hidden by
// the gms wrapper: A "installed v2 but has not yet set the digest"); C
// sends 50 messages, delivered everywhere. The test then forces (or not)
// the purge of C and lets D join.
type seed002 struct {
	h          *harness
	a, b, c, d *node
	cm         digest.Member
	rsps       []sentJoinRsp // JoinRsps to D
	dAsks      []wire.Range  // D's retransmission requests for C
	xmits      int           // every XmitReq and MsgNotFound on the network
}

func newSeed002(t *testing.T, seed uint64) *seed002 {
	h := newNakHarness(t, seed, sim.NetConfig{})
	h.tweak = func(c *Config) { c.MaxJoinAttempts = 0 }
	x := &seed002{h: h, a: h.add(1), b: h.add(2), c: h.add(3), d: h.add(4)}
	h.s.AddTap(func(ev sim.TapEvent) {
		if ev.Kind != sim.TapSend {
			return
		}
		wh, body, err := wire.DecodeHeader(ev.Data, 7)
		if err != nil {
			return
		}
		switch {
		case wh.Type == wire.TypeXmitReq || wh.Type == wire.TypeMsgNotFound:
			x.xmits++
			if wh.Type == wire.TypeXmitReq && wh.Sender.ID == x.d.id {
				if r, err := wire.DecodeXmitReq(wh, body); err == nil && r.Target.ID == x.c.id {
					x.dAsks = r.Ranges.AppendTo(x.dAsks)
				}
			}
		case IsMembership(wh.Type):
			if m, err := decode(ev.Data, 7); err == nil && m.typ == typeJoinRsp && m.kind == 0 && m.member.ID == x.d.id {
				x.rsps = append(x.rsps, sentJoinRsp{at: ev.At, from: m.sender, to: m.member, v: m.v, dig: m.dig})
			}
		}
	})
	h.join(0, x.a)
	h.join(60*time.Millisecond, x.b)
	h.runUntil(func() bool { return converged(x.a, x.b) && quiet(x.a, x.b) }, 2*time.Second, "v1={A,B}")
	h.join(h.s.Now(), x.c)
	h.runUntil(func() bool { return converged(x.a, x.b, x.c) && quiet(x.a, x.b, x.c) }, 4*time.Second, "v2={A,B,C}")
	x.cm = x.c.self()
	x.a.hide[x.cm] = true
	x.send(x.c, 50)
	h.runUntil(func() bool {
		for _, n := range []*node{x.a, x.b, x.c} {
			if e, _ := n.p().WindowState(x.cm); e.Delivered != 50 {
				return false
			}
		}
		return true
	}, h.s.Now()+2*time.Second, "C's 50 delivered")
	return x
}

// send makes n send k messages now.
func (x *seed002) send(n *node, k int) {
	x.h.do(x.h.s.Now(), n, func(now time.Duration) {
		for i := 0; i < k; i++ {
			_, err := n.p().Send([]byte{byte(i)}, now)
			require.NoError(x.h.t, err)
		}
		n.p().Flush(now)
		n.poll()
	})
}

// TestJoinRaceSeed002 replays 002_d6613d63a762f156.txt step by step on the
// real nakack: v1={A,B}; C joins; A installs v2 but its digest has no entry
// for C yet; C sends 50 messages and C is purged up to 45 everywhere
// (forced: stability alone would not allow it, see
// TestStabilityNeverPurgesPastCapture); D joins and A builds v3. A never
// sends a JoinRsp with C at 0 or unset. "Entry set belatedly": D joins
// once A has the entry, is given C at 50, never asks C for anything at or
// below it; all end in one view with no retransmission traffic. "Entry
// never set": A keeps dropping the join (bounded digest retries), D keeps
// retrying and never gets a JoinRsp.
func TestJoinRaceSeed002(t *testing.T) {
	for _, tc := range []struct {
		name   string
		belate time.Duration // when A finally has C's entry (0: never)
	}{
		{"entry set belatedly", 400 * time.Millisecond},
		{"entry never set", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newSeed002(t, 2)
			h, a, b, c, d, cm := x.h, x.a, x.b, x.c, x.d, x.cm
			for _, n := range []*node{a, b, c} {
				_, err := n.p().ForcePurge(cm, 45)
				require.NoError(t, err)
				e, _ := n.p().WindowState(cm)
				require.Equal(t, uint64(45), e.Low)
			}
			joinAt := h.s.Now()
			h.join(joinAt, d)
			if tc.belate == 0 {
				h.run(joinAt + 2*time.Second)
				require.Empty(t, x.rsps, "a JoinRsp was sent while C's entry is unset")
				require.NotZero(t, a.g.Stats().JoinDigestRetry)
				require.NotZero(t, a.g.Stats().JoinsDropped)
				require.Greater(t, d.g.Stats().JoinAttempts, uint64(1), "D retries")
				require.NotEqual(t, StatusMember, d.g.Status())
				require.Len(t, a.g.View().Members, 3)
				require.Zero(t, a.p().Captures(), "no capture left behind by dropped joins")
				h.noErrors()
				return
			}
			h.do(joinAt+tc.belate, a, func(time.Duration) { delete(a.hide, cm) })
			h.runUntil(func() bool { return converged(a, b, c, d) && quiet(a, b, c, d) }, joinAt+5*time.Second, "v3={A,B,C,D}")
			require.NotZero(t, a.g.Stats().JoinDigestRetry, "A never met the unset entry")
			require.NotEmpty(t, x.rsps)
			var given uint64
			for _, r := range x.rsps {
				require.GreaterOrEqual(t, r.at, joinAt+tc.belate, "JoinRsp sent while C's entry was unset")
				require.NoError(t, r.dig.Matches(r.v.IDs()))
				e, ok := r.dig.Lookup(cm)
				require.True(t, ok)
				require.Equal(t, uint64(50), e.Delivered)
				require.GreaterOrEqual(t, e.Low, uint64(45))
				if r.to == d.self() {
					given = e.Delivered
				}
			}
			require.Equal(t, uint64(50), given)
			x.send(c, 10)
			h.runUntil(func() bool { e, _ := d.p().WindowState(cm); return e.Delivered == 60 }, h.s.Now()+3*time.Second, "D has C #60")
			for _, r := range x.dAsks {
				require.Greater(t, r.From, given, "D asked C for %v", r)
			}
			require.Equal(t, []uint64{51, 52, 53, 54, 55, 56, 57, 58, 59, 60}, d.app.delivered[cm])
			// All members end with the same view and no retransmission traffic.
			h.run(h.s.Now() + 500*time.Millisecond)
			before := x.xmits
			h.run(h.s.Now() + time.Second)
			require.Equal(t, before, x.xmits, "retransmission traffic goes on")
			require.True(t, converged(a, b, c, d))
			for _, n := range h.nodes {
				require.Zero(t, n.p().Stats().LostRanges)
			}
			h.noNotFound()
			h.noErrors()
		})
	}
}

// TestJoinDigestUnsetEntry: the coordinator's JoinRsp digest (joinDigest,
// over the real nakack's capture) is built over the new view with every
// entry unset; while the protocol's digest has no entry for C the digest
// stays incomplete, naming C, and the capture is released; once the entry
// is there the digest covers exactly v3, C at nakack's numbers, D at 0.
func TestJoinDigestUnsetEntry(t *testing.T) {
	x := newSeed002(t, 3)
	a, cm := x.a, x.cm
	_, err := a.p().ForcePurge(cm, 45)
	require.NoError(t, err)
	dm := digest.Member{ID: 4, Inc: 1}
	v2 := a.g.View()
	v3 := View{ID: digest.ViewID{Coord: a.self(), Counter: v2.ID.Counter + 1}, Members: append(append([]Peer{}, v2.Members...), Peer{dm, "4"})}
	now := x.h.s.Now()

	_, _, err = a.g.joinDigest(v3, []digest.Member{dm}, now)
	require.ErrorIs(t, err, digest.ErrIncomplete)
	require.ErrorContains(t, err, cm.String())
	require.Zero(t, a.p().Captures(), "capture released after an incomplete digest")
	require.Empty(t, a.caps)

	delete(a.hide, cm)
	id, jd, err := a.g.joinDigest(v3, []digest.Member{dm}, now)
	require.NoError(t, err)
	require.NoError(t, jd.Matches(v3.IDs()))
	ec, _ := jd.Lookup(cm)
	require.Equal(t, digest.Entry{Member: cm, Low: 45, Delivered: 50, Received: 50}, ec)
	ed, _ := jd.Lookup(dm)
	require.Equal(t, digest.Entry{Member: dm}, ed)
	require.Equal(t, 1, a.p().Captures())
	require.Contains(t, a.caps, id)
	a.g.proto.ReleaseCapture(id, now)
	require.Zero(t, a.p().Captures())
}

// checkPurges adds a check, run after every simulator event, that no
// member's window (own included) is ever purged past what every member of
// its view (same view id) has delivered, nor past a digest captured
// anywhere for a JoinRsp or a state transfer (Delivered) or a merge (Low)
// while that capture is held. Only raises of a window's Low count as
// purges (a window created by a join digest starts where it is given).
// It returns how many purges it saw.
func checkPurges(h *harness) *int {
	type key struct{ at, sender digest.Member }
	lows := map[key]uint64{}
	purges := new(int)
	check := func(time.Duration) error {
		for _, n := range h.nodes {
			p := n.p()
			if p == nil || !h.s.Up(n.Member()) {
				continue
			}
			for _, s := range h.nodes {
				if s.g.Protocol() == nil {
					continue
				}
				sm := s.self()
				e, ok := p.WindowState(sm)
				if !ok {
					continue
				}
				k := key{n.self(), sm}
				prev, seen := lows[k]
				lows[k] = e.Low
				if !seen || e.Low <= prev {
					continue
				}
				*purges++
				v := n.g.View()
				for _, o := range h.nodes {
					op := o.p()
					if op == nil || !h.s.Up(o.Member()) {
						continue
					}
					if o.g.View().ID == v.ID && v.Contains(o.self()) {
						if oe, ok := op.WindowState(sm); ok && e.Low > oe.Delivered {
							return fmt.Errorf("%v purged %v to %d past %v's delivered %d (view %v)", n.self(), sm, e.Low, o.self(), oe.Delivered, v)
						}
					}
					for _, c := range o.caps {
						ce, ok := c.d.Lookup(sm)
						if !ok {
							continue
						}
						bound := ce.Delivered
						if c.merge {
							bound = ce.Low
						}
						if e.Low > bound {
							return fmt.Errorf("%v purged %v to %d past %v's capture at %d", n.self(), sm, e.Low, o.self(), bound)
						}
					}
				}
			}
		}
		return nil
	}
	require.NoError(h.t, check(h.s.Now())) // the windows as they are now
	h.s.AddCheck(check)
	return purges
}

// TestStabilityNeverPurgesPastCapture is the other half of seed 002, on the
// real nakack with real STABLE/STABILITY traffic: without a forced purge
// no member ever purges a sender past what every member of its view
// delivered, nor past a digest captured for a JoinRsp while it is held
// (checked after every simulator event), so the purge of C to 45 that the
// seed describes cannot happen. "seed 002": the seed's schedule (A's digest
// lacks C while C sends 50 and D joins); D is given C where A had
// delivered it, C is purged only once D holds the view, and nothing is
// lost. "joins under traffic": joins while every member sends under loss.
func TestStabilityNeverPurgesPastCapture(t *testing.T) {
	t.Run("seed 002", func(t *testing.T) {
		x := newSeed002(t, 5)
		h, a, b, c, d, cm := x.h, x.a, x.b, x.c, x.d, x.cm
		purges := checkPurges(h)
		joinAt := h.s.Now()
		h.join(joinAt, d)
		h.traffic(c, joinAt, joinAt+600*time.Millisecond, 3*time.Millisecond)
		h.do(joinAt+400*time.Millisecond, a, func(time.Duration) { delete(a.hide, cm) })
		h.runUntil(func() bool { return converged(a, b, c, d) && quiet(a, b, c, d) }, joinAt+5*time.Second, "v3={A,B,C,D}")
		h.runUntil(func() bool { return h.s.Now() > joinAt+700*time.Millisecond && allDelivered(a, b, c, d) }, joinAt+5*time.Second, "delivered")
		h.run(h.s.Now() + 300*time.Millisecond)
		require.NotEmpty(t, x.rsps)
		for _, n := range []*node{a, b, c, d} {
			e, _ := n.p().WindowState(cm)
			require.Greater(t, e.Low, uint64(50), "stability never purged C at %d", n.id)
			require.Zero(t, n.p().Stats().LostRanges)
		}
		require.NotZero(t, *purges)
		h.noNotFound()
		h.noErrors()
	})
	t.Run("the check sees a forced purge", func(t *testing.T) {
		x := newSeed002(t, 5)
		h, c := x.h, x.c
		checkPurges(h)
		h.do(h.s.Now(), c, func(now time.Duration) {
			for i := 0; i < 10; i++ {
				_, err := c.p().Send([]byte{byte(i)}, now)
				require.NoError(t, err)
			}
			c.p().Flush(now)
			c.poll()
			_, err := c.p().ForcePurge(c.self(), 60)
			require.NoError(t, err)
		})
		require.ErrorContains(t, h.s.RunUntil(h.s.Now()+100*time.Millisecond), "purged")
	})
	for seed := range uint64(seeds(20, 4)) {
		t.Run(fmt.Sprintf("joins under traffic/seed%d", seed), func(t *testing.T) {
			h := newNakHarness(t, seed, lossyNet(seed, 0.1))
			a, b, c, d := h.add(1), h.add(2), h.add(3), h.add(4)
			all := []*node{a, b, c, d}
			purges := checkPurges(h)
			h.join(0, a)
			h.join(50*time.Millisecond, b, c)
			for _, n := range all {
				h.traffic(n, 200*time.Millisecond, 1500*time.Millisecond, 2*time.Millisecond)
			}
			h.join(600*time.Millisecond, d)
			h.runUntil(func() bool { return converged(all...) && quiet(all...) }, 5*time.Second, "joined")
			h.run(max(h.s.Now(), 1600*time.Millisecond))
			h.s.SetNet(sim.NetConfig{})
			h.runUntil(func() bool { return allDelivered(all...) }, h.s.Now()+10*time.Second, "drained")
			require.NotZero(t, *purges, "stability never ran")
			for _, n := range all {
				require.Empty(t, n.app.lost)
			}
			h.noNotFound()
			h.noErrors()
		})
	}
}
