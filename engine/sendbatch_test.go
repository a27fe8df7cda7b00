package engine

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nakcast/nakcast/engine/transport/memtransport"
	"github.com/stretchr/testify/require"
)

// TestSendBatch: batches of varied lengths and sizes (small, inline, out
// of line, fragmented) sent with SendBatch through a small ring arrive
// complete and in order at both members; a too-large payload stops a
// batch at its index with ErrTooLarge; TrySendBatch on a full ring takes
// what fits and says ErrBackPressure.
func TestSendBatch(t *testing.T) {
	const n = 3000
	rec0, rec1 := newRecorder(n), newRecorder(n)
	ms := openGroup(t, 2, func(i int, c *Config) {
		c.Tuning.RingCapacity = 64
		c.Tuning.MaxMessage = 1 << 17
		c.Handler = []*recorder{rec0, rec1}[i]
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	size := func(i int) int {
		switch i % 50 {
		case 7:
			return 5000 // out of line
		case 21:
			return 70000 // fragmented
		}
		return i % 1200
	}
	var batch [][]byte
	for i := 0; i < n; {
		batch = batch[:0]
		for k := 1 + i%97; k > 0 && i < n; k-- {
			batch = append(batch, payloadOf(0, i, size(i)))
			i++
		}
		sent, err := ms[0].SendBatch(ctx, batch)
		require.NoError(t, err)
		require.Equal(t, len(batch), sent)
	}
	want := expectedHash(n, func(i int) []byte { return payloadOf(0, i, size(i)) })
	requireHash(ctx, t, []*recorder{rec0, rec1}, ms[0].Self(), want)

	// Too large: the payloads before it are sent, the call stops there.
	big := make([]byte, (1<<17)+1)
	sent, err := ms[0].SendBatch(ctx, [][]byte{{1}, {2}, big, {3}})
	require.ErrorIs(t, err, ErrTooLarge)
	require.Equal(t, 2, sent)
	k, err := ms[0].TrySendBatch([][]byte{big})
	require.ErrorIs(t, err, ErrTooLarge)
	require.Zero(t, k)
}

// TestTrySendBatchFullRing: with the agent held off, TrySendBatch fills
// the ring with the prefix that fits and reports ErrBackPressure, then
// refuses everything; the prefix is delivered in order.
func TestTrySendBatchFullRing(t *testing.T) {
	rec := newRecorder(16 + 8)
	ms := openGroup(t, 2, func(i int, c *Config) {
		c.Tuning.RingCapacity = 16
		if i == 1 {
			c.Handler = rec
		} else {
			c.Handler = newRecorder(1 << 30)
		}
	})
	ps := make([][]byte, 24)
	for i := range ps {
		ps[i] = payloadOf(0, i, 10)
	}
	s := ms[0]
	s.mu.Lock()
	k, err := s.TrySendBatch(ps)
	k2, err2 := s.TrySendBatch(ps[k:])
	s.mu.Unlock()
	require.ErrorIs(t, err, ErrBackPressure)
	require.Equal(t, 16, k)
	require.ErrorIs(t, err2, ErrBackPressure)
	require.Zero(t, k2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sent, err := s.SendBatch(ctx, ps[k:])
	require.NoError(t, err)
	require.Equal(t, 8, sent)
	select {
	case <-rec.cond:
	case <-ctx.Done():
		t.Fatalf("delivered %d", rec.total)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Empty(t, rec.errs)
	require.Equal(t, expectedHash(24, func(i int) []byte { return payloadOf(0, i, 10) }), rec.hash[s.Self()])
	require.GreaterOrEqual(t, s.Stats().BackPressure, uint64(2))
}

// TestExclusiveSender: with Config.Agent.ExclusiveSender the sending goroutine
// (one at a time; here the role passes between goroutines over a channel)
// mixes TrySend, SendBatch and TryClaim/Commit/Abort, with 5% loss at the
// receiver: both members deliver every message exactly once, in order.
func TestExclusiveSender(t *testing.T) {
	n := perSenderMessages
	rec := newRecorder(n)
	own := newRecorder(n)
	faults := make([]*faultCounter, 2)
	ms := openGroup(t, 2, func(i int, c *Config) {
		c.Agent.ExclusiveSender = true
		c.Tuning.RingCapacity = 256
		c.Tuning.MaxDatagram = 8192
		c.Handler = own
		faults[i] = overMem(c, none)
		if i == 1 {
			c.Handler = rec
			faults[i] = overMem(c, memtransport.Faults{Loss: 0.05, Seed: 11})
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	size := func(i int) int { return 16 + i*13%1500 }
	baton := make(chan int, 1)
	baton <- 0
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Go(func() {
			batch := make([][]byte, 0, 17)
			abort := true
			for i := range baton {
				for end := min(n, i+1+(i*7+g)%500); i < end; {
					switch i % 3 {
					case 0:
						if ms[0].TrySend(payloadOf(0, i, size(i))) == nil {
							i++
						} else {
							runtime.Gosched()
						}
					case 1:
						batch = batch[:0]
						for k := 0; k < 1+i%17 && i+k < end; k++ {
							batch = append(batch, payloadOf(0, i+k, size(i+k)))
						}
						k, err := ms[0].SendBatch(ctx, batch)
						if err != nil {
							t.Error(err)
							close(done)
							return
						}
						i += k
					default:
						c, err := ms[0].TryClaim(size(i))
						if err != nil {
							runtime.Gosched()
							continue
						}
						if abort = !abort; abort {
							c.Abort() // nothing is sent for it
							continue
						}
						fillPayload(c.Buf, 0, i)
						c.Commit()
						i++
					}
				}
				if i == n {
					close(done)
					return
				}
				baton <- i
			}
		})
	}
	<-done
	close(baton)
	wg.Wait()
	require.NoError(t, rec.waitFor(ctx, func() bool { return rec.total >= n }))
	require.NoError(t, own.waitFor(ctx, func() bool { return own.total >= n }))
	h := expectedHash(n, func(i int) []byte { return payloadOf(0, i, size(i)) })
	for _, r := range []*recorder{rec, own} {
		r.mu.Lock()
		require.Empty(t, r.errs)
		require.Equal(t, n, r.count[ms[0].Self()])
		require.Equal(t, h, r.hash[ms[0].Self()])
		r.mu.Unlock()
	}
	require.NotZero(t, faults[1].counts().Dropped)
}
