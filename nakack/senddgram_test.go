package nakack

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nakcast/nakcast/wire"
)

// writeInPlace writes ps in the wire's per-message layout into a pool
// buffer from wire.DataOverhead on, as a log-buffer producer does, and
// returns the buffer and the end of the messages.
func writeInPlace(t *testing.T, p *Protocol, ps [][]byte) (*wire.Buffer, int) {
	t.Helper()
	b := p.cfg.Pool.Get(p.cfg.MaxDatagram)
	require.NotNil(t, b)
	off := wire.DataOverhead
	for _, pl := range ps {
		binary.LittleEndian.PutUint16(b.B[off:], uint16(len(pl)))
		off += wire.MsgOverhead + copy(b.B[off+wire.MsgOverhead:], pl)
	}
	return b, off
}

// datagramRuns cuts ps into runs that each fill at most one datagram of p.
func datagramRuns(p *Protocol, ps [][]byte) [][][]byte {
	var runs [][][]byte
	room := p.cfg.MaxDatagram - wire.DataOverhead - trailerRoom(p)
	for len(ps) > 0 {
		n, used := 0, 0
		for n < len(ps) && n < p.cfg.MaxBundle && used+wire.MsgOverhead+len(ps[n]) <= room {
			used += wire.MsgOverhead + len(ps[n])
			n++
		}
		runs = append(runs, ps[:n])
		ps = ps[n:]
	}
	return runs
}

func trailerRoom(p *Protocol) int {
	if p.hdr.Auth() {
		return wire.TrailerLen
	}
	return 0
}

// TestSendDatagramEqualsSendBatch: messages written in place and sent with
// SendDatagram give the same seqnos, datagrams, self-deliveries, counters
// and bytes in flight (with flow control) as SendBatch of the same runs
// each flushed, also when an open bundle precedes (SendDatagram flushes it
// first).
func TestSendDatagramEqualsSendBatch(t *testing.T) {
	for _, c := range []struct{ maxBundle, inFlight int }{{8, 0}, {1024, 0}, {1024, 1 << 20}} {
		maxBundle := c.maxBundle
		newP := func() *Protocol {
			return viewedSender(t, func(cfg *Config) {
				cfg.Pool = wire.NewPool(1400, 0)
				cfg.MaxBundle = maxBundle
				cfg.InFlightBytes = c.inFlight
			})
		}
		rng := rand.New(rand.NewPCG(7, uint64(maxBundle)))
		ps := sendBatchPayloads(rng, 300, []int{0, 1, 16, 64, 300})
		ref, got := newP(), newP()
		takeOutbox(ref)
		takeOutbox(got)
		for i, run := range datagramRuns(ref, ps) {
			if i%3 == 2 {
				// An open bundle of one message before the datagram.
				_, n, err := ref.SendBatch(run[:1], 0)
				require.NoError(t, err)
				require.Equal(t, 1, n)
				_, _, err = got.SendBatch(run[:1], 0)
				require.NoError(t, err)
				run = run[1:]
				if len(run) == 0 {
					continue
				}
				ref.Flush(0)
			}
			first, n, err := ref.SendBatch(run, 0)
			require.NoError(t, err)
			require.Equal(t, len(run), n)
			ref.Flush(0)
			b, end := writeInPlace(t, got, run)
			gfirst, err := got.SendDatagram(b, len(run), end, 0)
			require.NoError(t, err)
			require.Equal(t, first, gfirst)
			require.Equal(t, ref.NextSeq(), got.NextSeq())
			require.Equal(t, ref.InFlight(), got.InFlight())
		}
		require.Equal(t, takeOutbox(ref), takeOutbox(got))
		var r1, r2 recorder
		ref.Poll(&r1, 1<<20)
		got.Poll(&r2, 1<<20)
		require.Equal(t, r1.dels, r2.dels)
		require.Len(t, r2.dels, len(ps))
		s1, s2 := ref.Stats(), got.Stats()
		require.Equal(t, s1.Sent, s2.Sent)
		require.Equal(t, s1.Bundles, s2.Bundles)
	}
}

// TestSendDatagramRefuses: a datagram whose length prefixes do not end at
// end, or too many messages, is malformed; beyond the own window nothing
// is taken. Either way nothing is claimed and the buffer stays the
// caller's.
func TestSendDatagramRefuses(t *testing.T) {
	p := viewedSender(t, func(cfg *Config) {
		cfg.Pool = wire.NewPool(1400, 0)
		cfg.SendWindow = 64
	})
	takeOutbox(p)
	ps := [][]byte{{1, 2, 3}, {4}, {}}
	b, end := writeInPlace(t, p, ps)
	_, err := p.SendDatagram(b, len(ps), end-1, 0)
	require.ErrorIs(t, err, wire.ErrMalformed)
	_, err = p.SendDatagram(b, len(ps)+1, end, 0)
	require.ErrorIs(t, err, wire.ErrMalformed)
	_, err = p.SendDatagram(b, p.cfg.MaxBundle+1, end, 0)
	require.ErrorIs(t, err, wire.ErrMalformed)
	require.Equal(t, uint64(1), p.NextSeq())

	// Fill the own window but for two seqnos: three do not go.
	fill := make([][]byte, 62)
	for i := range fill {
		fill[i] = []byte{byte(i)}
	}
	_, n, err := p.SendBatch(fill, 0)
	require.NoError(t, err)
	require.Equal(t, 62, n)
	_, err = p.SendDatagram(b, len(ps), end, 0)
	require.ErrorIs(t, err, ErrBackPressure)
	require.ErrorIs(t, p.Held(), ErrBackPressure)
	require.Equal(t, uint64(63), p.NextSeq())
	b.Release()
}

// TestSendDatagramFlowControlAllOrNone: flow control and the rate limit
// take a datagram whole or not at all, as SendBatch would count its
// messages: within the room it goes; beyond it (also when it would fit
// but for the bytes already in flight) nothing is taken and Held says
// why, and the wait is counted once.
func TestSendDatagramFlowControlAllOrNone(t *testing.T) {
	p := viewedSender(t, func(cfg *Config) {
		cfg.Pool = wire.NewPool(1400, 0)
		cfg.InFlightBytes = 100
	})
	takeOutbox(p)
	run := func(sizes ...int) [][]byte {
		ps := make([][]byte, len(sizes))
		for i, n := range sizes {
			ps[i] = make([]byte, n)
		}
		return ps
	}
	send := func(ps [][]byte) error {
		b, end := writeInPlace(t, p, ps)
		_, err := p.SendDatagram(b, len(ps), end, 0)
		if err != nil {
			b.Release()
		}
		return err
	}
	// Nothing in flight: 60 of the 100 go.
	require.NoError(t, send(run(20, 40)))
	require.Equal(t, uint64(60), p.InFlight())
	// 50 more would exceed: held whole.
	require.ErrorIs(t, send(run(10, 40)), ErrFlowControl)
	require.ErrorIs(t, p.Held(), ErrFlowControl)
	require.Equal(t, uint64(3), p.NextSeq())
	require.ErrorIs(t, send(run(50)), ErrFlowControl)
	require.Equal(t, uint64(1), p.Stats().FlowControlWaits)
	// 40 fit exactly.
	require.NoError(t, send(run(0, 40)))
	require.NoError(t, p.Held())
	require.Equal(t, uint64(100), p.InFlight())
	require.Equal(t, uint64(5), p.NextSeq())

	// The rate limit: one datagram's burst (MaxDatagram bytes), then held
	// until the tokens cover the next.
	r := viewedSender(t, func(cfg *Config) {
		cfg.Pool = wire.NewPool(1400, 0)
		cfg.RateLimit = 10_000
	})
	takeOutbox(r)
	sendAt := func(ps [][]byte, now time.Duration) error {
		b, end := writeInPlace(t, r, ps)
		_, err := r.SendDatagram(b, len(ps), end, now)
		if err != nil {
			b.Release()
		}
		return err
	}
	require.NoError(t, sendAt(run(600, 600), 0))
	require.ErrorIs(t, sendAt(run(300), 0), ErrRateLimit)
	require.Equal(t, uint64(3), r.NextSeq())
	require.NoError(t, sendAt(run(300), 100*time.Millisecond)) // 200 left + 1000 added
	require.Equal(t, uint64(4), r.NextSeq())
}
