package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// testLog returns a log buffer over a pool of its own, sized for capacity
// messages in datagrams of datagram bytes.
func testLog(t testing.TB, capacity, inline, datagram int, exclusive bool) *logBuffer {
	t.Helper()
	return newLogBuffer(capacity, inline, datagram, bundleMessages, exclusive, wire.NewPool(datagram, 0), datagram, func() {})
}

// logReader takes messages out of a log buffer as the agent does (with
// SendBatch's copy), keeping copies of the payloads.
type logReader struct {
	q    *logBuffer
	pls  [][]byte
	ends []int
	got  [][]byte
	// terms counts the terms taken, sealed the terms taken sealed.
	terms int
}

func newLogReader(q *logBuffer) *logReader {
	return &logReader{q: q, pls: make([][]byte, q.perTerm), ends: make([]int, q.perTerm)}
}

// drain takes everything the agent may take now; it returns how many
// messages it took.
func (r *logReader) drain() int {
	q := r.q
	n := 0
	for {
		t, end, _, sealed, ok := q.headTerm()
		if !ok {
			return n
		}
		if sealed && q.curOff == end {
			q.recycle(t)
			r.terms++
			continue
		}
		k := q.fill(t, end, r.pls, r.ends)
		for _, p := range r.pls[:k] {
			r.got = append(r.got, bytes.Clone(p))
			q.release(p)
		}
		q.advanceCursor(r.ends, k)
		clear(r.pls[:k])
		n += k
	}
}

func pattern(n, seed int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(seed + i)
	}
	return p
}

// TestLogBufferEntries: what the agent takes is each payload, in order,
// written in place (up to the inline size) or out of line; an empty
// payload is a message; aborted claims (in place or out of line) are
// skipped; out-of-line buffers go back to their free lists and are
// reused.
func TestLogBufferEntries(t *testing.T) {
	q := testLog(t, 4096, 1024, 65507, false)
	r := newLogReader(q)
	sizes := []int{0, 64, 128, 129, 1024, 1025, 5000}
	for _, n := range sizes {
		require.True(t, q.put(pattern(n, n)))
	}
	for _, n := range []int{3000, 10} { // aborted: out of line, in place
		tm, off, idx, ok := q.claim(q.entrySize(n), 1)
		require.True(t, ok)
		q.abort(tm, idx, q.entrySize(n), q.place(tm, off, idx, n))
	}
	require.True(t, q.put(pattern(7, 7)))
	require.Equal(t, len(sizes)+1, r.drain())
	for i, n := range sizes {
		require.Equal(t, pattern(n, n), r.got[i], "size %d", n)
	}
	require.Equal(t, pattern(7, 7), r.got[len(sizes)])
	require.Zero(t, q.aborts.Load())
	require.Zero(t, q.bigOut.Load())
	require.False(t, q.pending())

	// The aborted claim's 4 KiB buffer went back to its class (as did the
	// 8 KiB one taken): the next claim of that class gets one of them.
	tm, off, idx, ok := q.claim(q.entrySize(2500), 1)
	require.True(t, ok)
	b := q.place(tm, off, idx, 2500)
	require.Len(t, b, 2500)
	require.Equal(t, 4096, cap(b))
	require.Equal(t, int64(1), q.bigOut.Load())
	q.commit(tm, idx, 1, q.entrySize(2500))
	require.Equal(t, 1, r.drain())
	require.Zero(t, q.bigOut.Load())
}

// TestLogBufferInPlace: a term's messages are in the wire's layout after
// the DATA header's room, as SendDatagram adopts them.
func TestLogBufferInPlace(t *testing.T) {
	q := testLog(t, 4096, 1024, 65507, false)
	ps := [][]byte{pattern(3, 1), pattern(0, 0), pattern(100, 2)}
	require.Equal(t, 3, q.putBatch(ps))
	tm, end, count, sealed, ok := q.headTerm() // the agent caught up: it seals
	require.True(t, ok)
	require.True(t, sealed)
	require.Equal(t, 3, count)
	require.Equal(t, 3*wire.MsgOverhead+103, end)
	var w wire.DataWriter
	h := wire.Header{Group: 1, Sender: testMembers(1)[0]}
	require.NoError(t, w.Reset(tm.buf.B[:q.termBytes+wire.DataOverhead], h, testMembers(1)[0], 1))
	require.NoError(t, w.Adopt(count, wire.DataOverhead+end, nil))
	d := w.Finish()
	hd, body, err := wire.DecodeHeader(d, 1)
	require.NoError(t, err)
	data, err := wire.DecodeData(hd, body)
	require.NoError(t, err)
	require.Equal(t, ps, data.AppendMessages(nil))
	// A message put now goes to the next term.
	require.True(t, q.put([]byte("next")))
	require.Equal(t, uint64(1), q.open.Load())
}

// TestLogBufferCommitOutOfOrder: in shared mode each message commits by
// its own flag, so a term whose later claim committed first is not taken
// until every earlier claim commits too, and a recycled term's flags do
// not count for its next round.
func TestLogBufferCommitOutOfOrder(t *testing.T) {
	q := testLog(t, 64, 64, 1400, false)
	r := newLogReader(q)
	claim := func(n int) (*logTerm, int) {
		tm, off, idx, ok := q.claim(q.entrySize(n), 1)
		require.True(t, ok)
		copy(q.place(tm, off, idx, n), pattern(n, idx))
		return tm, idx
	}
	for round := range q.nterms + 1 { // every term, and the first one again
		t1, i1 := claim(10)
		t2, i2 := claim(20)
		require.Same(t, t1, t2)
		q.commit(t2, i2, 1, q.entrySize(20))
		require.Zero(t, r.drain(), "round %d: the first claim is not committed", round)
		q.commit(t1, i1, 1, q.entrySize(10))
		require.Equal(t, 2, r.drain(), "round %d", round)
		require.Equal(t, [][]byte{pattern(10, 0), pattern(20, 1)}, r.got[len(r.got)-2:])
		require.Zero(t, r.drain())
	}
}

// TestLogBufferSealWrapBackPressure: a term is sealed when its message
// limit or its bytes are reached and the producer moves to the next; when
// every term is in flight a claim fails and hasRoom says so; the agent's
// taking a term frees it, and the ring of terms wraps lap after lap with
// every message in order.
func TestLogBufferSealWrapBackPressure(t *testing.T) {
	q := testLog(t, 16, 1024, 1472, false)
	require.Equal(t, 8, q.perTerm)
	require.Equal(t, uint64(2), q.nterms)
	r := newLogReader(q)
	seq := 0
	for lap := range 10 {
		for range 16 {
			require.True(t, q.hasRoom())
			var p [4]byte
			binary.LittleEndian.PutUint32(p[:], uint32(seq))
			require.True(t, q.put(p[:]), "lap %d message %d", lap, seq)
			seq++
		}
		require.False(t, q.put([]byte("x")), "lap %d: every term in flight", lap)
		require.False(t, q.hasRoom())
		require.Zero(t, q.putBatch([][]byte{{1}}))
		require.Equal(t, 16, r.drain())
		require.True(t, q.hasRoom())
	}
	for i, p := range r.got {
		require.Equal(t, uint32(i), binary.LittleEndian.Uint32(p))
	}
	require.Equal(t, 20, r.terms)

	// Bytes: 700-byte messages fill a 1472-byte datagram at two.
	q = testLog(t, 16, 1024, 1472, false)
	r = newLogReader(q)
	ps := [][]byte{pattern(700, 1), pattern(700, 2), pattern(700, 3), pattern(700, 4), pattern(700, 5)}
	require.Equal(t, 4, q.putBatch(ps), "two terms of two")
	require.Equal(t, 2, stateCount(q.terms[0].state.Load()))
	require.True(t, stateSealed(q.terms[0].state.Load()))
	require.Equal(t, 4, r.drain())
	require.Equal(t, 1, q.putBatch(ps[4:]))
	// Producers filled the terms before (streaming): the agent seals the
	// open term once it stopped growing between two looks.
	require.Zero(t, r.drain())
	require.Equal(t, 1, r.drain())
	require.True(t, q.put([]byte("x")))
	require.Equal(t, 1, r.drain(), "not streaming: sealed at once")
	r.got = r.got[:len(r.got)-1]
	require.Equal(t, ps, r.got)
}

// TestLogBufferExclusive: with one producer the agent does not seal the
// open term; it takes its committed prefix once the prefix stopped growing
// between two looks, and the rest once the producer seals the term.
func TestLogBufferExclusive(t *testing.T) {
	q := testLog(t, 16, 1024, 1472, true)
	r := newLogReader(q)
	require.True(t, q.put([]byte("a")))
	require.True(t, q.put([]byte("b")))
	require.Zero(t, r.drain(), "grew since the last look")
	require.Equal(t, 2, r.drain())
	require.False(t, stateSealed(q.terms[0].state.Load()))
	require.False(t, q.pending())
	for i := range 10 {
		require.True(t, q.put([]byte{byte(i)}))
	}
	require.Equal(t, 6, r.drain(), "the sealed term's rest")
	require.Equal(t, 4, r.drain(), "the open term's prefix, unchanged since")
	require.Len(t, r.got, 12)
	require.Equal(t, []byte{9}, r.got[11])
}

// TestLogBufferProducers: producers (TrySend, batches, claims with
// aborts) share a small log buffer that wraps many times while a consumer
// takes terms; every committed message arrives once, each producer's in
// its order. Bounded by counts: the consumer stops when it has them all.
func TestLogBufferProducers(t *testing.T) {
	for _, exclusive := range []bool{false, true} {
		name := "shared"
		if exclusive {
			name = "exclusive"
		}
		t.Run(name, func(t *testing.T) {
			const producers, each = 4, 3000
			q := testLog(t, 64, 256, 1024, exclusive)
			var mu sync.Mutex // exclusive: producers take turns
			var wg sync.WaitGroup
			for k := range producers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					lock := func() {
						if exclusive {
							mu.Lock()
						}
					}
					unlock := func() {
						if exclusive {
							mu.Unlock()
						}
					}
					msg := func(i int) []byte {
						p := make([]byte, 5+(i*7)%400) // some out of line
						p[0] = byte(k)
						binary.LittleEndian.PutUint32(p[1:], uint32(i))
						return p
					}
					aborted := false
					for i := 0; i < each; {
						lock()
						switch i % 3 {
						case 0:
							if q.put(msg(i)) {
								i++
							}
						case 1:
							i += q.putBatch([][]byte{msg(i), msg(i + 1)}[:min(2, each-i)])
						default:
							p := msg(i)
							need := q.entrySize(len(p))
							if tm, off, idx, ok := q.claim(need, 1); ok {
								b := q.place(tm, off, idx, len(p))
								copy(b, p)
								if i%2 == 0 && !aborted {
									// Aborted: the same index is sent again.
									q.abort(tm, idx, need, b)
									aborted = true
								} else {
									aborted = false
									q.commit(tm, idx, 1, need)
									i++
								}
							}
						}
						unlock()
						runtime.Gosched()
					}
				}()
			}
			r := newLogReader(q)
			next := make([]uint32, producers)
			for seen := 0; seen < producers*each; {
				n := r.drain()
				for _, p := range r.got[seen : seen+n] {
					k, i := p[0], binary.LittleEndian.Uint32(p[1:])
					require.Equal(t, next[k], i, "producer %d", k)
					require.Len(t, p, 5+(int(i)*7)%400)
					next[k]++
				}
				seen += n
				if n == 0 {
					runtime.Gosched()
				}
			}
			wg.Wait()
			require.Zero(t, r.drain())
			require.Zero(t, q.aborts.Load())
			require.Zero(t, q.bigOut.Load())
			require.Greater(t, r.terms, 4*int(q.nterms), "wrapped")
		})
	}
}

// TestLogBufferNoAllocs: put, putBatch, claim and commit, and the agent's
// taking allocate nothing once the out-of-line free lists are warm.
func TestLogBufferNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	q := testLog(t, 64, 256, 1472, false)
	r := newLogReader(q)
	pls, ends := make([][]byte, q.perTerm), make([]int, q.perTerm)
	take := func() {
		for {
			tm, end, _, sealed, ok := q.headTerm()
			if !ok {
				return
			}
			if sealed && q.curOff == end {
				q.recycle(tm)
				continue
			}
			k := q.fill(tm, end, pls, ends)
			for _, p := range pls[:k] {
				q.release(p)
			}
			q.advanceCursor(ends, k)
		}
	}
	small, big := make([]byte, 64), make([]byte, 1000)
	ps := [][]byte{small, small, big, small}
	run := func() {
		require.True(t, q.put(small))
		require.True(t, q.put(big))
		require.Equal(t, 4, q.putBatch(ps))
		tm, off, idx, ok := q.claim(q.entrySize(64), 1)
		require.True(t, ok)
		q.place(tm, off, idx, 64)
		q.commit(tm, idx, 1, q.entrySize(64))
		take()
	}
	run()
	_ = r
	require.Zero(t, testing.AllocsPerRun(100, run))
}

// TestSendInPlace: terms the producers filled while the agent was held
// off go out as they were written (SentInPlace: nakack SendDatagram, no
// copy), and both members deliver every message in order: the receiver
// from the datagrams, the sender itself from the retained terms (unless
// DiscardOwn). Shared and exclusive producers, TrySend, SendBatch and
// TryClaim.
func TestSendInPlace(t *testing.T) {
	for _, tc := range []struct {
		name               string
		exclusive, discard bool
	}{{"shared", false, false}, {"exclusive", true, false}, {"discardown", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 4000
			rec, own := newRecorder(n), newRecorder(n)
			ms := openGroup(t, 2, func(i int, c *Config) {
				c.Agent.ExclusiveSender = tc.exclusive
				c.DiscardOwn = tc.discard
				c.Handler = []*recorder{own, rec}[i]
			})
			s := ms[0]
			gen := func(i int) []byte { return payloadOf(0, i, 32+i%64) }
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for i := 0; i < n; {
				s.mu.Lock() // the agent waits: the terms fill
				for end := min(n, i+1500); i < end; {
					switch i % 3 {
					case 0:
						if s.TrySend(gen(i)) != nil {
							end = i
							continue
						}
						i++
					case 1:
						k, _ := s.TrySendBatch([][]byte{gen(i), gen(i + 1)}[:min(2, n-i)])
						if k == 0 {
							end = i
						}
						i += k
					default:
						c, err := s.TryClaim(len(gen(i)))
						if err != nil {
							end = i
							continue
						}
						copy(c.Buf, gen(i))
						c.Commit()
						i++
					}
				}
				s.mu.Unlock()
				if i < n {
					require.NoError(t, s.Send(ctx, gen(i)))
					i++
				}
			}
			want := expectedHash(n, gen)
			recs := []*recorder{rec}
			if !tc.discard {
				recs = append(recs, own)
			}
			requireHash(ctx, t, recs, s.Self(), want)
			require.GreaterOrEqual(t, s.Stats().SentInPlace, uint64(2))
		})
	}
}

// BenchmarkLogBufferPut: one producer's in-place puts of 64 B messages,
// the agent's take of each sealed term (without the protocol) on the same
// goroutine: the publication's own cost a message, claim and commit
// included, in the shared mode and with ExclusiveSender. The same run
// then times the raw limit, b.N length prefixes and copies into a
// datagram-sized buffer reused at once, and reports the ratio.
func BenchmarkLogBufferPut(b *testing.B) {
	for _, exclusive := range []bool{false, true} {
		name := "shared"
		if exclusive {
			name = "exclusive"
		}
		b.Run(name, func(b *testing.B) {
			q := testLog(b, DefaultRingCapacity, DefaultInlineSize, 1<<16-1, exclusive)
			p := make([]byte, 64)
			take := func() {
				for {
					t, end, _, sealed, ok := q.headTerm()
					if !ok {
						return
					}
					q.curOff = end
					if sealed {
						q.recycle(t)
					}
				}
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				if q.putInline(p) {
					continue
				}
				for !q.put(p) { // seals the full term, or finds none free
					take()
				}
			}
			perPut := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			raw := rawPuts(b.N, p, q.termBytes)
			b.ReportMetric(raw, "raw-ns/put")
			b.ReportMetric(perPut/raw, "put/raw")
		})
	}
}

// rawPuts times n writes of p in the wire's per-message layout into a
// buffer of size bytes, started again when full (the publication's raw
// limit: no claim, no commit, no agent), and returns ns a write.
func rawPuts(n int, p []byte, size int) float64 {
	buf := make([]byte, size)
	off := 0
	start := time.Now()
	for range n {
		if off+wire.MsgOverhead+len(p) > len(buf) {
			off = 0
		}
		binary.LittleEndian.PutUint16(buf[off:], uint16(len(p)))
		off += wire.MsgOverhead + copy(buf[off+wire.MsgOverhead:], p)
	}
	return float64(time.Since(start).Nanoseconds()) / float64(max(n, 1))
}
