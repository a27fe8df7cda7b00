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

// TestMergeRequestResent (TestConcurrentStartersUnderLoss seed 375): two
// founders that never heard each other's discovery merge; the first merge
// request, or the first answer, is lost. The leader resends its request
// every ViewAckTimeout until answered, and the other coordinator, holding
// its capture for that merge, answers the repeat with the same answer: the
// merge completes within a few ViewAckTimeouts, not after a MergeTimeout
// and a new attempt (at 28% loss, seed 375 lost a request or an answer
// eight times in a row and merged after 17s).
func TestMergeRequestResent(t *testing.T) {
	for _, lost := range []wire.Type{typeMergeReq, typeMergeRsp} {
		for _, times := range []int{1, 3} {
			t.Run(fmt.Sprintf("type=%d/lost=%d", lost, times), func(t *testing.T) {
				h := newHarness(t, 1, sim.NetConfig{Latency: 100 * time.Microsecond})
				h.tweak = func(c *Config) { c.CreateGroup = true }
				a, b := h.add(1), h.add(2)
				dropped := 0
				h.drop = func(from, to digest.Member, d []byte) bool {
					if len(d) < 3 {
						return false
					}
					switch wire.Type(d[2]) {
					case typeDiscovery:
						return true // two founders
					case lost:
						if dropped < times {
							dropped++
							return true
						}
					}
					return false
				}
				var firstReq time.Duration
				reqs := 0
				h.s.AddTap(func(ev sim.TapEvent) {
					if ev.Kind == sim.TapSend && len(ev.Data) > 2 && wire.Type(ev.Data[2]) == typeMergeReq {
						if reqs == 0 {
							firstReq = ev.At
						}
						reqs++
					}
				})
				h.join(0, a, b)
				h.runUntil(func() bool { return converged(a, b) && quiet(a, b) }, 5*time.Second, "merged")
				require.Equal(t, times, dropped)
				require.Equal(t, uint64(1), a.g.Stats().Merges, "one merge, no second attempt")
				require.Equal(t, 1+map[bool]int{true: times, false: 0}[lost == typeMergeReq]+
					map[bool]int{true: times, false: 0}[lost == typeMergeRsp], reqs)
				cfg := a.g.cfg
				require.Less(t, h.s.Now()-firstReq, time.Duration(times+2)*cfg.ViewAckTimeout+cfg.HeartbeatInterval,
					"merged within a few resends")
				h.noErrors()
			})
		}
	}
}

// TestLostMergeDoneReleasesHold: two founders merge, and every MERGE_DONE
// the leader sends is lost. The other coordinator holds its capture (its
// STABLE advertises the captured point, so stability stops) only until
// the leader's heartbeat, naming the merge view it installed, shows no
// merge under way any more: a few heartbeat intervals after the merge,
// not until its own deadline of 2×MergeTimeout.
func TestLostMergeDoneReleasesHold(t *testing.T) {
	h := newHarness(t, 1, sim.NetConfig{Latency: 100 * time.Microsecond})
	h.tweak = func(c *Config) { c.CreateGroup = true }
	a, b := h.add(1), h.add(2)
	h.drop = func(from, to digest.Member, d []byte) bool {
		return len(d) > 2 && (wire.Type(d[2]) == typeDiscovery || wire.Type(d[2]) == typeMergeDone)
	}
	var held, released time.Duration = -1, -1
	h.s.AddCheck(func(now time.Duration) error {
		switch {
		case held < 0 && b.g.hold != nil:
			held = now
		case held >= 0 && released < 0 && b.g.hold == nil:
			released = now
		}
		return nil
	})
	h.join(0, a, b)
	h.runUntil(func() bool { return released >= 0 && converged(a, b) && quiet(a, b) }, 10*time.Second, "merged, hold released")
	cfg := b.g.cfg
	require.Less(t, released-held, cfg.MergeTimeout/2, "held from %v to %v", held, released)
	h.noErrors()
}
