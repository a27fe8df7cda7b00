package nakack

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

// sentDatagram is one outbox entry, copied.
type sentDatagram struct {
	to   digest.Member
	data string
}

// takeOutbox copies and releases p's outbox.
func takeOutbox(p *Protocol) []sentDatagram {
	var out []sentDatagram
	for _, o := range p.Outbox() {
		out = append(out, sentDatagram{o.To, string(o.Buf.Bytes())})
		o.Buf.Release()
	}
	p.ClearOutbox()
	return out
}

// sendBatchPayloads returns n payloads with sizes drawn from sizes.
func sendBatchPayloads(rng *rand.Rand, n int, sizes []int) [][]byte {
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = make([]byte, sizes[rng.IntN(len(sizes))])
		for j := range ps[i] {
			ps[i][j] = byte(rng.Uint32())
		}
	}
	return ps
}

// TestSendBatchEqualsSend: SendBatch in runs of any length gives the same
// seqnos, datagrams, self-deliveries, counters and back-pressure as Send
// one message at a time: bundles full by count and by bytes, fragments in
// the middle of a run, the own window filling up.
func TestSendBatchEqualsSend(t *testing.T) {
	tests := []struct {
		name      string
		maxBundle int
		sizes     []int
		msgs      int
		runs      []int
	}{
		{"small by count", 8, []int{0, 1, 16, 64}, 300, []int{1, 3, 8, 17, 64}},
		{"by bytes", 1024, []int{64, 200, 500, 1300}, 300, []int{2, 5, 33, 100}},
		{"fragments", 1024, []int{10, 900, 3000, 5000}, 200, []int{1, 4, 9, 50}},
		{"window full", 16, []int{32, 100}, 700, []int{7, 64, 600}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			newP := func() *Protocol {
				cfg := testConfig(mB)
				cfg.Pool = wire.NewPool(1400, 0)
				cfg.MaxBundle = tc.maxBundle
				p, err := New(cfg)
				require.NoError(t, err)
				p.InstallView(View{ID: digest.ViewID{Coord: mB, Counter: 1}, Members: []digest.Member{mB, mA}}, digest.Digest{}, 0)
				takeOutbox(p)
				return p
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(tc.name))))
			ps := sendBatchPayloads(rng, tc.msgs, tc.sizes)
			one, many := newP(), newP()

			// Reference: Send one at a time, stopping at back-pressure.
			var wantSeqs []uint64
			for _, pl := range ps {
				seq, err := one.Send(pl, 0)
				if err != nil {
					require.ErrorIs(t, err, ErrBackPressure)
					break
				}
				wantSeqs = append(wantSeqs, seq)
			}
			one.Flush(0)

			var gotSeqs []uint64
			rest := ps
			var batchErr error
			for i := 0; len(rest) > 0; i++ {
				run := rest[:min(len(rest), tc.runs[i%len(tc.runs)])]
				before := many.NextSeq()
				first, n, err := many.SendBatch(run, 0)
				if err != nil {
					require.Zero(t, n)
					require.Equal(t, before, many.NextSeq(), "nothing claimed on error")
					batchErr = err
					break
				}
				require.Positive(t, n)
				require.Equal(t, before, first)
				if n == 1 && len(run[0]) > many.maxMsg {
					gotSeqs = append(gotSeqs, first)
				} else {
					require.Equal(t, first+uint64(n), many.NextSeq())
					for j := range n {
						gotSeqs = append(gotSeqs, first+uint64(j))
					}
				}
				rest = rest[n:]
			}
			many.Flush(0)
			if len(wantSeqs) < len(ps) {
				require.ErrorIs(t, batchErr, ErrBackPressure)
			}
			require.Equal(t, wantSeqs, gotSeqs)
			require.Equal(t, one.NextSeq(), many.NextSeq())
			require.Equal(t, takeOutbox(one), takeOutbox(many))
			var r1, r2 recorder
			one.Poll(&r1, 1<<20)
			many.Poll(&r2, 1<<20)
			require.Equal(t, r1.dels, r2.dels)
			require.Len(t, r1.dels, len(wantSeqs))
			s1, s2 := one.Stats(), many.Stats()
			require.Equal(t, s1.Sent, s2.Sent)
			require.Equal(t, s1.Bundles, s2.Bundles)
		})
	}
}

// TestSendBatchErrors: an empty run claims nothing; a first payload above
// MaxMessage is refused; a run stops before a refused payload.
func TestSendBatchErrors(t *testing.T) {
	p := viewedSender(t, func(cfg *Config) {
		cfg.Pool = wire.NewPool(1400, 0)
		cfg.MaxMessage = 2000
	})

	first, n, err := p.SendBatch(nil, 0)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, uint64(1), first)

	_, n, err = p.SendBatch([][]byte{make([]byte, 2001), {1}}, 0)
	require.ErrorIs(t, err, ErrTooLarge)
	require.Zero(t, n)

	first, n, err = p.SendBatch([][]byte{{1}, {2}, make([]byte, 2001), {3}}, 0)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, uint64(1), first)
	require.Equal(t, uint64(3), p.NextSeq())
}

func TestAllocsSendBatch(t *testing.T) {
	f, b := senderFixture(t, 0, 0)
	run := make([][]byte, benchMsgs)
	for i := range run {
		run[i] = f.msg
	}
	require.Zero(t, allocs(t, func() {
		if _, n, err := b.SendBatch(run, f.now); err != nil || n != len(run) {
			panic(fmt.Sprint(n, err))
		}
		f.settleSender(b)
	}))
}

func BenchmarkSendBatch(b *testing.B) {
	f, s := senderFixture(b, 0, 0)
	run := make([][]byte, benchMsgs)
	for i := range run {
		run[i] = f.msg
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		_, _, _ = s.SendBatch(run, f.now)
		f.settleSender(s)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchMsgs), "ns/msg")
}

// TestSendBatchStreamingOpensFullBundles: a short run opens its bundle in
// a buffer of its size class; once SendBatch has emitted a bundle because
// it was full (a stream), the next opens at MaxDatagram so that the
// following runs do not outgrow it (growBundle's copy); an idle Flush ends
// the stream.
func TestSendBatchStreamingOpensFullBundles(t *testing.T) {
	const maxDatagram = 8192
	p := viewedSender(t, func(cfg *Config) {
		cfg.Pool = wire.NewPool(maxDatagram, 0)
		cfg.MaxDatagram = maxDatagram
	})
	takeOutbox(p)
	run := make([][]byte, 8)
	for i := range run {
		run[i] = make([]byte, 64)
	}
	_, _, err := p.SendBatch(run, 0)
	require.NoError(t, err)
	require.Less(t, len(p.bundle.B), maxDatagram, "a short run: a small bundle")
	for len(p.Outbox()) == 0 { // until a bundle went out full
		_, _, err = p.SendBatch(run, 0)
		require.NoError(t, err)
	}
	takeOutbox(p)
	if p.bundle == nil {
		_, _, err = p.SendBatch(run, 0)
		require.NoError(t, err)
	}
	require.GreaterOrEqual(t, len(p.bundle.B), maxDatagram, "streaming: a full-size bundle")
	p.Flush(0)
	takeOutbox(p)
	_, _, err = p.SendBatch(run, 0)
	require.NoError(t, err)
	require.Less(t, len(p.bundle.B), maxDatagram, "after an idle flush: small again")
}

// viewedSender returns B's protocol (testConfig, changed by tweak) in a
// view of B and A.
func viewedSender(t *testing.T, tweak func(*Config)) *Protocol {
	t.Helper()
	cfg := testConfig(mB)
	tweak(&cfg)
	p, err := New(cfg)
	require.NoError(t, err)
	p.InstallView(View{ID: digest.ViewID{Coord: mB, Counter: 1}, Members: []digest.Member{mB, mA}}, digest.Digest{}, 0)
	return p
}
