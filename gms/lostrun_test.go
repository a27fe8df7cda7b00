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

// TestLostRunSameRangesReal (simulator, real nakack): in a group of four,
// S sends 1..200 (bundles of up to 10); C gets everything, A and D only
// 1..50. S force-purges up to 99 at once: A's request draws a MSG_NOT_FOUND
// that makes 51..99 lost at A, while S's repairs of 100.. never reach A.
// Some time later S force-purges up to 150 as well, and only then do A's
// repairs get through and D's requests reach S. A learns its lost run in
// two pieces, D in one: both must report the same range, [51,150], once
// (a lost run is reported only when its end is known), and deliver
// 1..50 and 151..200.
func TestLostRunSameRangesReal(t *testing.T) {
	for seed := range uint64(seeds(10, 3)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h, all := joinFourBundling(t, seed, 10)
			r := rand.New(rand.NewPCG(seed, 61))
			perm := r.Perm(4)
			s, a, d := all[perm[0]], all[perm[1]], all[perm[2]]
			sm := s.self()
			start := h.s.Now() + time.Millisecond
			second := start + time.Duration(100+r.IntN(200))*time.Millisecond
			open := second + 10*time.Millisecond // datagrams arriving from then on pass
			h.drop = func(from, to digest.Member, dg []byte) bool {
				if h.s.Now() >= open {
					return false
				}
				if origin, _, last, ok := dataSeqs(dg); ok {
					return origin == sm && last > 50 && (to == a.Member() || to == d.Member())
				}
				return from == d.Member() && len(dg) > 2 && wire.Type(dg[2]) == wire.TypeXmitReq
			}
			h.do(start, s, func(now time.Duration) {
				for i := range 200 {
					_, err := s.p().Send(fmt.Appendf(nil, "%v/%d", sm, i+1), now)
					require.NoError(t, err)
				}
				s.p().Flush(now)
				s.poll()
				_, err := s.p().ForcePurge(sm, 99)
				require.NoError(t, err)
			})
			h.do(second, s, func(now time.Duration) {
				require.Equal(t, uint64(1), a.p().Stats().NotFoundConfirmed, "seed %d: A told 51..99 lost before the second purge", seed)
				_, err := s.p().ForcePurge(sm, 150)
				require.NoError(t, err)
			})
			h.runUntil(func() bool { return h.s.Now() > open && allDelivered(all...) && quiet(all...) },
				open+10*time.Second, "everything delivered or reported lost")
			for _, n := range []*node{a, d} {
				require.Equal(t, []Range{{From: 51, To: 150}}, n.app.lost[sm], "seed %d node %d: one lost range, the same at A and D", seed, n.id)
				require.Equal(t, uint64(200-100), n.app.state[sm].count, "seed %d node %d: 1..50 and 151..200 delivered", seed, n.id)
			}
			require.Equal(t, uint64(2), a.p().Stats().NotFoundConfirmed, "seed %d: A learnt its lost run in two pieces", seed)
			require.Equal(t, uint64(1), d.p().Stats().NotFoundConfirmed, "seed %d: D learnt it at once", seed)
			h.noErrors()
		})
	}
}
