package gms

import (
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/stretchr/testify/require"
)

// A merge can be started by anyone's datagram: a coordinator HEARTBEAT
// (the stranger's id larger: we lead) or a MERGE_REQ (its id smaller: we
// answer and hold our capture). A stranger that repeats either must not
// keep stability suspended or the group's view changes waiting.

// strangerMergeRun forms a group of three (coordinator 5), has forge(k)
// reach the coordinator every `every` for `span`, samples the coordinator
// every 50ms and admits a joiner at `joinAt` after the first datagram.
// It returns the fraction of samples in which the coordinator held a
// capture and how long the joiner took to be admitted.
func strangerMergeRun(t *testing.T, x digest.Member, forge func(k int) *msg, every, span, joinAt time.Duration) (held float64, admitted time.Duration) {
	h, a, b, c := joinedAt5(t)
	t0 := h.s.Now()
	for k := 0; time.Duration(k)*every < span; k++ {
		h.do(t0+time.Duration(k)*every, a, func(now time.Duration) {
			d, err := forge(k).encode(7, x)
			require.NoError(t, err)
			require.NoError(t, a.g.Receive(d, now))
		})
	}
	samples, holding := 0, 0
	for at := t0 + 25*time.Millisecond; at < t0+span; at += 50 * time.Millisecond {
		h.do(at, a, func(time.Duration) {
			samples++
			if len(a.cur().captures) > 0 {
				holding++
			}
		})
	}
	j := h.add(8)
	h.join(t0+joinAt, j)
	h.runUntil(func() bool { return converged(a, b, c, j) }, t0+span, "joiner admitted")
	admitted = h.s.Now() - t0 - joinAt
	h.run(t0 + span)
	return float64(holding) / float64(samples), admitted
}

// TestStrangerHeartbeatsHoldNothing: a stranger with a larger id sends a
// coordinator heartbeat every 500ms for 30s and never answers the merge
// request it draws. The coordinator captures nothing (its digest is
// captured only once every answer is in), and the joiner that arrives
// meanwhile is admitted as if there were no merge (the merge still waiting
// for answers yields to the view change).
func TestStrangerHeartbeatsHoldNothing(t *testing.T) {
	x := digest.Member{ID: 100, Inc: 1}
	held, admitted := strangerMergeRun(t, x, func(int) *msg {
		hb := &msg{typ: typeHeartbeat, kind: 1, view: digest.ViewID{Coord: x, Counter: 9}}
		return hb.withAddr("100")
	}, 500*time.Millisecond, 30*time.Second, 3*time.Second)
	require.Zero(t, held, "a capture held for a merge nobody answered")
	require.Less(t, admitted, time.Second, "the joiner waited for the stranger's merge")
}

// TestStrangerMergeReqsBackOff: a stranger with a smaller id sends a
// MERGE_REQ with a new id every 500ms for 60s and never sends the merge
// view. A new request from the same leader ends the hold for its last one
// but continues its episode; an episode that lasted more than MergeTimeout
// without the view is followed by a quiet period in which merge requests
// are refused, doubling (MergeTimeout up to 8×MergeTimeout). Holds: 0-2.5s,
// 4.5-7s, 11-13.5s, 21.5-24s, 40-42.5s, 58.5-60s, 23% of the run; the
// joiner arrives during the third and is admitted when it ends.
func TestStrangerMergeReqsBackOff(t *testing.T) {
	x := digest.Member{ID: 2, Inc: 1}
	held, admitted := strangerMergeRun(t, x, func(k int) *msg {
		mr := &msg{typ: typeMergeReq, id: uint64(1000 + k), view: digest.ViewID{Coord: x, Counter: 9}}
		return mr.withAddr("2")
	}, 500*time.Millisecond, 60*time.Second, 12*time.Second)
	t.Logf("capture held %.0f%% of the time, joiner admitted after %v", 100*held, admitted)
	require.Less(t, held, 0.3, "the stranger kept stability suspended")
	require.Less(t, admitted, 2*2*time.Second+time.Second, "the joiner waited longer than one hold (2×MergeTimeout, 2s by default)")
}
