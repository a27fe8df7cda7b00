package engine

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/stretchr/testify/require"
)

// TestConcurrentSendersUnderBackPressure: several goroutines Send through
// one member with a small ring, so they spend most of their time waiting
// for room (one wake-up token passed among them). Every message arrives,
// each goroutine's in its order, and a waiter whose context ends returns
// its error while the others go on.
func TestConcurrentSendersUnderBackPressure(t *testing.T) {
	const producers, each = 6, 20000
	var mu sync.Mutex
	next := make([]uint32, producers) // per producer, at the receiver
	var bad []string
	done := make(chan struct{})
	total := 0
	h := HandlerFunc(func(_ digest.Member, _ uint64, p []byte) {
		mu.Lock()
		defer mu.Unlock()
		k, i := p[0], binary.LittleEndian.Uint32(p[1:])
		if k == 0xff {
			return // the short-lived sender's
		}
		if int(k) >= producers || i != next[k] {
			if len(bad) < 5 {
				bad = append(bad, "out of order")
			}
			return
		}
		next[k]++
		if total++; total == producers*each {
			close(done)
		}
	})
	ms := openGroup(t, 2, func(i int, c *Config) {
		c.Tuning.RingCapacity = 16
		if i == 1 {
			c.Handler = h
		} else {
			c.Handler = HandlerFunc(func(digest.Member, uint64, []byte) {})
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, producers)
	for k := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var p [5]byte
			p[0] = byte(k)
			for i := range each {
				binary.LittleEndian.PutUint32(p[1:], uint32(i))
				if err := ms[0].Send(ctx, p[:]); err != nil {
					errs[k] = err
					return
				}
			}
		}()
	}
	// A waiter with a context that ends returns at once with its error.
	short, cancelShort := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancelShort()
	var shortErr error
	for shortErr == nil {
		shortErr = ms[0].Send(short, []byte{0xff, 0, 0, 0, 0})
	}
	require.ErrorIs(t, shortErr, context.DeadlineExceeded)
	wg.Wait()
	for k, err := range errs {
		require.NoError(t, err, "producer %d", k)
	}
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("received %d of %d", total, producers*each)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, bad)
	require.Greater(t, ms[0].Stats().BackPressureWaits, uint64(0))
}
