package gms

import (
	"fmt"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/sim"
	"github.com/stretchr/testify/require"
)

// joinRspTap records every JoinRsp (kind 0) put on the network.
type sentJoinRsp struct {
	at   time.Duration
	from digest.Member
	to   digest.Member
	v    View
	dig  digest.Digest
}

func tapJoinRsps(h *harness) *[]sentJoinRsp {
	var out []sentJoinRsp
	h.s.AddTap(func(ev sim.TapEvent) {
		if ev.Kind != sim.TapSend || len(ev.Data) == 0 || ev.Data[0] == fakeMagic {
			return
		}
		m, err := decode(ev.Data, 7)
		if err != nil || m.typ != typeJoinRsp || m.kind != 0 {
			return
		}
		out = append(out, sentJoinRsp{at: ev.At, from: m.sender, to: m.member, v: m.v, dig: m.dig})
	})
	return &out
}

// TestJoinRaceSeed002 replays 002_d6613d63a762f156.txt step by step: v1={A,B};
// C joins; A installs v2 but has not yet set C's digest entry; D joins; C
// sends 50 messages and C is purged up to 45 (forced: stability alone would
// not allow it, see TestStabilityNeverPurgesPastCapture); A builds v3.
func TestJoinRaceSeed002(t *testing.T) {
	for _, tc := range []struct {
		name   string
		belate time.Duration // when A finally has C's entry (0: never)
	}{
		{"entry set belatedly", 400 * time.Millisecond},
		{"entry never set", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 2, sim.NetConfig{})
			h.tweak = func(c *Config) { c.MaxJoinAttempts = 0 }
			a, b, c, d := h.add(1), h.add(2), h.add(3), h.add(4)
			rsps := tapJoinRsps(h)
			h.join(0, a)
			h.join(60*time.Millisecond, b)
			h.runUntil(func() bool { return converged(a, b) && quiet(a, b) }, 2*time.Second, "v1={A,B}")
			h.join(h.s.Now(), c)
			h.runUntil(func() bool { return converged(a, b, c) }, 2*time.Second, "v2={A,B,C}")
			cm := c.self()
			// A installed v2 but its protocol has no entry for C yet.
			a.p.hide[cm] = true
			// C sends 50 messages; everyone receives them.
			for i := 0; i < 50; i++ {
				h.do(h.s.Now()+time.Duration(i)*time.Millisecond, c, func(time.Duration) { c.p.send([]byte{byte(i)}); c.p.poll() })
			}
			h.runUntil(func() bool { return drained(a, b, c) && a.p.wins[cm].hd == 50 && b.p.wins[cm].hd == 50 }, 2*time.Second, "C's 50 delivered")
			// Forced purge of C up to 45 everywhere (stability would not).
			for _, n := range []*node{a, b, c} {
				n.p.forcePurge(cm, 45)
			}
			joinAt := h.s.Now()
			h.join(joinAt, d)
			if tc.belate > 0 {
				h.do(joinAt+tc.belate, a, func(time.Duration) { delete(a.p.hide, cm) })
			}
			if tc.belate == 0 {
				h.run(joinAt + 2*time.Second)
				for _, r := range *rsps {
					require.NotEqual(t, d.id, r.to.ID, "a JoinRsp was sent while C's entry is unset")
				}
				require.NotZero(t, a.g.Stats().JoinsDropped)
				require.NotEqual(t, StatusMember, d.g.Status())
				require.Len(t, a.g.View().Members, 3)
				h.noErrors()
				return
			}
			h.runUntil(func() bool { return converged(a, b, c, d) && quiet(a, b, c, d) }, joinAt+5*time.Second, "v3={A,B,C,D}")
			require.NotZero(t, a.g.Stats().JoinDigestRetry, "A never met the unset entry")
			// A never sent a JoinRsp with C at 0 or unset, and never before
			// C's entry was back.
			require.NotEmpty(t, *rsps)
			var given uint64
			for _, r := range *rsps {
				if r.to.ID != d.id {
					continue
				}
				require.GreaterOrEqual(t, r.at, joinAt+tc.belate)
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
			// C sends #51..#60: D gets them and never asks for <= 50.
			h.traffic(c, h.s.Now(), h.s.Now()+10*time.Millisecond, time.Millisecond)
			h.runUntil(func() bool { return drained(a, b, c, d) && d.p.wins[cm].hd == 60 }, h.s.Now()+2*time.Second, "C #60 at D")
			for _, x := range d.p.xmits {
				if x.origin == cm {
					require.Greater(t, x.from, given)
				}
			}
			require.Equal(t, []uint64{51, 52, 53, 54, 55, 56, 57, 58, 59, 60}, d.app.delivered[cm])
			// All members end with the same view and no retransmission traffic.
			h.run(h.s.Now() + 500*time.Millisecond)
			before := countXmits(a, b, c, d)
			h.run(h.s.Now() + time.Second)
			require.Equal(t, before, countXmits(a, b, c, d))
			require.True(t, converged(a, b, c, d))
			for _, n := range []*node{a, b, c, d} {
				require.Zero(t, n.p.notFound)
			}
			h.noErrors()
		})
	}
}

func countXmits(ns ...*node) int {
	k := 0
	for _, n := range ns {
		for _, p := range n.incs {
			k += len(p.xmits)
		}
	}
	return k
}

// TestJoinDigestUnsetEntry: the coordinator's digest for a JoinRsp is built
// over the new view with every entry unset; a member the protocol has no
// entry for keeps it unset and no digest (hence no JoinRsp) is produced.
func TestJoinDigestUnsetEntry(t *testing.T) {
	a, b, c, d := digest.Member{ID: 1, Inc: 1}, digest.Member{ID: 2, Inc: 1}, digest.Member{ID: 3, Inc: 1}, digest.Member{ID: 4, Inc: 1}
	app := newFakeApp()
	p := newFakeProto(a, app, 0)
	v2 := View{ID: digest.ViewID{Coord: a, Counter: 2}, Members: []Peer{{a, "1"}, {b, "2"}, {c, "3"}}}
	p.InstallView(v2, digest.Digest{}, 0)
	p.wins[c].hd, p.wins[c].hr, p.wins[c].low = 50, 50, 45
	g := &GMS{proto: p}
	v3 := View{ID: digest.ViewID{Coord: a, Counter: 3}, Members: append(v2.Members, Peer{d, "4"})}

	p.hide[c] = true
	_, _, err := g.joinDigest(v3, []digest.Member{d}, 0)
	require.ErrorIs(t, err, digest.ErrIncomplete)
	require.ErrorContains(t, err, c.String())
	require.Empty(t, p.captures, "capture released after an incomplete digest")

	delete(p.hide, c)
	id, jd, err := g.joinDigest(v3, []digest.Member{d}, 0)
	require.NoError(t, err)
	require.NoError(t, jd.Matches(v3.IDs()))
	ec, _ := jd.Lookup(c)
	require.Equal(t, digest.Entry{Member: c, Low: 45, Delivered: 50, Received: 50}, ec)
	ed, _ := jd.Lookup(d)
	require.Equal(t, digest.Entry{Member: d}, ed)
	require.Contains(t, p.captures, id)
}

// TestStabilityNeverPurgesPastCapture is the other half of seed 002: without
// a forced purge, no member ever purges a sender past what every view member
// delivered, nor past a digest captured for a JoinRsp while it is held, so
// the purge the seed describes cannot happen: checked after every event of
// joins under traffic.
func TestStabilityNeverPurgesPastCapture(t *testing.T) {
	h := newHarness(t, 3, sim.NetConfig{Loss: 0.05, Jitter: 200 * time.Microsecond})
	a, b, c, d := h.add(1), h.add(2), h.add(3), h.add(4)
	ns := []*node{a, b, c, d}
	var violations []string
	h.s.AddCheck(func(now time.Duration) error {
		for _, n := range ns {
			p := n.cur()
			if p == nil {
				continue
			}
			for m, w := range p.wins {
				for _, o := range ns {
					// Every capture held anywhere bounds every purge.
					if op := o.cur(); op != nil {
						for _, cd := range op.captures {
							if e, ok := cd.Lookup(m); ok && w.purged > e.Delivered {
								violations = append(violations, "purged past a capture")
							}
						}
						// Every member of the purger's view delivered what was purged.
						if ow := op.wins[m]; ow != nil && p.view.Contains(o.self()) && op.view.ID == p.view.ID && w.purged > ow.hd {
							violations = append(violations, fmt.Sprintf("%v purged %v to %d past %v's delivered %d (view %v)", n.self(), m, w.purged, o.self(), ow.hd, p.view))
						}
					}
				}
			}
		}
		if len(violations) > 0 {
			return errorString(violations[0])
		}
		return nil
	})
	h.join(0, a)
	h.join(50*time.Millisecond, b, c)
	for _, n := range []*node{a, b, c} {
		h.traffic(n, 200*time.Millisecond, 1500*time.Millisecond, 2*time.Millisecond)
	}
	h.join(600*time.Millisecond, d)
	h.runUntil(func() bool { return converged(a, b, c, d) && quiet(a, b, c, d) }, 5*time.Second, "joined")
	h.s.SetNet(sim.NetConfig{})
	h.runUntil(func() bool { return h.s.Now() > 1600*time.Millisecond && drained(ns...) }, 10*time.Second, "drained")
	for _, n := range ns {
		require.Zero(t, n.p.notFound)
		require.Empty(t, n.app.lost)
		require.NotZero(t, n.p.wins[a.self()].purged, "stability never ran")
	}
	h.noErrors()
}

type errorString string

func (e errorString) Error() string { return string(e) }
