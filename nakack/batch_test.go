package nakack

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// batchRecorder is a BatchHandler recording like recorder, plus how many
// DeliverBatch calls it got.
type batchRecorder struct {
	recorder
	batches int
}

func (r *batchRecorder) DeliverBatch(s digest.Member, first uint64, ps [][]byte) {
	r.batches++
	for i, p := range ps {
		r.Deliver(s, first+uint64(i), p)
	}
}

// TestBatchHandlerSameDeliveries: a BatchHandler sees exactly what a plain
// Handler sees (whole messages in batches, fragmented ones through Deliver,
// lost runs through Lost), in order, whatever the Poll limit.
func TestBatchHandlerSameDeliveries(t *testing.T) {
	for _, limit := range []int{1, 3, 7, 1 << 30} {
		t.Run(itoa(limit), func(t *testing.T) {
			var got [2]recorder
			var batches int
			for i, batch := range []bool{false, true} {
				c := newCluster(t, nil, mA, mB)
				big := string(make([]byte, 3000)) // fragmented
				ps := append(payloads("a", 1, 20), big)
				ps = append(ps, payloads("a", 22, 40)...)
				c.deliver(c.send(mA, false, ps...), nil)
				b := c.p(mB)
				br := &batchRecorder{}
				for {
					var n int
					if batch {
						n = b.Poll(br, limit)
					} else {
						n = b.Poll(&got[i], limit)
					}
					if n == 0 {
						break
					}
				}
				if batch {
					got[i] = br.recorder
					batches = br.batches
				}
			}
			require.Equal(t, got[0], got[1])
			require.NotEmpty(t, got[1].dels)
			require.Positive(t, batches)
		})
	}
}

// TestSendPublishesOnPoll: an own message in the open bundle is delivered
// to self by Poll before any Flush, and every datagram buffer goes back to
// the pool once stability purges (one reference per datagram, not per
// message).
func TestSendPublishesOnPoll(t *testing.T) {
	c := newCluster(t, nil, mA, mB)
	a := c.p(mA)
	for _, s := range payloads("a", 1, 3) {
		_, err := a.Send([]byte(s), c.now)
		require.NoError(t, err)
	}
	a.Poll(c.rec(mA), 1<<30)
	require.Equal(t, span(1, 3), c.rec(mA).seqs(mA))
	require.Empty(t, a.Outbox(), "still open")
	_, err := a.Send([]byte("a4"), c.now)
	require.NoError(t, err)
	a.Flush(c.now)
	ds := c.take()
	require.Len(t, ds, 1, "one bundle")
	c.deliver(ds, nil)
	c.poll()
	require.Equal(t, span(1, 4), c.rec(mA).seqs(mA))
	require.Equal(t, span(1, 4), c.rec(mB).seqs(mA))
	require.Equal(t, int64(1), c.pool.Stats().OutstandingBuffers, "A's bundle, held by its own window (B's copy is not pooled)")
	for _, m := range c.order {
		c.p(m).sendStable(c.now)
	}
	c.run(c.now+1, nil)
	require.Zero(t, c.pool.Stats().OutstandingBuffers, "purged: every datagram released")
}

func TestAllocsReceiveDeliverBatch(t *testing.T) {
	f := newFixture(t, nil)
	var h batchNop
	next := uint64(1)
	require.Zero(t, allocs(t, func() {
		f.recv(f.data(next, benchMsgs, 0))
		next += benchMsgs
		f.a.Poll(&h, 1<<20)
		f.purge()
	}))
	require.Equal(t, int(next-1), h.n)
}

// batchNop is a BatchHandler counting messages.
type batchNop struct{ nopHandler }

func (h *batchNop) DeliverBatch(_ digest.Member, _ uint64, ps [][]byte) { h.n += len(ps) }

// BenchmarkReceiveDeliverInOrderBatch is BenchmarkReceiveDeliverInOrder
// with a BatchHandler.
func BenchmarkReceiveDeliverInOrderBatch(b *testing.B) {
	f := newFixture(b, nil)
	var h batchNop
	next := uint64(1)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		f.recv(f.data(next, benchMsgs, 0))
		next += benchMsgs
		f.a.Poll(&h, 1<<20)
		f.purge()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchMsgs), "ns/msg")
}

// BenchmarkReceiveDeliverPrebuilt is the in-order receive+deliver+purge
// path alone: the datagrams are built before the timer starts (the other
// receive benchmarks also count building each bundle), BatchHandler.
func BenchmarkReceiveDeliverPrebuilt(b *testing.B) {
	f := newFixture(b, nil)
	var h batchNop
	const ring = 32
	var dgs [ring]*wire.Buffer
	for i := range dgs {
		dgs[i] = f.data(uint64(i*benchMsgs+1), benchMsgs, 0)
	}
	next := uint64(1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		d := dgs[i%ring]
		// Rewrite the bundle's first seqno in place (wire layout: the Data
		// fixed part follows the common header; see wire.DataWriter).
		setFirst(d, next)
		if err := f.a.Receive(d, f.now); err != nil {
			panic(err)
		}
		next += benchMsgs
		f.a.Poll(&h, 1<<20)
		f.purge()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchMsgs), "ns/msg")
}

// setFirst rewrites a 1.0 DATA datagram's first seqno (the first field of
// the fixed part after the common header).
func setFirst(d *wire.Buffer, first uint64) {
	binary.LittleEndian.PutUint64(d.B[wire.HeaderLen:], first)
}

// TestPurgeOwnOpenBundle: in a one-member view stability purges own
// messages still in the open bundle (published to the window by Poll); the
// bundle keeps its reference bookkeeping, later messages of the same bundle
// are retained afresh, and every buffer returns to the pool in the end.
func TestPurgeOwnOpenBundle(t *testing.T) {
	c := newCluster(t, nil, mA)
	a := c.p(mA)
	send := func(ps ...string) {
		for _, s := range ps {
			_, err := a.Send([]byte(s), c.now)
			require.NoError(t, err)
		}
	}
	send(payloads("a", 1, 3)...)
	a.Poll(c.rec(mA), 1<<30)
	a.sendStable(c.now) // coordinator of itself: folds, purges 1..3
	e, _ := a.WindowState(mA)
	require.Equal(t, uint64(3), e.Low)
	require.Empty(t, a.Outbox(), "bundle still open")
	send(payloads("a", 4, 6)...)
	a.Poll(c.rec(mA), 1<<30)
	a.Flush(c.now)
	c.take()
	require.Equal(t, span(1, 6), c.rec(mA).seqs(mA))
	require.Equal(t, int64(1), c.pool.Stats().OutstandingBuffers, "4..6 retained")
	a.sendStable(c.now)
	require.Zero(t, c.pool.Stats().OutstandingBuffers)
	send("a7")
	a.Flush(c.now)
	c.take()
	a.Poll(c.rec(mA), 1<<30)
	a.sendStable(c.now)
	require.Zero(t, c.pool.Stats().OutstandingBuffers)
}

// appender appends to every payload it is handed, as a careless handler
// might, and records what it saw.
type appender struct {
	got [][]byte
}

func (h *appender) Deliver(_ digest.Member, _ uint64, p []byte) {
	h.got = append(h.got, append([]byte(nil), p...))
	_ = append(p, 0xEE, 0xEE, 0xEE, 0xEE) // must not reach the next message
}
func (h *appender) Lost(digest.Member, uint64, uint64) {}

type batchAppender struct{ appender }

func (h *batchAppender) DeliverBatch(s digest.Member, first uint64, ps [][]byte) {
	for i, p := range ps {
		h.Deliver(s, first+uint64(i), p)
	}
}

// TestPayloadCapped: the payloads handed to a Handler or a BatchHandler end
// at their message (cap == len), so a handler that appends to one gets a
// copy instead of overwriting the next message of the retained datagram.
func TestPayloadCapped(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprint("batch=", batch), func(t *testing.T) {
			f := newFixture(t, nil)
			for i := range f.msg {
				f.msg[i] = byte(i)
			}
			f.recv(f.data(1, 4, 0))
			var h Handler
			a := &batchAppender{}
			h = &a.appender
			if batch {
				h = a
			}
			require.Equal(t, 4, f.a.Poll(h, 100))
			require.Len(t, a.got, 4)
			for i, p := range a.got {
				require.Equal(t, f.msg, p, "message %d", i+1)
			}
		})
	}
}
