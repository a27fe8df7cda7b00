package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/nakcast/nakcast/engine/transport"
)

// PingPongConfig configures RunRawPingPong. Zero fields take the defaults
// named.
type PingPongConfig struct {
	// Group is the multicast group the two members join (default
	// DefaultRawGroup with a free port).
	Group netip.AddrPort
	// Interface (default "lo").
	Interface string
	// MsgSize is the size of the ping and the pong (default 64).
	MsgSize int
	// Count is the number of round trips measured (default 10000).
	Count int
	// Warmup is the number of round trips run first and not measured
	// (default Count/10).
	Warmup int
	// BusyPoll makes both sides spin on TryReadBatch instead of blocking
	// in ReadBatch (the engine's spin idle strategy; it keeps two cores
	// busy).
	BusyPoll bool
	// Multicast sends ping and pong to the group (each side skips its own
	// copies) instead of by unicast to the other side's socket.
	Multicast bool
	// Timeout bounds the whole run (default 30 s): a lost datagram ends it
	// with an error instead of hanging.
	Timeout time.Duration
}

// PingPongResult holds round-trip times. Percentiles are nearest-rank over
// the sorted samples.
type PingPongResult struct {
	Count                    int
	Min, P50, P99, P999, Max time.Duration
	Mean                     time.Duration
}

// String formats the result in microseconds.
func (r PingPongResult) String() string {
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	return fmt.Sprintf("n=%d rtt us: min %.1f p50 %.1f p99 %.1f p99.9 %.1f max %.1f mean %.1f",
		r.Count, us(r.Min), us(r.P50), us(r.P99), us(r.P999), us(r.Max), us(r.Mean))
}

func (c PingPongConfig) withDefaults() (PingPongConfig, error) {
	if !c.Group.IsValid() {
		c.Group = DefaultRawGroup
	}
	if c.MsgSize == 0 {
		c.MsgSize = 64
	}
	if c.MsgSize < 8 || c.MsgSize > transport.MaxUDPPayloadIPv4 {
		return c, fmt.Errorf("bench: PingPongConfig.MsgSize %d: want 8..%d", c.MsgSize, transport.MaxUDPPayloadIPv4)
	}
	if c.Count == 0 {
		c.Count = 10000
	}
	if c.Count < 1 {
		return c, fmt.Errorf("bench: PingPongConfig.Count %d: want > 0", c.Count)
	}
	if c.Warmup == 0 {
		c.Warmup = c.Count / 10
	}
	if c.Warmup < 0 {
		return c, fmt.Errorf("bench: PingPongConfig.Warmup %d: want >= 0", c.Warmup)
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.Timeout < 0 {
		return c, fmt.Errorf("bench: PingPongConfig.Timeout %v: want > 0", c.Timeout)
	}
	return c, nil
}

// errPingPongTimeout ends a busy-polling side whose deadline passed.
var errPingPongTimeout = errors.New("bench: ping-pong timed out (datagram lost?)")

// pingSide is one end: it waits for a datagram from peer numbered want,
// skipping anything else (its own group copies).
type pingSide struct {
	t        *transport.UDP
	busy     bool
	deadline time.Time
	bufs     [][]byte
	sizes    []int
	srcs     []netip.AddrPort
	out      [][]byte
	dsts     []netip.AddrPort
}

func newPingSide(t *transport.UDP, cfg PingPongConfig, dst netip.AddrPort, deadline time.Time) *pingSide {
	s := &pingSide{t: t, busy: cfg.BusyPoll, deadline: deadline,
		bufs: make([][]byte, 4), sizes: make([]int, 4), srcs: make([]netip.AddrPort, 4),
		out: [][]byte{make([]byte, cfg.MsgSize)}, dsts: []netip.AddrPort{dst}}
	for i := range s.bufs {
		s.bufs[i] = make([]byte, max(cfg.MsgSize, 2048))
	}
	return s
}

func (s *pingSide) send(seq uint64) error {
	putSeq(s.out[0], seq)
	_, err := s.t.WriteBatch(s.out, s.dsts)
	return err
}

// await returns once a datagram from peer carrying seq has arrived.
func (s *pingSide) await(peer netip.AddrPort, seq uint64) error {
	for spins := 0; ; spins++ {
		var n int
		var err error
		if s.busy {
			n, err = s.t.TryReadBatch(s.bufs, s.sizes, s.srcs)
			if n == 0 && err == nil && spins&1023 == 1023 && time.Now().After(s.deadline) {
				return errPingPongTimeout
			}
		} else {
			n, err = s.t.ReadBatch(s.bufs, s.sizes, s.srcs)
		}
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if s.srcs[i] == peer && s.sizes[i] >= 8 && getSeq(s.bufs[i]) == seq {
				return nil
			}
		}
	}
}

func putSeq(b []byte, v uint64) {
	_ = b[7]
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

func getSeq(b []byte) uint64 {
	_ = b[7]
	var v uint64
	for i := range 8 {
		v |= uint64(b[i]) << (8 * i)
	}
	return v
}

// RunRawPingPong measures raw UDP round trips on loopback between two
// transports in this process: the pinger sends MsgSize bytes, the ponger
// answers, the pinger times send to answer. Both block in ReadBatch, or
// spin on TryReadBatch with BusyPoll.
func RunRawPingPong(ctx context.Context, cfg PingPongConfig) (PingPongResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return PingPongResult{}, err
	}
	a, err := transport.Open(transport.Config{Group: cfg.Group, Interface: cfg.Interface, BatchSize: 4})
	if err != nil {
		return PingPongResult{}, fmt.Errorf("bench: pinger: %w", err)
	}
	defer a.Close()
	b, err := transport.Open(transport.Config{Group: a.Group(), Interface: cfg.Interface, BatchSize: 4})
	if err != nil {
		return PingPongResult{}, fmt.Errorf("bench: ponger: %w", err)
	}
	defer b.Close()

	deadline := time.Now().Add(cfg.Timeout)
	for _, t := range []*transport.UDP{a, b} {
		if err := t.SetReadDeadline(deadline); err != nil {
			return PingPongResult{}, err
		}
	}
	stop := context.AfterFunc(ctx, func() {
		_ = a.SetReadDeadline(time.Now())
		_ = b.SetReadDeadline(time.Now())
	})
	defer stop()

	toA, toB := a.LocalAddr(), b.LocalAddr()
	if cfg.Multicast {
		toA, toB = netip.AddrPort{}, netip.AddrPort{}
	}
	ping := newPingSide(a, cfg, toB, deadline)
	pong := newPingSide(b, cfg, toA, deadline)
	total := cfg.Warmup + cfg.Count

	pongErr := make(chan error, 1)
	go func() {
		for seq := uint64(1); seq <= uint64(total); seq++ {
			if err := pong.await(a.LocalAddr(), seq); err != nil {
				pongErr <- err
				return
			}
			if err := pong.send(seq); err != nil {
				pongErr <- err
				return
			}
		}
		pongErr <- nil
	}()

	samples := make([]time.Duration, 0, cfg.Count)
	for seq := uint64(1); seq <= uint64(total); seq++ {
		if ctx.Err() != nil {
			_ = b.Close() // unblock the ponger
			<-pongErr
			return PingPongResult{}, ctx.Err()
		}
		t0 := time.Now()
		err := ping.send(seq)
		if err == nil {
			err = ping.await(b.LocalAddr(), seq)
		}
		if err != nil {
			_ = b.Close()
			<-pongErr
			return PingPongResult{}, fmt.Errorf("bench: round trip %d: %w", seq, err)
		}
		if rtt := time.Since(t0); int(seq) > cfg.Warmup {
			samples = append(samples, rtt)
		}
	}
	if err := <-pongErr; err != nil {
		return PingPongResult{}, fmt.Errorf("bench: ponger: %w", err)
	}
	return summarize(samples), nil
}

// summarize sorts samples and takes nearest-rank percentiles.
func summarize(samples []time.Duration) PingPongResult {
	if len(samples) == 0 {
		return PingPongResult{}
	}
	slices.Sort(samples)
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	return PingPongResult{
		Count: len(samples),
		Min:   samples[0],
		P50:   percentile(samples, 50),
		P99:   percentile(samples, 99),
		P999:  percentile(samples, 99.9),
		Max:   samples[len(samples)-1],
		Mean:  sum / time.Duration(len(samples)),
	}
}

// percentile is the nearest-rank percentile p (0 < p <= 100) of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}
