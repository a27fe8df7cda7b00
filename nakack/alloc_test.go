package nakack

import (
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// Zero allocations on the hot paths, proven with testing.AllocsPerRun, and
// the benchmarks of issue 3 (ns/msg reported, -benchmem 0 allocs/op).

type nopHandler struct{ n, lost int }

func (h *nopHandler) Deliver(digest.Member, uint64, []byte) { h.n++ }
func (h *nopHandler) Lost(digest.Member, uint64, uint64)    { h.lost++ }

const (
	benchMsgs = 64
	benchSize = 64
)

// fixture is one receiver A in view {B, A} (B coordinator) fed with
// hand-built datagrams from B.
type fixture struct {
	tb   testing.TB
	pool *wire.Pool
	a    *Protocol
	h    nopHandler
	now  time.Duration
	msg  []byte
	view View
}

func newFixture(tb testing.TB, tweak func(*Config)) *fixture {
	f := &fixture{tb: tb, pool: wire.NewPool(8192, 0), msg: make([]byte, benchSize)}
	cfg := testConfig(mA)
	cfg.Pool = f.pool
	cfg.MaxDatagram = 8192
	cfg.SendWindow, cfg.RecvWindow = 4096, 4096
	cfg.NakMaxInterval = cfg.NakInterval
	cfg.Logger = nil
	if tweak != nil {
		tweak(&cfg)
	}
	a, err := New(cfg)
	require.NoError(tb, err)
	f.a = a
	f.view = View{ID: digest.ViewID{Coord: mB, Counter: 1}, Members: []digest.Member{mB, mA}}
	a.InstallView(f.view, digest.Digest{}, 0)
	return f
}

// data returns a pooled bundle of B's seqnos first..first+n-1.
func (f *fixture) data(first uint64, n int, flags uint8) *wire.Buffer {
	b := f.pool.Get(8192)
	var w wire.DataWriter
	if err := w.Reset(b.B, wire.Header{Group: testGroup, Sender: mB, Flags: flags}, mB, first); err != nil {
		panic(err)
	}
	for range n {
		w.Append(f.msg)
	}
	b.N = len(w.Finish())
	return b
}

func (f *fixture) recv(b *wire.Buffer) {
	if err := f.a.Receive(b, f.now); err != nil {
		panic(err)
	}
	b.Release()
}

// drainOut releases everything in A's outbox.
// stableFromB hands A a STABLE from B that reports B's messages none
// and A's delivered up to delivered (es is the caller's scratch, so
// nothing is allocated), then drains A's outbox.
func (f *fixture) stableFromB(es *[2]digest.Entry, delivered uint64) {
	es[0] = digest.Entry{Member: mA}
	es[1] = digest.Entry{Member: mB, Delivered: delivered}
	b := f.pool.Get(1024)
	d, err := wire.EncodeStable(b.B, wire.Header{Group: testGroup, Sender: mB}, f.view.ID, wire.EntrySlice(es[:]))
	if err != nil {
		panic(err)
	}
	b.N = len(d)
	f.recv(b)
	f.drainOut()
}

// echoChallenges answers, as B, every CHALLENGE in A's outbox (the sender
// confirming its MSG_NOT_FOUND), then drains A's outbox.
func (f *fixture) echoChallenges() {
	var echoes [4]*wire.Buffer
	n := 0
	for _, o := range f.a.Outbox() {
		h, body, err := wire.DecodeHeader(o.Buf.Bytes(), testGroup)
		if err != nil || h.Type != wire.TypeChallenge || n == len(echoes) {
			continue
		}
		c, err := wire.DecodeChallenge(h, body)
		if err != nil {
			panic(err)
		}
		b := f.pool.Get(1024)
		d, err := wire.EncodeChallenge(b.B, wire.Header{Group: testGroup, Sender: mB}, wire.TypeEcho, c.View, c.Target, c.Nonce, c.Kind, c.Ranges)
		if err != nil {
			panic(err)
		}
		b.N = len(d)
		echoes[n] = b
		n++
	}
	f.drainOut()
	for _, b := range echoes[:n] {
		f.recv(b)
	}
}

func (f *fixture) drainOut() {
	for _, o := range f.a.Outbox() {
		o.Buf.Release()
	}
	f.a.ClearOutbox()
}

func (f *fixture) purge() {
	e, _ := f.a.WindowState(mB)
	if _, err := f.a.ForcePurge(mB, e.Delivered); err != nil {
		panic(err)
	}
}

func allocs(t *testing.T, f func()) float64 {
	t.Helper()
	for range 100 { // warm up pools, slices and free lists
		f()
	}
	return testing.AllocsPerRun(200, f)
}

func TestAllocsReceiveInOrderAndDeliver(t *testing.T) {
	f := newFixture(t, nil)
	next := uint64(1)
	require.Zero(t, allocs(t, func() {
		f.recv(f.data(next, benchMsgs, 0))
		next += benchMsgs
		f.a.Poll(&f.h, 1<<20)
		f.purge()
	}))
	require.Equal(t, int(next-1), f.h.n)
}

func TestAllocsReceiveWithGap(t *testing.T) {
	f := newFixture(t, nil)
	next := uint64(1)
	require.Zero(t, allocs(t, func() {
		// A bundle, then one beyond a gap, then the gap filled as a repair.
		f.recv(f.data(next+benchMsgs, benchMsgs, 0))
		f.now += time.Millisecond
		f.recv(f.data(next, benchMsgs, wire.FlagRepair))
		next += 2 * benchMsgs
		f.a.Poll(&f.h, 1<<20)
		f.purge()
	}))
	require.Equal(t, int(next-1), f.h.n)
}

func TestAllocsRequestGeneration(t *testing.T) {
	f := newFixture(t, nil)
	// Every other seqno of 1..2000 missing: 1,000 gaps.
	for s := uint64(2); s <= 2000; s += 2 {
		f.recv(f.data(s, 1, 0))
	}
	require.Zero(t, allocs(t, func() {
		f.now = f.a.NextDeadline()
		f.a.Tick(f.now)
		f.drainOut()
	}))
	require.NotZero(t, f.a.Stats().NakSent)
}

// senderFixture is B holding 1..n of its own, purged to low.
// settleSender flushes b's open bundle, discards its outbox, delivers to
// self and purges what was delivered: the steady state the send tests and
// benchmarks return to after every run.
func (f *fixture) settleSender(b *Protocol) {
	b.Flush(f.now)
	for _, o := range b.Outbox() {
		o.Buf.Release()
	}
	b.ClearOutbox()
	b.Poll(&f.h, 1<<20)
	e, _ := b.WindowState(mB)
	b.ForcePurge(mB, e.Delivered)
}

func senderFixture(t testing.TB, n int, low uint64) (*fixture, *Protocol) {
	f := newFixture(t, nil)
	cfg := testConfig(mB)
	cfg.Pool = f.pool
	cfg.MaxDatagram = 8192
	cfg.SendWindow, cfg.RecvWindow = 4096, 4096
	cfg.RepairLinger = -1
	cfg.RepairBudget = 1 << 30
	b, err := New(cfg)
	require.NoError(t, err)
	b.InstallView(f.view, digest.Digest{}, 0)
	for range n {
		_, err := b.Send(f.msg, 0)
		require.NoError(t, err)
	}
	b.Flush(0)
	b.Poll(&f.h, 1<<20)
	_, err = b.ForcePurge(mB, low)
	require.NoError(t, err)
	for _, o := range b.Outbox() {
		o.Buf.Release()
	}
	b.ClearOutbox()
	return f, b
}

func xmitReq(f *fixture, ranges []wire.Range) *wire.Buffer {
	b := f.pool.Get(1024)
	d, err := wire.EncodeXmitReq(b.B, wire.Header{Group: testGroup, Sender: mA}, f.view.ID, mB, 0, ranges)
	if err != nil {
		panic(err)
	}
	b.N = len(d)
	return b
}

func TestAllocsRequestHandling(t *testing.T) {
	f, b := senderFixture(t, 1000, 100)
	ranges := []wire.Range{rg(50, 60), rg(200, 263), rg(500, 500)}
	require.Zero(t, allocs(t, func() {
		req := xmitReq(f, ranges)
		if err := b.Receive(req, f.now); err != nil {
			panic(err)
		}
		req.Release()
		for _, o := range b.Outbox() {
			o.Buf.Release()
		}
		b.ClearOutbox()
		f.now += time.Millisecond
	}))
	st := b.Stats()
	require.NotZero(t, st.MsgNotFoundSent)
	require.NotZero(t, st.Retransmitted)
}

func TestAllocsMsgNotFoundHandling(t *testing.T) {
	f := newFixture(t, nil)
	base := uint64(0)
	mnf := func(low, highest uint64) *wire.Buffer {
		b := f.pool.Get(1024)
		d, err := wire.EncodeMsgNotFound(b.B, wire.Header{Group: testGroup, Sender: mB}, f.view.ID, mA,
			rg(base+1, low), low, highest, wire.EntrySlice(nil))
		if err != nil {
			panic(err)
		}
		b.N = len(d)
		return b
	}
	require.Zero(t, allocs(t, func() {
		// 1..50 missing, 51..100 held; B purged 1..50.
		f.recv(f.data(base+51, 50, 0))
		f.recv(mnf(base+50, base+100))
		f.echoChallenges()             // B confirms: A marks 1..50 lost
		f.recv(mnf(base+50, base+100)) // the repeat moves nothing
		f.a.Poll(&f.h, 1<<20)
		f.purge()
		base += 100
	}))
	require.Equal(t, int(base/2), f.h.n)
	require.Equal(t, int(base/100), f.h.lost)
}

func TestAllocsStabilityPurge(t *testing.T) {
	f := newFixture(t, nil)
	next := uint64(1)
	var es [2]digest.Entry
	require.Zero(t, allocs(t, func() {
		f.recv(f.data(next, benchMsgs, 0))
		next += benchMsgs
		f.a.Poll(&f.h, 1<<20)
		es[0] = digest.Entry{Member: mB, Low: next - 1, Delivered: next - 1, Received: next - 1}
		b := f.pool.Get(1024)
		d, err := wire.EncodeStability(b.B, wire.Header{Group: testGroup, Sender: mB}, f.view.ID, wire.EntrySlice(es[:1]))
		if err != nil {
			panic(err)
		}
		b.N = len(d)
		f.recv(b)
	}))
	e, _ := f.a.WindowState(mB)
	require.Equal(t, next-1, e.Low)
}

func TestAllocsCoordinatorRound(t *testing.T) {
	f := newFixture(t, nil)
	// A is coordinator of {A, B}: B's STABLE completes each round.
	f.view = View{ID: digest.ViewID{Coord: mA, Counter: 2}, Members: []digest.Member{mA, mB}}
	f.a.InstallView(f.view, digest.Digest{}, 0)
	next := uint64(1)
	var es [2]digest.Entry
	require.Zero(t, allocs(t, func() {
		f.recv(f.data(next, benchMsgs, 0))
		next += benchMsgs
		f.a.Poll(&f.h, 1<<20)
		f.a.sendStable(f.now)
		f.stableFromB(&es, next-1)
	}))
	e, _ := f.a.WindowState(mB)
	require.Equal(t, next-1, e.Low)
}

func TestAllocsSend(t *testing.T) {
	f, b := senderFixture(t, 0, 0)
	require.Zero(t, allocs(t, func() {
		for range benchMsgs {
			if _, err := b.Send(f.msg, f.now); err != nil {
				panic(err)
			}
		}
		f.settleSender(b)
	}))
}

// Benchmarks.

func BenchmarkReceiveDeliverInOrder(b *testing.B) {
	f := newFixture(b, nil)
	next := uint64(1)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		f.recv(f.data(next, benchMsgs, 0))
		next += benchMsgs
		f.a.Poll(&f.h, 1<<20)
		f.purge()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchMsgs), "ns/msg")
}

// BenchmarkReceiveDeliverLoss1pct: 1% of the messages arrive only as a
// repair one bundle later (a gap detected and filled every ~1.5 bundles).
func BenchmarkReceiveDeliverLoss1pct(b *testing.B) {
	f := newFixture(b, nil)
	next := uint64(1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%3 == 0 { // 1 lost message in 3 bundles of 64: 0.5%; two: 1%
			f.recv(f.data(next, 10, 0))
			f.recv(f.data(next+11, 20, 0))
			f.recv(f.data(next+32, benchMsgs-32, 0))
			f.recv(f.data(next+10, 1, wire.FlagRepair))
			f.recv(f.data(next+31, 1, wire.FlagRepair))
		} else {
			f.recv(f.data(next, benchMsgs, 0))
		}
		next += benchMsgs
		f.now += time.Microsecond
		f.a.Poll(&f.h, 1<<20)
		f.purge()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchMsgs), "ns/msg")
}

func BenchmarkRequestGeneration1000Gaps(b *testing.B) {
	f := newFixture(b, nil)
	for s := uint64(2); s <= 2000; s += 2 {
		f.recv(f.data(s, 1, 0))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		f.now = f.a.NextDeadline()
		f.a.Tick(f.now)
		f.drainOut()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/gap")
}

func BenchmarkRequestHandling(b *testing.B) {
	f, s := senderFixture(b, 1000, 100)
	ranges := []wire.Range{rg(200, 263)}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		req := xmitReq(f, ranges)
		_ = s.Receive(req, f.now)
		req.Release()
		for _, o := range s.Outbox() {
			o.Buf.Release()
		}
		s.ClearOutbox()
		f.now += time.Millisecond
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/msg")
}

func BenchmarkStabilityPurge(b *testing.B) {
	f := newFixture(b, nil)
	next := uint64(1)
	var es [1]digest.Entry
	var purge time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		f.recv(f.data(next, benchMsgs, 0))
		next += benchMsgs
		f.a.Poll(&f.h, 1<<20)
		es[0] = digest.Entry{Member: mB, Low: next - 1, Delivered: next - 1, Received: next - 1}
		buf := f.pool.Get(1024)
		d, _ := wire.EncodeStability(buf.B, wire.Header{Group: testGroup, Sender: mB}, f.view.ID, wire.EntrySlice(es[:]))
		buf.N = len(d)
		b.StartTimer()
		f.recv(buf)
	}
	_ = purge
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchMsgs), "ns/msg")
}

func BenchmarkSend(b *testing.B) {
	f, s := senderFixture(b, 0, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for range benchMsgs {
			_, _ = s.Send(f.msg, f.now)
		}
		f.settleSender(s)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchMsgs), "ns/msg")
}
