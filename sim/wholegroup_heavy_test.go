package sim_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nakcast/nakcast/sim"
)

// newWGHeavyScenario draws seed's heavy whole-group scenario: like
// newWGScenario, with 10-30% loss, up to 10% duplication and 30%
// reordering, always a small window (32-128), fragments up to 12 KB in
// one sender out of two and 1-5 faults. The group forms on a clean
// network and settles at a quarter of the loss (wgScenario.heavy): the
// chaos is where the faults and the loss meet.
func newWGHeavyScenario(seed uint64) wgScenario {
	r := rand.New(rand.NewPCG(seed, 0xfee1))
	sc := wgScenario{seed: seed, members: 3 + r.IntN(3), chaos: 3 * time.Second, heavy: true}
	loss := 0.1 + r.Float64()*0.2
	shared := loss * r.Float64()
	sc.net = sim.NetConfig{SharedLoss: shared, Loss: loss - shared, Duplicate: r.Float64() * 0.1,
		Reorder: r.Float64() * 0.3, Jitter: time.Duration(r.Int64N(int64(2 * time.Millisecond)))}
	sc.window = 32 << r.IntN(3)
	sc.unicastNaks = r.IntN(5) == 0
	drawSenders(r, &sc, 2, 12000)
	drawFaults(r, &sc, 1+r.IntN(5))
	return sc
}

// wgHeavyRegressions are heavy seeds that once failed.
//
// 1167: node 2, split away, installed its own singleton view and fixed
// and closed crashed node 4's cut at 36 (lost [33,33]); when the partition
// changed shape, node 5, still in the view node 1 coordinated, took that
// multicast fix and close from node 2 (a mere member of its view) and
// closed node 4's window with its stream at 32: 33..36 neither delivered
// nor reported lost. gms now takes a CUT fix only from its view's
// coordinator and a close only from the coordinator whose fix it
// acknowledged.
//
// 1622, 3220: a state provider had been told a lost run beyond its
// window's capacity (reported at once up to the sender's purge point,
// consumed by the window as purges make room) and captured the state's
// digest in between: the digest said delivered 199 where the state's
// stream stood at 225, so the requester would have waited for 200..225
// and reported them lost a second time. A captured digest now covers a
// lost run reported ahead of the window.
//
// 8023: node 3, behind when node 1 crashed, was the stable point of node
// 1's cut (1); it then delivered up to its window's capacity (33), and the
// rest up to the cut (34..64, declared lost) lay beyond it. A departed
// sender's window gets no STABILITY and the cut's stable point stayed 1:
// the window never made room, the cut never completed. A survivor whose
// window is full of delivered messages below the cut's stable point now
// reports the run the cut declared lost beyond it, and completes the cut
// once its application has consumed the stream up to it (Consumed).
//
// 21710: node 2, leaving gracefully, had acknowledged node 4's fix of
// crashed node 3's cut and delivered 306; once its leave was handled, node
// 4 fixed the cut again for the members it had left (306 lost: nobody
// there held it) and node 2, not asked, took that fix too. A fix now
// counts only for the view it was made in.
//
// 21148, 25137, 25400, 26806: one side of a partition closed a departed
// sender's cut with its own survivors, who had delivered everything, and
// purged; when the members of the other side came back, the same
// coordinator reopened the cut for them, declaring lost what the first
// side had purged (as a merge does). Both closes are that coordinator's:
// the check compared them as one cut and now compares members that
// acknowledged the same fix. (21148 began to fail that way once blocked
// survivors raised the stable point: its first side, no longer stuck at
// its windows' capacity, fetched the rest from the leaver and closed.)
//
// 28888: node 5 force-purged 129 and crashed; node 1 had been told 129 lost
// but not yet reported it (130 was missing), node 3 had delivered it. The
// cut counted 129 as held by both and declared only 130..137 lost, so node
// 1 reported 129..137 and node 3 delivered 129. A departed sender's
// unreported MSG_NOT_FOUND marks are now missing again, fetched from the
// survivors that hold them.
//
// 29607: node 3 (3.1) asked rejoined node 2 (2.2) for the state; 2.2
// captured its own (node 3's stream from its join, at 260) and, while
// streaming it, asked 3.1 for one; 3.1, its own transfer under way,
// served its full state, 2.2 installed it, then 3.1 installed 2.2's older
// one: the two swapped states. gms now serves no state while fetching
// one and fetches only once the transfers it serves have ended
// (TestStateRequestWhileServing in gms/).
//
// 21669: node 3, behind when node 2 crashed, made the cut's stable point
// 79 (cut 143); nodes 1, 3, 4 and 5 then delivered up to their windows'
// capacity (111), while node 6, a joiner whose window started at 111,
// held 112..143. Nobody told the coordinator that node 3 had caught up,
// so the stable point stayed 79, no window made room and the cut never
// completed. 29127: the same with a declared-lost run (107..149) that
// the windows skipped to their capacity, 150..154 held by node 1. A
// survivor whose window is blocked below the cut now reports its
// delivered point, and the coordinator raises the stable point
// (TestCutStableRaisedByProgress in gms/).
//
// 2151, 11088, 12165, 16224, 22003: members that lost the same run of a
// sender's seqnos reported it in different ranges, [141,187] then
// [188,251] where another reported [141,251]. The sender's purge point
// became known in steps (a forced purge twice, or a partition that healed
// and split again, each MSG_NOT_FOUND or merge digest naming a later
// point), and a run that reached a window's capacity, or the range a
// merge reports before a window's start, was reported at once up to the
// point known then. Such a run is now a pending event, consumed by the
// window silently and reported once its end is known; a departure gives
// the window back what it consumed of it. In 16224 (and in 12165 once
// that was fixed) a departed sender came back before one survivor had
// reported the run its cut ended at the cut, while another had, and the
// sender had purged what followed: the cut now stays an event boundary
// for the first as well.
//
// 34241: in a view of two, the network duplicated node 3's last request;
// node 1 answered the original, node 3 delivered the repair and the group
// settled, then the copy arrived and node 1 repaired again, as a view of
// two had no linger (a repeat was taken to be the lone receiver's retry).
// A view of two now ignores a repeat within half the retry interval
// (TestLoneReceiverDuplicatedRequest in nakack/).
//
// 39466: node 1 fixed crashed node 2's cut at 190 in its side of a
// partition; node 3 acknowledged it. The merge made the fix anew at 200
// (191..200 lost: the other side had purged them), node 3 missed it and
// resent its acknowledgement of the first fix, which node 1 counted for
// the new one: the close reached node 3, which closed its window at 190,
// 191..200 neither delivered nor reported lost. A CutAck and a close now
// name the fix (TestCutAckAndCloseNameTheFix in gms/).
//
// 85172: node 2, cut off alone, had its cut fixed at 209 (208 declared
// lost, 209 the first fragment of a message going on beyond it). Node 3
// held 209 and reported 208..209 lost; node 1 had not received 209 when
// the merge brought node 2 back, so it could not tell that the cut ended
// an event there and later reported 208..456 as one, node 3 210..456. A
// dropped cut not yet reported past is now a boundary whatever the window
// holds at it (TestMergeViewKeepsCutAsBoundWhereCutNotHeld in nakack/).
//
// 80456: node 5 started alone and merged with the group at 766ms, when
// node 2 (split away since 621ms) had sent up to 144: node 5, which had
// never seen node 2, reported 1..144 lost (a sender never seen started at
// 0). Node 2 was then excluded (cut at 144), node 4 joined without it,
// and the merge at 2.85s brought it back with 145..238 purged: node 5
// reported 145..238, node 4, meeting node 2 for the first time, 1..238 in
// one range. A sender never seen now starts at the merge digest's Low, as
// a joiner's window, nothing before it reported (TestMergeUnseenMember in
// gms/, TestMergeDigestUnknownSender in nakack/).
var wgHeavyRegressions = []uint64{1167, 1622, 2151, 3220, 8023, 11088, 12165, 16224, 21148, 21669, 21710, 22003, 25137, 25400, 26806, 28888, 29127, 29607, 34241, 39466, 80456, 85172}

// TestWholeGroupHeavy runs sim.WholeGroupSeeds() heavy whole-group
// scenarios and the regression seeds, checked like
// TestWholeGroupRandomised's.
func TestWholeGroupHeavy(t *testing.T) {
	runWGSuite(t, newWGHeavyScenario, wgHeavyRegressions)
}
