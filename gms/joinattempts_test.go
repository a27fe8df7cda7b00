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

// TestMaxJoinAttemptsFounds (simulator): a lone starter that may found
// (CreateGroup) with MaxJoinAttempts below DiscoveryRounds founds its
// group: discovery rounds nobody answers are not join attempts.
func TestMaxJoinAttemptsFounds(t *testing.T) {
	h := newHarness(t, 1, sim.NetConfig{Latency: 100 * time.Microsecond})
	h.tweak = func(c *Config) { c.MaxJoinAttempts, c.DiscoveryRounds = 2, 3 }
	a := h.add(1)
	h.join(0, a)
	h.runUntil(func() bool { return settled(a) }, time.Second, "founded")
	require.Empty(t, a.left)
	require.Equal(t, []digest.Member{a.self()}, a.views[0].IDs())
	require.Zero(t, a.g.Stats().JoinAttempts)
	h.noErrors()
}

// TestMaxJoinAttemptsCountsJoinReqs (simulator): MaxJoinAttempts bounds the
// JOIN_REQs that got no valid JoinRsp, not discovery rounds. A joiner that
// may not found (no CreateGroup) starts with MaxJoinAttempts 2 while there
// is no group yet and hears nothing for ten discovery rounds; then b founds
// one. If b never gets its JOIN_REQs, the joiner gives up with
// ErrJoinFailed after exactly two of them; if it does, it joins.
func TestMaxJoinAttemptsCountsJoinReqs(t *testing.T) {
	const round = 50 * time.Millisecond // the default DiscoveryTimeout
	for _, lose := range []bool{false, true} {
		t.Run(fmt.Sprintf("lose=%v", lose), func(t *testing.T) {
			h := newHarness(t, 1, sim.NetConfig{Latency: 100 * time.Microsecond})
			h.tweak = func(c *Config) {
				c.CreateGroup = c.ID == 1
				if c.ID == 2 {
					c.MaxJoinAttempts = 2
				}
			}
			b, j := h.add(1), h.add(2)
			if lose {
				h.drop = func(from, to digest.Member, d []byte) bool {
					return to == b.Member() && len(d) >= 3 && wire.Type(d[2]) == typeJoinReq
				}
			}
			h.join(0, j)
			h.run(10*round + round/2)
			require.Equal(t, StatusJoining, j.g.Status(), "ten unanswered discovery rounds are not join attempts")
			require.Empty(t, j.left)
			require.Zero(t, j.g.Stats().JoinAttempts)
			h.join(h.s.Now(), b)
			if !lose {
				h.runUntil(func() bool { return settled(b, j) }, h.s.Now()+5*time.Second, "joined")
				require.Empty(t, j.left)
				require.Equal(t, uint64(1), j.g.Stats().JoinAttempts)
				h.noErrors()
				return
			}
			h.runUntil(func() bool { return len(j.left) > 0 }, h.s.Now()+5*time.Second, "join failed")
			require.Equal(t, []error{ErrJoinFailed}, j.left)
			require.Equal(t, uint64(2), j.g.Stats().JoinAttempts, "gave up after MaxJoinAttempts JOIN_REQs")
			require.True(t, settled(b))
			h.noErrors()
		})
	}
}
