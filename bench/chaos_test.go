package bench

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine"
)

func TestParseChaos(t *testing.T) {
	s, err := ParseChaos("kill:2@5s,stop:3@8s+4s,restart:2@12s,partition:1,2|3,4@15s+5s")
	require.NoError(t, err)
	require.Equal(t, ChaosSchedule{
		{Kind: ChaosKill, Member: 2, At: 5 * time.Second},
		{Kind: ChaosStop, Member: 3, At: 8 * time.Second, For: 4 * time.Second},
		{Kind: ChaosRestart, Member: 2, At: 12 * time.Second},
		{Kind: ChaosPartition, Sets: [][]int{{1, 2}, {3, 4}}, At: 15 * time.Second, For: 5 * time.Second},
	}, s)
	require.Equal(t, "kill:2@5s,stop:3@8s+4s,restart:2@12s,partition:1,2|3,4@15s+5s", s.String())
	require.NoError(t, s.Check(5, []int{0, 1}, 30*time.Second))
	s, err = ParseChaos(" partition:0|1,2@1m30s+500ms , kill:1@2m ")
	require.NoError(t, err)
	require.Equal(t, "partition:0|1,2@1m30s+500ms,kill:1@2m0s", s.String())
}

func TestParseChaosErrors(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"", "empty spec"},
		{"kill", `event 1 "kill": want KIND:TARGET@AT`},
		{"boom:1@1s", `unknown kind "boom"`},
		{"kill:1", "no time"},
		{"kill:x@1s", `member "x": want an index`},
		{"kill:-1@1s", `member "-1"`},
		{"kill:5000@1s", `member "5000"`},
		{"kill:1@soon", `time "soon"`},
		{"kill:1@-1s", "time -1s: want 0..24h"},
		{"kill:1@1s+2s", "kill takes no length"},
		{"restart:1@1s+2s", "restart takes no length"},
		{"stop:1@1s", "stop needs a length"},
		{"stop:1@1s+0s", "length 0"},
		{"partition:1,2@1s+1s", "want at least two sets"},
		{"partition:1|1@1s+1s", "member 1 is in two sets"},
		{"partition:1||2@1s+1s", `partition set 2: member ""`},
		{"kill:1@1s,stop:2@2s", `event 2 "stop:2@2s"`},
	} {
		_, err := ParseChaos(tc.spec)
		require.ErrorContains(t, err, tc.want, tc.spec)
	}
}

func TestChaosCheckErrors(t *testing.T) {
	senders := []int{0, 1}
	for _, tc := range []struct{ spec, want string }{
		{"kill:0@1s", "member 0 is a sender"},
		{"stop:1@1s+1s", "member 1 is a sender"},
		{"kill:7@1s", "member 7: the run has members 0..4"},
		{"partition:1|7@1s+1s", "member 7"},
		{"kill:2@1s,kill:2@2s", "kill:2@2s: member 2 is already dead"},
		{"restart:2@1s", "member 2 is running"},
		{"kill:2@1s,stop:2@2s+1s", "member 2 is dead"},
		{"stop:2@1s+3s,kill:2@2s", "member 2 is stopped then: kill:2@2s"},
		{"partition:1|2@1s+3s,partition:3|4@2s+1s", "one partition at a time"},
		{"kill:2@10s", "over at 10s, not before the senders stop (-duration 10s)"},
		{"stop:2@8s+3s", "over at 11s"},
	} {
		s, err := ParseChaos(tc.spec)
		require.NoError(t, err, tc.spec)
		require.ErrorContains(t, s.Check(5, senders, 10*time.Second), tc.want, tc.spec)
	}
	s, err := ParseChaos("kill:2@1s,restart:2@2s,kill:2@3s,restart:2@4s,stop:2@5s+1s,partition:0,1|2,3,4@7s+1s")
	require.NoError(t, err)
	require.NoError(t, s.Check(5, senders, 10*time.Second))
}

// FuzzParseChaos: any spec parses or is refused with an error, never a
// panic, and a parsed schedule writes back to a spec that parses to the
// same schedule; Check never panics either.
func FuzzParseChaos(f *testing.F) {
	for _, s := range []string{"kill:2@5s,stop:3@8s+4s,restart:2@12s,partition:1,2|3,4@15s+5s", "stop:1@1ms+1h", "partition:0|1@0s+1s", "kill:1@1s,,", "partition:1,2|@1s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := ParseChaos(spec)
		if err != nil {
			return
		}
		back, err := ParseChaos(s.String())
		if err != nil {
			t.Fatalf("%q parsed to %v, which does not parse: %v", spec, s, err)
		}
		if fmt.Sprint(back) != fmt.Sprint(s) {
			t.Fatalf("%q: %v written back parses to %v", spec, s, back)
		}
		_ = s.Check(5, []int{0}, time.Minute)
	})
}

// chaosResult is a member result for CheckChaos's tests: one sender
// (member 0 of run 100, ID 101), views and events as given.
func chaosResult(index, restart int, s SenderResult, views [][]uint64, events ...EventRecord) MemberResult {
	r := MemberResult{Schema: MemberSchema, RunID: 100, Index: index, Restart: restart, Events: events}
	for i, v := range views {
		r.Views = append(r.Views, ViewRecord{Ns: int64(10 * (i + 1)), Members: v})
	}
	s.Sender, s.Complete = 101, true
	if s.Lost == nil {
		s.Lost = []digest.Range{}
	}
	r.Senders = []SenderResult{s}
	return r
}

func TestCheckChaos(t *testing.T) {
	full := [][]uint64{{101, 102, 103}}
	lostEv := EventRecord{Ns: 15, Kind: "lost", Member: 101, From: 5, To: 6}
	stayer := SenderResult{Delivered: 8, LastSeq: 10, Hash: "h", Lost: []digest.Range{{From: 5, To: 6}}, LostMsgs: 2, Runs: []digest.Range{{From: 1, To: 10}}}
	seg := []SegmentHash{{Seg: 0, N: SegmentSeqnos, Hash: "a"}, {Seg: 1, N: SegmentSeqnos, Hash: "b"}}
	good := []MemberResult{
		chaosResult(0, 0, stayer, full, lostEv),
		chaosResult(1, 0, stayer, full, lostEv),
		{Index: 2, Killed: true},
		chaosResult(2, 1, SenderResult{Delivered: 3, LastSeq: 10, Hash: "x", Runs: []digest.Range{{From: 8, To: 10}}}, full),
	}
	rep := CheckChaos(good)
	require.Empty(t, rep.Problems, rep.String())
	require.Contains(t, rep.String(), "member 2: killed by the schedule")
	require.Contains(t, rep.String(), "member 2 (restart 1): sender 0: entered its view 1 times; delivered 3 in runs [[8,10]]")

	for _, tc := range []struct {
		name string
		mod  func(rs []MemberResult)
		want string
	}{
		{"stayers differ", func(rs []MemberResult) { rs[1].Senders[0].Hash = "other" }, "stayers differ"},
		{"gap in a stayer", func(rs []MemberResult) {
			rs[1].Senders[0].Runs = []digest.Range{{From: 1, To: 4}, {From: 7, To: 10}}
		}, "member 1: sender 0: delivered in runs [[1,4] [7,10]]: a gap no lost range covers"},
		{"lost without its event", func(rs []MemberResult) { rs[1].Events = nil }, "lost range [5,6] without an EventLost"},
		{"stayer incomplete", func(rs []MemberResult) { rs[0].Senders[0].Complete = false }, "member 0: sender 0: last message not delivered"},
		{"out of order", func(rs []MemberResult) { rs[3].Senders[0].OutOfOrder = 1 }, "member 2 (restart 1): sender 0: 1 deliveries or lost ranges out of order"},
		{"restart delivers what the stayers lost", func(rs []MemberResult) {
			rs[3].Senders[0].Runs = []digest.Range{{From: 4, To: 10}}
			rs[3].Senders[0].Delivered = 7
		}, "delivered 2 messages of [5,6], which the stayers report lost"},
		{"restart with a gap", func(rs []MemberResult) {
			rs[3].Senders[0].Runs = []digest.Range{{From: 7, To: 7}, {From: 9, To: 10}}
		}, "delivered in 2 runs [[7,7] [9,10]], but the sender entered its view 1 times"},
		{"restart short of the end", func(rs []MemberResult) {
			rs[3].Senders[0].Runs = []digest.Range{{From: 7, To: 9}}
		}, "did not deliver to the end"},
		{"restart differs in a block", func(rs []MemberResult) {
			rs[0].Senders[0].Segments, rs[1].Senders[0].Segments = seg, seg
			rs[3].Senders[0].Segments = []SegmentHash{{Seg: 1, N: SegmentSeqnos, Hash: "c"}}
		}, "seqnos 1025..2048 differ from the stayers'"},
		{"no result", func(rs []MemberResult) { rs[1] = MemberResult{Index: 1} }, "member 1: no result"},
		{"nobody stayed", func(rs []MemberResult) {
			for i := range rs {
				rs[i].Events = append(rs[i].Events, EventRecord{Ns: 20, Kind: "left", Err: "excluded"})
			}
		}, "sender 0: excluded 0.0 s after its first view (excluded) and rejoined as a new incarnation"},
		{"nobody stayed, the sender excluded by no one", func(rs []MemberResult) {
			for i := range rs {
				rs[i].Views = append(rs[i].Views, ViewRecord{Ns: 20, Members: []uint64{102, 103}}, ViewRecord{Ns: 30, Members: []uint64{101, 102, 103}})
			}
		}, "sender 0: no member stayed in the group with it throughout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := make([]MemberResult, len(good))
			for i, r := range good {
				r.Senders = append([]SenderResult(nil), r.Senders...)
				rs[i] = r
			}
			tc.mod(rs)
			rep := CheckChaos(rs)
			require.NotEmpty(t, rep.Problems)
			require.Contains(t, rep.String(), tc.want)
		})
	}
	// A member excluded and rejoined may resume after a gap: the sender
	// entered its view twice.
	rejoined := chaosResult(1, 0, SenderResult{Delivered: 8, LastSeq: 10, Hash: "y", Runs: []digest.Range{{From: 1, To: 4}, {From: 7, To: 10}}},
		[][]uint64{{101, 102, 103}, {102}}, EventRecord{Ns: 25, Kind: "left", Err: "excluded"})
	rejoined.Views = append(rejoined.Views, ViewRecord{Ns: 30, Members: []uint64{101, 102, 103}})
	rep = CheckChaos([]MemberResult{good[0], rejoined})
	require.Empty(t, rep.Problems, rep.String())
	require.Contains(t, rep.String(), "entered its view 2 times")
}

func TestChaosSeedCorpus(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join("testdata", "fuzz", "FuzzParseChaos"))
	require.NoError(t, err, "the seed corpus is committed")
	require.NotEmpty(t, entries)
}

// oneSenderHandler is a member handler of run 100 following one sender,
// member ID 101.
func oneSenderHandler() (*memberHandler, *recvState) {
	h := newMemberHandler(100, 1, 1)
	st := &recvState{hist: NewHistogram(), nextIdx: 1}
	h.bySlot[0] = st
	h.pending.Store(1)
	return h, st
}

// TestMemberHandlerRuns: lost ranges continue a run, a gap starts a new
// one (a late join or a rejoin), going back is out of order; blocks of
// SegmentSeqnos seqnos are hashed apart.
func TestMemberHandlerRuns(t *testing.T) {
	h, st := oneSenderHandler()
	sender := digest.Member{ID: 101, Inc: 1}
	p := make([]byte, 32)
	deliver := func(seq uint64) {
		binary.LittleEndian.PutUint64(p[8:], seq)
		h.Deliver(sender, seq, p)
	}
	for _, seq := range []uint64{3, 4, 5} { // a late joiner starts anywhere
		deliver(seq)
	}
	h.Lost(sender, 6, 7)
	deliver(8)
	deliver(12) // a gap no lost range covers
	h.Lost(sender, 13, 13)
	deliver(14)
	require.Zero(t, st.res.OutOfOrder)
	deliver(9) // back
	require.Equal(t, int64(1), st.res.OutOfOrder)
	st.finish()
	require.Equal(t, []digest.Range{{From: 3, To: 8}, {From: 12, To: 14}}, st.res.Runs)

	h, st = oneSenderHandler()
	for seq := uint64(1); seq <= SegmentSeqnos+2; seq++ {
		deliver(seq)
	}
	st.finish()
	require.Len(t, st.res.Segments, 2)
	require.Equal(t, SegmentHash{Seg: 1, N: 2, Hash: st.res.Segments[1].Hash}, st.res.Segments[1])
	require.Equal(t, SegmentSeqnos, st.res.Segments[0].N)
	require.Equal(t, []digest.Range{{From: 1, To: SegmentSeqnos + 2}}, st.res.Runs)
}

// TestMemberArgsJoinRoundTrip: a restart's command line (automatic
// membership, -join, -suspect-timeout) parses back to its config.
func TestMemberArgsJoinRoundTrip(t *testing.T) {
	want := MemberConfig{RunID: 77, Index: 2, Members: 5, Senders: []int{0, 1}, MsgSize: 200, Duration: 9 * time.Second,
		Rate: 2000, SampleEvery: 1, Dynamic: true, Join: true,
		Config: engine.Config{Group: netip.MustParseAddrPort("239.1.2.3:4567"), Interface: "lo",
			Membership: engine.MembershipConfig{SuspectTimeout: 2 * time.Second}, Transport: engine.TransportConfig{Backend: engine.TransportUDP}}}
	got, _, _, err := parseMemberArgs(MemberArgs(want, "r.json", true), io.Discard)
	require.NoError(t, err)
	require.Equal(t, want, got)
	want.Dynamic = false
	_, _, _, err = parseMemberArgs(MemberArgs(want, "r.json", true), io.Discard)
	require.ErrorContains(t, err, "-join needs automatic membership")
}
