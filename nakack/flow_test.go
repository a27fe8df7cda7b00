package nakack

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFlowControlHoldsUntilRead: with InFlightBytes, SendBatch takes what
// fits above GroupReceived and Held says flow control stopped it; Send
// refuses with ErrFlowControl (an ErrBackPressure) and claims nothing; the
// first message goes when nothing is in flight, however large; once the
// receiver's STABLE is folded into a STABILITY the sender may go on.
func TestFlowControlHoldsUntilRead(t *testing.T) {
	c := newCluster(t, func(cfg *Config) {
		cfg.InFlightBytes = 1000
		cfg.StableInterval = 10 * time.Millisecond
	}, mA, mB)
	a := c.p(mA)
	pl := bytes.Repeat([]byte{1}, 300)
	_, n, err := a.SendBatch([][]byte{pl, pl, pl, pl, pl}, c.now)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.ErrorIs(t, a.Held(), ErrFlowControl)
	require.Equal(t, uint64(900), a.InFlight())
	next := a.NextSeq()
	_, err = a.Send(pl, c.now)
	require.ErrorIs(t, err, ErrFlowControl)
	require.ErrorIs(t, err, ErrBackPressure)
	require.Equal(t, next, a.NextSeq(), "a refused Send claims nothing")
	require.Equal(t, uint64(1), a.Stats().FlowControlWaits, "one episode")
	require.Zero(t, a.Stats().BackPressure, "the window is not full")

	a.Flush(c.now)
	c.run(100*time.Millisecond, nil)
	require.Zero(t, a.InFlight(), "B read everything")
	big := bytes.Repeat([]byte{2}, 5000) // above the limit, fragmented
	first, err := a.Send(big, c.now)
	require.NoError(t, err, "the first message goes when nothing is in flight")
	require.Greater(t, a.NextSeq()-1, first, "fragmented")
	require.Equal(t, uint64(5000), a.InFlight())
	_, n, err = a.SendBatch([][]byte{pl}, c.now)
	require.ErrorIs(t, err, ErrFlowControl)
	require.Zero(t, n)
	c.run(200*time.Millisecond, nil)
	require.Zero(t, a.InFlight())
	require.Equal(t, uint64(2), a.Stats().FlowControlWaits)
}

// TestRateLimitOnTheClock: the token bucket starts with one datagram's
// worth, refills at RateLimit bytes a second of the protocol's clock and
// Held reports ErrRateLimit when it runs out.
func TestRateLimitOnTheClock(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.RateLimit = 10_000 }, mA, mB) // MaxDatagram 1400
	a := c.p(mA)
	pl := bytes.Repeat([]byte{1}, 500)
	_, n, err := a.SendBatch([][]byte{pl, pl, pl, pl}, 0)
	require.NoError(t, err)
	require.Equal(t, 2, n, "a burst of 1400 bytes")
	require.ErrorIs(t, a.Held(), ErrRateLimit)
	_, err = a.Send(pl, 0)
	require.ErrorIs(t, err, ErrRateLimit)
	_, err = a.Send(pl, 10*time.Millisecond) // 400 + 100 bytes of tokens
	require.NoError(t, err)
	_, n, _ = a.SendBatch([][]byte{pl, pl}, 110*time.Millisecond) // 1000 more
	require.Equal(t, 2, n)
	require.Nil(t, a.Held())
}

// TestHeldAtFragmentBoundary: SendBatch stopping before a payload that
// needs fragments is not a hold (Held nil): the next call takes it.
func TestHeldAtFragmentBoundary(t *testing.T) {
	c := newCluster(t, nil, mA, mB)
	a := c.p(mA)
	_, n, err := a.SendBatch([][]byte{{1}, bytes.Repeat([]byte{2}, 3000), {3}}, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Nil(t, a.Held())
	_, n, err = a.SendBatch([][]byte{bytes.Repeat([]byte{2}, 3000), {3}}, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// TestAllocsSendBatchFlowControl: flow control and the rate limit add no
// allocation to SendBatch.
func TestAllocsSendBatchFlowControl(t *testing.T) {
	f := newFixture(t, func(cfg *Config) {
		cfg.InFlightBytes = 1 << 30
		cfg.RateLimit = 1 << 40
	})
	run := make([][]byte, 64)
	for i := range run {
		run[i] = make([]byte, 64)
	}
	now := time.Duration(0)
	require.Zero(t, allocs(t, func() {
		now += time.Millisecond
		_, _, err := f.a.SendBatch(run, now)
		if err != nil && !errors.Is(err, ErrBackPressure) {
			panic(err)
		}
		f.a.Flush(now)
		f.drainOut()
		f.a.Poll(&f.h, 1<<20)
		e, _ := f.a.WindowState(mA)
		_, _ = f.a.ForcePurge(mA, e.Delivered)
	}))
}
