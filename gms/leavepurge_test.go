package gms

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// TestLeaverCutAfterForcedPurge (simulator, real nakack): in a group of
// four, L sends 1..n (one seqno a datagram); no copy of k..n reaches
// anyone, L force-purges its window up to n and leaves gracefully before
// anyone asked for them (no MSG_NOT_FOUND of L reaches anyone). L can
// repair nothing of k..n: its LEAVE announces its purge point with its
// highest, and the cut declares k..n lost, which every survivor reports,
// once and the same; the cut closes and L gets its LeaveRsp (a cut that
// declared nothing lost waited for repairs that never came, and L timed
// out).
func TestLeaverCutAfterForcedPurge(t *testing.T) {
	for seed := range uint64(seeds(10, 3)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h, all := joinFourBundling(t, seed, 1)
			r := rand.New(rand.NewPCG(seed, 71))
			l := all[r.IntN(4)]
			lm := l.self()
			surv := others(all, l)
			n := uint64(20 + r.IntN(20))
			k := n - uint64(r.IntN(10))
			h.drop = func(from, to digest.Member, dg []byte) bool {
				if origin, first, last, ok := dataSeqs(dg); ok {
					return origin == lm && last >= k && first <= n
				}
				typ := wire.Type(dg[2])
				return from == l.Member() && (typ == wire.TypeMsgNotFound || typ == wire.TypeChallenge)
			}
			start := h.s.Now() + time.Millisecond
			for i := range n {
				h.do(start+time.Duration(i)*time.Millisecond, l, func(now time.Duration) {
					_, err := l.p().Send(fmt.Appendf(nil, "%v/%d", lm, i+1), now)
					require.NoError(t, err)
					l.p().Flush(now)
					l.poll()
				})
			}
			leaveAt := start + time.Duration(n)*time.Millisecond + time.Millisecond
			h.do(leaveAt, l, func(now time.Duration) {
				_, err := l.p().ForcePurge(lm, n)
				require.NoError(t, err)
				require.NoError(t, l.g.Leave(now))
			})
			h.runUntil(func() bool { return len(l.left) > 0 && rConverged(surv...) && rQuiet(surv...) },
				leaveAt+10*time.Second, "left, cut closed")
			require.Equal(t, []error{nil}, l.left)
			require.Zero(t, l.g.Stats().LeaveTimeouts, "seed %d: L timed out waiting for its LeaveRsp", seed)
			for _, s := range surv {
				require.Equal(t, []Range{{k, n}}, s.app.lost[lm], "seed %d node %d", seed, s.id)
				require.Equal(t, n, s.app.state[lm].last, "seed %d node %d", seed, s.id)
			}
			h.noErrors()
		})
	}
}
