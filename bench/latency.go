package bench

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine"
)

// EnginePingPongConfig configures RunEnginePingPong. Zero fields take the
// defaults named.
type EnginePingPongConfig struct {
	// Group (default RandomGroup()) and Interface (default "lo").
	Group     netip.AddrPort
	Interface string
	// MsgSize of ping and pong (default 64), Count round trips measured
	// (default 10000) after Warmup (default Count/10).
	MsgSize, Count, Warmup int
	// Idle is both members' idle strategy (default engine.IdleBlock).
	Idle engine.IdleStrategy
	// Threading is both members' (default engine.ThreadingShared). With
	// engine.ThreadingInvoked the pinging goroutine runs its member's
	// agent (DoWork) while it waits for each pong, and one goroutine runs
	// the other's, whose handler answers: two goroutines, as in the raw
	// ping-pong. Between idle DoWork calls both spin (IdleSpin) or yield;
	// with IdleBlock the answering side sleeps in WaitWork after a burst
	// of yields (DriveInvoked).
	Threading engine.Threading
	// Timeout bounds the run (default 60 s).
	Timeout time.Duration
}

// PingPongLatency is a round-trip distribution.
type PingPongLatency struct {
	Count int64 `json:"count"`
	// RTT is the round-trip time distribution.
	RTT Latency `json:"rtt"`
}

// pingHandler notes the highest pong seqno from its peer.
type pingHandler struct {
	peer digest.Member
	got  atomic.Uint64
}

func (p *pingHandler) Deliver(s digest.Member, seq uint64, _ []byte) {
	if s == p.peer {
		p.got.Store(seq)
	}
}
func (p *pingHandler) Lost(digest.Member, uint64, uint64) {}

// pongHandler answers every message of its peer with TrySend from the
// delivery callback (which never blocks).
type pongHandler struct {
	peer     digest.Member
	m        atomic.Pointer[engine.Member]
	buf      []byte
	answered atomic.Uint64
}

func (p *pongHandler) Deliver(s digest.Member, _ uint64, _ []byte) {
	if s == p.peer {
		for p.m.Load().TrySend(p.buf) != nil {
		}
		p.answered.Add(1)
	}
}
func (p *pongHandler) Lost(digest.Member, uint64, uint64) {}

// RunEnginePingPong measures the round trip of messages between two engine
// members in this process (multicast both ways, push delivery, the shared
// agent of each with cfg.Idle): member A sends a ping, member B's handler
// answers with a pong, A times send to delivery of the pong.
func RunEnginePingPong(ctx context.Context, cfg EnginePingPongConfig) (PingPongLatency, error) {
	if !cfg.Group.IsValid() {
		cfg.Group = RandomGroup()
	}
	pingPongDefaults(&cfg.MsgSize, &cfg.Count, &cfg.Warmup, &cfg.Timeout)
	if cfg.MsgSize < 1 || cfg.Count < 1 || cfg.Warmup < 0 {
		return PingPongLatency{}, fmt.Errorf("bench: EnginePingPongConfig: MsgSize %d, Count %d, Warmup %d: want positive sizes and counts", cfg.MsgSize, cfg.Count, cfg.Warmup)
	}
	runID := RandomRunID()
	ids := []digest.Member{MemberID(runID, 0), MemberID(runID, 1)}
	pi := &pingHandler{peer: ids[1]}
	po := &pongHandler{peer: ids[0], buf: make([]byte, cfg.MsgSize)}
	var ms [2]*engine.Member
	for i, h := range []engine.Handler{pi, po} {
		c := MemberConfig{RunID: runID, Index: i, Members: 2, Config: engine.Config{Group: cfg.Group, Interface: cfg.Interface, Agent: engine.AgentConfig{Idle: cfg.Idle, Threading: cfg.Threading}}}
		c, _ = c.withDefaults()
		ec, _ := c.engineConfig(h)
		m, err := engine.Open(ctx, ec)
		if err != nil {
			for _, o := range ms[:i] {
				_ = o.Close(context.Background())
			}
			return PingPongLatency{}, fmt.Errorf("bench: ping-pong member %d: %w", i, err)
		}
		ms[i] = m
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done := make(chan struct{})
		go func() { _ = ms[1].Close(cctx); close(done) }()
		_ = ms[0].Close(cctx)
		<-done
	}()
	po.m.Store(ms[1])
	invoked := cfg.Threading == engine.ThreadingInvoked
	// idle is the pinging goroutine's wait step: run the agent when it is
	// ours to run, yield unless spinning with nothing done.
	idle := func() {
		if invoked && ms[0].DoWork() > 0 {
			return
		}
		if !invoked || cfg.Idle != engine.IdleSpin {
			runtime.Gosched()
		}
	}
	defer DriveInvoked(ms[1], cfg.Idle)() // the answering side's loop
	return pingLoop(ctx, ms[0], pi, cfg.MsgSize, cfg.Warmup, cfg.Count, cfg.Timeout, idle)
}

// pingLoop is the pinging side of a ping-pong: warmup+count times, it
// sends a ping of msgSize bytes through m and waits (running idle between
// looks) until pi has the pong, timing the round trips after the warmup.
func pingLoop(ctx context.Context, m *engine.Member, pi *pingHandler, msgSize, warmup, count int, timeout time.Duration, idle func()) (PingPongLatency, error) {
	ping := make([]byte, msgSize)
	h := NewHistogram()
	deadline := time.Now().Add(timeout)
	for i := 1; i <= warmup+count; i++ {
		t0 := Nanotime()
		for {
			err := m.TrySend(ping)
			if err == nil {
				break
			}
			if err != engine.ErrBackPressure {
				return PingPongLatency{}, fmt.Errorf("bench: ping %d: %w", i, err)
			}
			idle()
		}
		for spins := 0; pi.got.Load() < uint64(i); spins++ {
			idle()
			if spins&1023 == 1023 && (ctx.Err() != nil || time.Now().After(deadline)) {
				if ctx.Err() != nil {
					return PingPongLatency{Count: h.TotalCount(), RTT: Summarize(h, true)}, ctx.Err()
				}
				return PingPongLatency{}, fmt.Errorf("bench: ping %d: no pong within %v", i, timeout)
			}
		}
		if i > warmup {
			_ = h.RecordValue(Nanotime() - t0)
		}
	}
	return PingPongLatency{Count: h.TotalCount(), RTT: Summarize(h, true)}, nil
}

// RawPingPongLatency converts RunRawPingPong's result into the same shape
// (without a histogram encoding).
func RawPingPongLatency(r PingPongResult) PingPongLatency {
	return PingPongLatency{Count: int64(r.Count), RTT: Latency{Count: int64(r.Count), MinNs: int64(r.Min), P50Ns: int64(r.P50),
		P99Ns: int64(r.P99), P999Ns: int64(r.P999), MaxNs: int64(r.Max), MeanNs: float64(r.Mean)}}
}
