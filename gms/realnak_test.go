package gms

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nakcast/nakcast/sim"
	"github.com/stretchr/testify/require"
)

// others returns ns without x.
func others(ns []*node, x *node) []*node {
	var out []*node
	for _, n := range ns {
		if n != x {
			out = append(out, n)
		}
	}
	return out
}

// TestJoinUnderTrafficNoLoss: members join (on the real nakack) while every
// member sends under loss, duplication and reordering; stability suspension
// (the JoinRsp capture) means no lost range and no MSG_NOT_FOUND ever, and
// every member delivers every message from its join digest on.
func TestJoinUnderTrafficNoLoss(t *testing.T) {
	for seed := range uint64(seeds(200, 20)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s := sim.New(seed, lossyNet(seed, 0.1))
			var ns []*node
			for id := uint64(1); id <= 5; id++ {
				ns = append(ns, newRealNode(t, s, id))
			}
			r := rand.New(rand.NewPCG(seed, 5))
			join := func(at time.Duration, n *node) {
				require.NoError(t, s.Do(at, n.Member(), func(now time.Duration) { require.NoError(t, n.g.Join(now)) }))
			}
			join(0, ns[0])
			join(60*time.Millisecond, ns[1])
			join(60*time.Millisecond, ns[2])
			sent := map[uint64]uint64{}
			for _, n := range ns[:3] {
				every := time.Duration(1+r.IntN(3)) * time.Millisecond
				var step func(now time.Duration)
				step = func(now time.Duration) {
					if n.g.Status() == StatusMember {
						if _, err := n.nk.P.Send(fmt.Appendf(nil, "%d/%d", n.id, sent[n.id]+1), now); err == nil {
							sent[n.id]++
						}
						n.nk.P.Flush(now)
						n.poll()
					}
					if now+every < 1200*time.Millisecond {
						require.NoError(t, s.Do(now+every, n.Member(), step))
					}
				}
				require.NoError(t, s.Do(300*time.Millisecond, n.Member(), step))
			}
			join(400*time.Millisecond+time.Duration(r.IntN(300))*time.Millisecond, ns[3])
			join(400*time.Millisecond+time.Duration(r.IntN(300))*time.Millisecond, ns[4])
			done, err := s.RunWhile(func() bool {
				v := ns[0].g.View()
				for _, n := range ns {
					if n.g.Status() != StatusMember || !n.g.View().Equal(v) || len(v.Members) != 5 || n.nk.P.Captures() > 0 || n.g.coord.vc != nil {
						return true
					}
				}
				return false
			}, 10*time.Millisecond, 10*time.Second)
			require.NoError(t, err)
			require.True(t, done, "seed %d: not joined", seed)
			require.NoError(t, s.RunUntil(max(s.Now(), 1300*time.Millisecond)))
			s.SetNet(sim.NetConfig{})
			done, err = s.RunWhile(func() bool {
				for _, n := range ns {
					for _, snd := range ns[:3] {
						if e, ok := n.nk.P.WindowState(snd.g.Self().Member); !ok || e.Delivered != sent[snd.id] {
							return true
						}
					}
				}
				return false
			}, 10*time.Millisecond, 20*time.Second)
			require.NoError(t, err)
			require.True(t, done, "seed %d: not all delivered", seed)
			for _, n := range ns {
				st := n.nk.P.Stats()
				require.Zero(t, st.MsgNotFoundSent, "seed %d", seed)
				require.Zero(t, st.LostRanges, "seed %d", seed)
				require.Empty(t, n.app.errs, "seed %d node %d", seed, n.id)
				require.Empty(t, n.app.lost)
			}
		})
	}
}
