package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"math/rand"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/ebpf"
	"github.com/stretchr/testify/require"
	"github.com/zeebo/xxh3"

	"github.com/nakcast/nakcast/engine"
)

func TestRunGroupExactDelivery(t *testing.T) {
	count := int64(groupMessages)
	for _, tt := range []struct {
		name    string
		members int
		senders []int
		size    int
		loss    float64
		batch   int  // MemberConfig.SendBatch
		discard bool // MemberConfig.DiscardOwn: senders record what they sent
		invoked bool // engine.ThreadingInvoked: the harness runs DoWork
	}{
		{"1to2/64B", 3, []int{0}, 64, 0, 0, false, false},
		{"1to2/1KiB/loss5%", 3, []int{0}, 1024, 0.05, 0, false, false},
		{"2senders/loss5%", 3, []int{0, 1}, 100, 0.05, 0, false, false},
		{"1to2/64B/batch", 3, []int{0}, 64, 0, 64, false, false}, // the count is not a multiple of 64
		{"2senders/batch/loss5%", 3, []int{0, 1}, 100, 0.05, 37, false, false},
		{"2senders/discardown/loss5%", 3, []int{0, 1}, 100, 0.05, 0, true, false},
		{"1to2/batch/discardown", 3, []int{0}, 64, 0, 64, true, false},
		{"2senders/invoked/loss5%", 3, []int{0, 1}, 100, 0.05, 0, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := MemberConfig{
				Members:   tt.members,
				Senders:   tt.senders,
				MsgSize:   tt.size,
				Count:     count,
				SendBatch: tt.batch,
				Config:    engine.Config{Group: RandomGroup(), DiscardOwn: tt.discard},
			}
			if tt.loss > 0 {
				// Small datagrams, so that a few hundred carry data and the
				// injected loss hits data (not only control datagrams) in
				// every run: the repair assertion below then always applies.
				cfg.Tuning.MaxDatagram = 1472
			}
			if tt.invoked {
				cfg.Agent.Threading = engine.ThreadingInvoked
			}
			rs, err := RunGroup(ctx, cfg, func(i int, c *MemberConfig) {
				if i != 0 {
					c.LossRate = tt.loss
				}
			}, nil)
			require.NoError(t, err)
			require.Len(t, rs, tt.members)
			require.Empty(t, Verify(rs))
			for _, r := range rs {
				require.True(t, r.Complete)
				require.Len(t, r.Senders, len(tt.senders))
				for _, s := range r.Senders {
					require.Equal(t, count, s.Delivered, "member %d sender %d", r.Index, s.Index)
					require.Equal(t, uint64(1), s.FirstSeq)
					require.Equal(t, uint64(count), s.LastSeq)
					require.Zero(t, s.OutOfOrder)
					require.Empty(t, s.Lost)
					if tt.discard && s.Index == r.Index {
						// Recorded as sent, not delivered: no latency.
						require.Zero(t, r.Stats.Delivered-deliveredOthers(r), "member %d delivered its own messages", r.Index)
						continue
					}
					require.Positive(t, s.Latency.Count)
					require.NotNil(t, s.Latency.Histogram())
				}
			}
			row := GroupRow("loopback", caseLabel(tt.loss), rs, 65507)
			require.True(t, row.Verified, row.Note)
			require.Equal(t, len(rs)-len(tt.senders), row.Receivers)
			require.Zero(t, row.LossPct)
			require.Positive(t, row.MsgsPerSec)
			var injected uint64
			for _, r := range rs {
				injected += r.Injected
			}
			if injected > 0 {
				require.Positive(t, row.Retransmitted, "%d datagrams dropped, none repaired", injected)
			}
		})
	}
}

// deliveredOthers is how many messages of other senders r delivered.
func deliveredOthers(r MemberResult) uint64 {
	var n uint64
	for _, s := range r.Senders {
		if s.Index != r.Index {
			n += uint64(s.Delivered)
		}
	}
	return n
}

func caseLabel(loss float64) string {
	if loss == 0 {
		return "lossless"
	}
	return "lossy"
}

func TestRunGroupDurationAndCancel(t *testing.T) {
	// A duration run ends by itself; a cancelled one still ends every
	// stream with its last message and reports what it measured.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := MemberConfig{Members: 2, MsgSize: 64, Duration: time.Minute, Config: engine.Config{Group: RandomGroup()}}
	var rs []MemberResult
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		rs, err = RunGroup(ctx, cfg, nil, nil)
	}()
	time.AfterFunc(300*time.Millisecond, cancel)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("cancelled run did not end")
	}
	require.NoError(t, err)
	require.Empty(t, Verify(rs))
	for _, r := range rs {
		require.True(t, r.Interrupted)
		require.Positive(t, r.Senders[0].Delivered)
	}

	for _, batch := range []int{0, 50} {
		rs, err = RunGroup(context.Background(), MemberConfig{Members: 2, Duration: 200 * time.Millisecond, SendBatch: batch, Config: engine.Config{Group: RandomGroup()}}, nil, nil)
		require.NoError(t, err)
		require.Empty(t, Verify(rs))
		require.Positive(t, rs[1].Senders[0].Delivered)
		require.Equal(t, rs[0].Sent, rs[1].Senders[0].Delivered, "batch %d", batch)
	}
}

func TestVerifyFindsDifferences(t *testing.T) {
	ok := func() []MemberResult {
		s := SenderResult{Sender: 1, Index: 0, Delivered: 10, FirstSeq: 1, LastSeq: 10, Hash: "aa", Complete: true, Lost: []digest.Range{}}
		return []MemberResult{
			{Schema: MemberSchema, Index: 0, Role: "send", Sent: 10, Senders: []SenderResult{s}},
			{Schema: MemberSchema, Index: 1, Role: "receive", Senders: []SenderResult{s}},
		}
	}
	require.Empty(t, Verify(ok()))
	for _, tt := range []struct {
		name string
		mod  func(rs []MemberResult)
		want string
	}{
		{"hash", func(rs []MemberResult) { rs[1].Senders[0].Hash = "bb" }, "hash"},
		{"count", func(rs []MemberResult) { rs[1].Senders[0].Delivered, rs[1].Senders[0].LastSeq = 9, 9 }, "delivered 9"},
		{"incomplete", func(rs []MemberResult) { rs[1].Senders[0].Complete = false }, "last message"},
		{"lost", func(rs []MemberResult) { rs[1].Senders[0].Lost = []digest.Range{{From: 3, To: 4}} }, "lost"},
		{"order", func(rs []MemberResult) { rs[1].Senders[0].OutOfOrder = 1 }, "out of order"},
		{"missing", func(rs []MemberResult) { rs[1] = MemberResult{Index: 1} }, "no result"},
		{"error", func(rs []MemberResult) { rs[1].Error = "boom" }, "boom"},
		{"schema", func(rs []MemberResult) { rs[1].Schema = "nakcast.member/2" }, "schema nakcast.member/2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rs := ok()
			tt.mod(rs)
			bad := Verify(rs)
			require.NotEmpty(t, bad)
			require.Contains(t, strings.Join(bad, "\n"), tt.want)
		})
	}
}

func TestMemberHandlerHashAndOrder(t *testing.T) {
	h := newMemberHandler(100, 2, 1)
	st := &recvState{hist: NewHistogram(), nextIdx: 1}
	h.bySlot[0] = st
	h.pending.Store(1)
	sender := digest.Member{ID: 101, Inc: 1}
	var block uint64 // the documented folds, written out independently of FoldHash
	p := make([]byte, 32)
	for i := uint64(1); i <= 5; i++ {
		idx := i
		if i == 5 {
			idx |= lastFlag
		}
		binary.LittleEndian.PutUint64(p, uint64(Nanotime()))
		binary.LittleEndian.PutUint64(p[8:], idx)
		h.Deliver(sender, i, p)
		x := xxh3.Hash(p) ^ i*1609587929392839161 ^ uint64(len(p))*9650029242287828579
		block = bits.RotateLeft64(block*11400714785074694791^x, 31) * 14029467366897019727
	}
	n, p4 := uint64(5), uint64(9650029242287828579)
	x := block ^ 0*1609587929392839161 ^ n*p4 // block 0 of 5 messages
	want := bits.RotateLeft64(0*11400714785074694791^x, 31) * 14029467366897019727
	h.Deliver(digest.Member{ID: 999, Inc: 1}, 1, p) // not a sender: ignored
	select {
	case <-h.done:
	default:
		t.Fatal("last message did not complete the member")
	}
	require.Equal(t, int64(5), st.res.Delivered)
	require.Zero(t, st.res.OutOfOrder)
	st.finish()
	require.Equal(t, []SegmentHash{{Seg: 0, N: 5, Hash: fmt.Sprintf("%016x", block)}}, st.res.Segments)
	require.Equal(t, want, st.hash)
	require.Equal(t, int64(5), st.hist.TotalCount())
	// A gap in the payload index is counted.
	binary.LittleEndian.PutUint64(p[8:], 9)
	h.Deliver(sender, 6, p)
	require.Equal(t, int64(1), st.res.OutOfOrder)
}

// TestMemberHandlerBatchIsDeliverEach: a batch leaves the same record as
// its messages delivered one by one.
func TestMemberHandlerBatchIsDeliverEach(t *testing.T) {
	newH := func() (*memberHandler, *recvState) {
		h := newMemberHandler(100, 1, 2)
		st := &recvState{hist: NewHistogram(), nextIdx: 1}
		h.bySlot[0] = st
		h.pending.Store(1)
		return h, st
	}
	sender := digest.Member{ID: 101, Inc: 1}
	ps := make([][]byte, 7)
	for i := range ps {
		p := make([]byte, 24+i)
		idx := uint64(i + 1)
		if i == len(ps)-1 {
			idx |= lastFlag
		}
		binary.LittleEndian.PutUint64(p, 12345)
		binary.LittleEndian.PutUint64(p[8:], idx)
		p[16] = byte(i)
		ps[i] = p
	}
	one, stOne := newH()
	for i, p := range ps {
		one.Deliver(sender, uint64(i+1), p)
	}
	batch, stBatch := newH()
	batch.DeliverBatch(sender, 1, ps[:3])
	batch.DeliverBatch(digest.Member{ID: 999, Inc: 1}, 4, ps[3:]) // not a sender: ignored
	batch.DeliverBatch(sender, 4, ps[3:])
	stOne.finish()
	stBatch.finish()
	require.Positive(t, stBatch.res.LastDeliverNs)
	stOne.res.LastDeliverNs, stBatch.res.LastDeliverNs = 0, 0 // clock reads
	require.Equal(t, stOne.res, stBatch.res)
	require.Equal(t, stOne.hash, stBatch.hash)
	require.Equal(t, int64(len(ps)), stBatch.res.Delivered)
	require.Equal(t, stOne.hist.TotalCount(), stBatch.hist.TotalCount())
	require.True(t, stBatch.complete.Load())
}

func TestFoldHashOrderSensitive(t *testing.T) {
	a, b := []byte("first message"), []byte("second message")
	ab := FoldHash(FoldHash(0, 1, a), 2, b)
	require.NotEqual(t, ab, FoldHash(FoldHash(0, 1, b), 2, a), "payloads swapped")
	require.NotEqual(t, ab, FoldHash(FoldHash(0, 2, a), 1, b), "seqnos swapped")
	require.NotEqual(t, ab, FoldHash(FoldHash(0, 1, a), 2, b[:len(b)-1]), "length")
	require.Equal(t, ab, FoldHash(FoldHash(0, 1, a), 2, b))
}

func TestMemberHandlerAllocatesNothing(t *testing.T) {
	h := newMemberHandler(100, 1, 1)
	h.bySlot[0] = &recvState{hist: NewHistogram(), nextIdx: 1}
	h.pending.Store(1)
	sender := digest.Member{ID: 101, Inc: 1}
	p := make([]byte, 64)
	seq := uint64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		seq++
		binary.LittleEndian.PutUint64(p, uint64(Nanotime()))
		binary.LittleEndian.PutUint64(p[8:], seq)
		h.Deliver(sender, seq, p)
	})
	require.Zero(t, allocs)
}

// BenchmarkMemberHandlerDeliver: the handler one message at a time
// (every latency sampled), and as the engine calls it with a
// BatchHandler ("batch": runs of 64, one sample in 16, mcastbench's
// default).
func BenchmarkMemberHandlerDeliver(b *testing.B) {
	for _, size := range []int{64, 1024} {
		for _, run := range []int{1, 64} {
			name := byteSize(size)
			every := 1
			if run > 1 {
				name, every = name+"/batch", 16
			}
			b.Run(name, func(b *testing.B) {
				h := newMemberHandler(100, 1, every)
				h.bySlot[0] = &recvState{hist: NewHistogram(), nextIdx: 1}
				sender := digest.Member{ID: 101, Inc: 1}
				ps := make([][]byte, run)
				for i := range ps {
					ps[i] = make([]byte, size)
				}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				seq := uint64(1)
				for i := 0; i < b.N; i += run {
					now := uint64(Nanotime())
					for j, p := range ps {
						binary.LittleEndian.PutUint64(p, now)
						binary.LittleEndian.PutUint64(p[8:], seq+uint64(j))
					}
					if run == 1 {
						h.Deliver(sender, seq, ps[0])
					} else {
						h.DeliverBatch(sender, seq, ps)
					}
					seq += uint64(run)
				}
			})
		}
	}
}

func TestMemberMainWritesJSON(t *testing.T) {
	g := RandomGroup()
	var out, errOut bytes.Buffer
	err := MemberMain(context.Background(), []string{"-group", g.String(), "-count", "500", "-size", "100"}, strings.NewReader(""), &out, &errOut)
	require.NoError(t, err, errOut.String())
	var r MemberResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &r))
	require.Equal(t, MemberSchema, r.Schema)
	require.Equal(t, "send", r.Role)
	require.Equal(t, int64(500), r.Sent)
	require.Len(t, r.Senders, 1)
	require.Equal(t, int64(500), r.Senders[0].Delivered)
	require.True(t, r.Complete)
	require.Len(t, r.Senders[0].Hash, 16)
}

// TestMemberMainDiscardOwn: MemberArgs passes DiscardOwn on (-discard-own);
// a lone sender then delivers nothing to itself and records its own stream
// as it sends. (That the record matches what receivers deliver is
// TestRunGroupExactDelivery's discardown cases: Verify compares them.)
func TestMemberMainDiscardOwn(t *testing.T) {
	for _, discard := range []bool{false, true} {
		cfg := MemberConfig{
			RunID:       7,
			Members:     1,
			Senders:     []int{0},
			Count:       500,
			MsgSize:     100,
			Duration:    time.Second,
			SampleEvery: 1,
			Config:      engine.Config{Group: RandomGroup(), DiscardOwn: discard},
		}
		var out, errOut bytes.Buffer
		require.NoError(t, MemberMain(context.Background(), MemberArgs(cfg, "-", false), strings.NewReader(""), &out, &errOut), errOut.String())
		var r MemberResult
		require.NoError(t, json.Unmarshal(out.Bytes(), &r))
		require.True(t, r.Complete)
		require.Equal(t, int64(500), r.Senders[0].Delivered)
		require.Equal(t, uint64(500), r.Senders[0].LastSeq)
		if discard {
			require.Zero(t, r.Stats.Delivered, "a DiscardOwn sender delivered its own messages")
		} else {
			require.Equal(t, uint64(500), r.Stats.Delivered)
		}
	}
}

// TestMemberArgsRoundTrip: what MemberArgs writes, MemberMain's parser
// reads back: every field MemberArgs carries, the result file and
// -wait-start.
func TestMemberArgsRoundTrip(t *testing.T) {
	want := MemberConfig{
		RunID:       77,
		Index:       1,
		Members:     3,
		Senders:     []int{0, 2},
		MsgSize:     300,
		Count:       1234,
		Duration:    3 * time.Second,
		LossRate:    0.05,
		SampleEvery: 16,
		SendBatch:   32,
		Timeout:     9 * time.Second,
		Config: engine.Config{Group: netip.MustParseAddrPort("239.1.2.3:4567"), Interface: "lo", Network: engine.NetworkConfig{Unicast: netip.MustParseAddrPort("127.0.0.1:4568"), TTL: 0}, Membership: engine.MembershipConfig{MemberAddrs: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.2:4568"), netip.MustParseAddrPort("127.0.0.1:4568"),
			netip.MustParseAddrPort("127.0.0.3:4568")}}, Agent: engine.AgentConfig{Idle: engine.IdleSpin, Threading: engine.ThreadingInvoked, ExclusiveSender: true}, Transport: engine.TransportConfig{Backend: engine.TransportUDP, NoGSO: true, NoLoopback: true, XDP: ebpf.Options{Mode: "generic"}}, Tuning: engine.TuningConfig{MaxDatagram: 8000, BundleBytes: 4000}, DiscardOwn: true},
	}
	got, out, wait, err := parseMemberArgs(MemberArgs(want, "result.json", true), io.Discard)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, "result.json", out)
	require.True(t, wait)
}

// TestMemberMainExclusiveSender: a sender run with ExclusiveSender (Send,
// then SendBatch) delivers its whole stream to itself.
func TestMemberMainExclusiveSender(t *testing.T) {
	for _, batch := range []int{0, 64} {
		cfg := MemberConfig{
			RunID:       8,
			Members:     1,
			Senders:     []int{0},
			Count:       5000,
			MsgSize:     100,
			Duration:    time.Second,
			SampleEvery: 1,
			SendBatch:   batch,
			Config:      engine.Config{Group: RandomGroup(), Agent: engine.AgentConfig{ExclusiveSender: true}},
		}
		args := MemberArgs(cfg, "-", false)
		var out, errOut bytes.Buffer
		require.NoError(t, MemberMain(context.Background(), args, strings.NewReader(""), &out, &errOut), errOut.String())
		var r MemberResult
		require.NoError(t, json.Unmarshal(out.Bytes(), &r))
		require.True(t, r.Complete)
		require.Equal(t, int64(5000), r.Senders[0].Delivered)
		require.Equal(t, uint64(5000), r.Stats.Delivered)
	}
}

func TestMemberMainUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{}, "-group is required"},
		{[]string{"-group", "10.0.0.1:5000"}, "Group"},
		{[]string{"-group", "239.1.2.3:5000", "-size", "8"}, "MsgSize"},
		{[]string{"-group", "239.1.2.3:5000", "-idle", "nap"}, "-idle"},
		{[]string{"-group", "239.1.2.3:5000", "-senders", "x"}, "-senders"},
		{[]string{"-group", "239.1.2.3:5000", "-bogus"}, "bogus"},
		{[]string{"-group", "239.1.2.3:5000", "-index", "3", "-members", "2"}, "Index"},
		{[]string{"-group", "239.1.2.3:5000", "-batch", "-2"}, "-batch"},
		{[]string{"-group", "239.1.2.3:5000", "-members", "0"}, "-members 0"},
		{[]string{"-group", "239.1.2.3:5000", "-size", "100000000"}, "-size 100000000"},
		{[]string{"-group", "239.1.2.3:5000", "-interface", "eth0"}, "-unicast ADDR:PORT is required off loopback"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := MemberMain(context.Background(), tt.args, strings.NewReader(""), &out, &errOut)
			require.ErrorIs(t, err, ErrUsage)
			require.Contains(t, err.Error()+errOut.String(), tt.want)
			require.Empty(t, out.String())
		})
	}
}

// TestRunMemberTooLargeFailsAtOnce: a MsgSize above the engine's largest
// message is an error as soon as the member opens, not a wait for the
// Timeout (the sends would all fail with ErrTooLarge).
func TestRunMemberTooLargeFailsAtOnce(t *testing.T) {
	cfg := MemberConfig{RunID: 9, MsgSize: 2000, Count: 10, Timeout: 5 * time.Minute,
		Config: engine.Config{Group: RandomGroup(), Tuning: engine.TuningConfig{MaxMessage: 1000}}}
	start := time.Now()
	_, err := RunMember(context.Background(), cfg)
	require.ErrorContains(t, err, "MsgSize 2000: larger than the engine's largest message (Tuning.MaxMessage 1000)")
	require.Less(t, time.Since(start), time.Minute, "the error waited for the timeout")
}

// refDeliver is the handler's record of one delivery, written one message
// at a time: the model TestMemberHandlerBatchModel holds deliverRun to.
func refDeliver(st *recvState, every, seq uint64, p []byte) {
	r := &st.res
	if r.Delivered == 0 {
		r.FirstSeq = seq
		if len(p) >= MinMsgSize {
			r.FirstSendNs = int64(binary.LittleEndian.Uint64(p))
		}
	}
	if !st.follow(seq, seq) {
		r.OutOfOrder++
	}
	r.Delivered++
	r.LastSeq = seq
	if r.Delivered%timelineStep == 0 {
		st.progress.Store(r.Delivered)
	}
	st.bytes += int64(len(p))
	st.segment(seq, xxh3.Hash(p), len(p))
	if len(p) < MinMsgSize {
		r.OutOfOrder++
		return
	}
	idx := binary.LittleEndian.Uint64(p[8:])
	last := idx&lastFlag != 0
	idx &^= lastFlag
	if idx != st.nextIdx {
		r.OutOfOrder++
	}
	st.nextIdx = idx + 1
	if idx%every == 0 {
		_ = st.hist.RecordValue(histLowest)
	}
	if last {
		st.progress.Store(r.Delivered)
		st.complete.Store(true)
	}
}

// TestMemberHandlerBatchModel: random streams (gaps, repeats, lost
// ranges, short payloads, wrong payload indexes, runs across Segments
// blocks and timeline steps) delivered in random batches leave the record
// the one-message-at-a-time model leaves, for power-of-two and other
// sampling rates.
func TestMemberHandlerBatchModel(t *testing.T) {
	for _, every := range []int{1, 3, 16} {
		for seed := int64(1); seed <= 40; seed++ {
			rng := rand.New(rand.NewSource(seed))
			h := newMemberHandler(100, 1, every)
			st := &recvState{hist: NewHistogram(), nextIdx: 1}
			h.bySlot[0] = st
			h.pending.Store(1)
			ref := &recvState{hist: NewHistogram(), nextIdx: 1}
			sender := digest.Member{ID: 101, Inc: 1}
			seq := uint64(1)
			for step := 0; step < 60; step++ {
				switch rng.Intn(8) {
				case 0: // a gap no lost range covers
					seq += uint64(rng.Intn(40))
				case 1: // back over delivered seqnos
					seq -= min(seq-1, uint64(rng.Intn(30)))
				case 2: // a lost range
					to := seq + uint64(rng.Intn(20))
					h.Lost(sender, seq, to)
					ref.res.Lost = append(ref.res.Lost, digest.Range{From: seq, To: to})
					ref.res.LostMsgs += int64(to - seq + 1)
					if !ref.follow(seq, to) {
						ref.res.OutOfOrder++
					}
					ref.nextIdx = to + 1
					seq = to + 1
					continue
				}
				n := 1 + rng.Intn(1500)
				ps := make([][]byte, n)
				for i := range ps {
					p := make([]byte, MinMsgSize+rng.Intn(40))
					if rng.Intn(200) == 0 {
						p = p[:rng.Intn(MinMsgSize)]
					}
					if len(p) >= MinMsgSize {
						idx := seq + uint64(i)
						if rng.Intn(300) == 0 {
							idx += 7
						}
						binary.LittleEndian.PutUint64(p, uint64(Nanotime()))
						binary.LittleEndian.PutUint64(p[8:], idx)
					}
					rng.Read(p[min(len(p), MinMsgSize):])
					ps[i] = p
					refDeliver(ref, uint64(every), seq+uint64(i), p)
				}
				for first := 0; first < n; {
					k := min(n-first, 1+rng.Intn(300))
					h.DeliverBatch(sender, seq+uint64(first), ps[first:first+k])
					first += k
				}
				seq += uint64(n)
			}
			st.finish()
			ref.finish()
			st.res.LastDeliverNs = 0
			require.Equal(t, ref.res, st.res, "every %d seed %d", every, seed)
			require.Equal(t, ref.hash, st.hash)
			require.Equal(t, ref.bytes, st.bytes)
			require.Equal(t, ref.nextIdx, st.nextIdx)
			require.Equal(t, ref.progress.Load(), st.progress.Load())
			require.Equal(t, ref.hist.TotalCount(), st.hist.TotalCount())
		}
	}
}
