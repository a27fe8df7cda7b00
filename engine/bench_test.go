package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nakcast/nakcast/bench"
	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine"
	"github.com/nakcast/nakcast/engine/auth"
	"github.com/nakcast/nakcast/engine/transport/memtransport"
)

// The benchmarks live in the external test package: bench/ imports engine
// (its member harness), so package engine's own tests cannot import bench.

// benchGroup returns a fresh loopback group (239.76.x.y, random port).
func benchGroup() netip.AddrPort {
	a := netip.AddrFrom4([4]byte{239, 76, byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
	return netip.AddrPortFrom(a, uint16(20000+rand.IntN(40000)))
}

// benchIDs returns n fresh member identities.
func benchIDs(n int) []digest.Member {
	base := rand.Uint64() &^ 0xff
	ids := make([]digest.Member, n)
	for i := range ids {
		ids[i] = digest.Member{ID: base + uint64(i+1), Inc: 1}
	}
	return ids
}

// openBench opens the members ids of one static group; mod adjusts each
// config. They are closed when the benchmark ends.
func openBench(b *testing.B, ids []digest.Member, mod func(i int, c *engine.Config)) []*engine.Member {
	g := benchGroup()
	n := len(ids)
	ms := make([]*engine.Member, n)
	for i := range ms {
		c := engine.Config{Group: g, Self: ids[i], Logger: slog.New(slog.DiscardHandler), Membership: engine.MembershipConfig{Members: ids}}
		if mod != nil {
			mod(i, &c)
		}
		var m *engine.Member
		var err error
		// Label the member's goroutines (its agent inherits the labels) so
		// that a CPU profile splits by member: -tagfocus member=m0.
		pprof.Do(context.Background(), pprof.Labels("member", "m"+strconv.Itoa(i)), func(ctx context.Context) {
			m, err = engine.Open(ctx, c)
		})
		if err != nil {
			b.Fatal(err)
		}
		ms[i] = m
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for _, m := range ms {
			wg.Add(1)
			go func() { defer wg.Done(); _ = m.Close(ctx) }()
		}
		wg.Wait()
	})
	return ms
}

// counter is a Handler that only counts, like the raw baseline's receiver:
// a plain count on the agent goroutine, published to the benchmark's
// goroutine every 1024 messages and when it reaches want. It fills its own
// cache lines: two members' counters allocated side by side would
// otherwise share one (false sharing the raw baseline does not pay).
type counter struct {
	_     [64]byte
	local int64
	want  int64
	n     atomic.Int64
	_     [40]byte
}

func (c *counter) Deliver(digest.Member, uint64, []byte) {
	c.local++
	if c.local&1023 == 0 || c.local == c.want {
		c.n.Store(c.local)
	}
}
func (c *counter) Lost(digest.Member, uint64, uint64) {}

// BenchmarkEngineLoopback measures one sender member to one receiver
// member on loopback with 64 KB datagrams, for 64 B and 1 KiB messages
// (shared-mode agents unless the name says dedicated):
// b.N messages sent with Send, timed until the receiver delivered the last.
// In the same run it measures the raw baseline (bench.RunRaw: the same
// message size packed into the same datagram size, sendmmsg/recvmmsg and a
// parse, no protocol) over the same count, and reports engine/raw.
func BenchmarkEngineLoopback(b *testing.B) {
	for _, size := range []int{64, 1024} {
		for _, idle := range []engine.IdleStrategy{engine.IdleBlock, engine.IdleYield} {
			b.Run(fmt.Sprintf("%dB/%v", size, idle), func(b *testing.B) {
				benchLoopback(b, size, loopOpts{idle: idle})
			})
		}
		b.Run(fmt.Sprintf("%dB/block/loss5%%", size), func(b *testing.B) {
			benchLoopback(b, size, loopOpts{idle: engine.IdleBlock, loss: 0.05})
		})
		// Every datagram signed (Config.Keys), or also encrypted
		// (Config.Encrypt): compare with %dB/block.
		b.Run(fmt.Sprintf("%dB/block/signed", size), func(b *testing.B) {
			benchLoopback(b, size, loopOpts{idle: engine.IdleBlock, auth: "signed"})
		})
		b.Run(fmt.Sprintf("%dB/block/encrypted", size), func(b *testing.B) {
			benchLoopback(b, size, loopOpts{idle: engine.IdleBlock, auth: "encrypted"})
		})
		b.Run(fmt.Sprintf("%dB/block/dedicated", size), func(b *testing.B) {
			benchLoopback(b, size, loopOpts{idle: engine.IdleBlock, thr: engine.ThreadingDedicated})
		})
		// Pull mode at the receiver: a goroutine of the application polls
		// (Member.Poll, 256 messages a call), yielding when it finds none.
		b.Run(fmt.Sprintf("%dB/block/pull", size), func(b *testing.B) {
			benchLoopback(b, size, loopOpts{idle: engine.IdleBlock, pull: true})
		})
		// The sender does not deliver its own messages (Config.DiscardOwn),
		// like the raw baseline's sender, which receives nothing.
		b.Run(fmt.Sprintf("%dB/block/discardown", size), func(b *testing.B) {
			benchLoopback(b, size, loopOpts{idle: engine.IdleBlock, discardOwn: true})
		})
		// The benchmark goroutine is the only one that sends
		// (Config.Agent.ExclusiveSender): the ring claims without a
		// compare-and-swap.
		b.Run(fmt.Sprintf("%dB/block/exclusive", size), func(b *testing.B) {
			benchLoopback(b, size, loopOpts{idle: engine.IdleBlock, exclusive: true})
		})
		// The application sends with SendBatch, 64 messages a call, like
		// the raw baseline's sender, which fills a datagram at a time.
		b.Run(fmt.Sprintf("%dB/block/batch", size), func(b *testing.B) {
			benchLoopback(b, size, loopOpts{idle: engine.IdleBlock, batch: 64})
		})
		b.Run(fmt.Sprintf("%dB/block/batch+discardown", size), func(b *testing.B) {
			benchLoopback(b, size, loopOpts{idle: engine.IdleBlock, batch: 64, discardOwn: true})
		})
		// ThreadingInvoked: the sending goroutine runs its member's agent
		// (DoWork every 1024 messages and under back-pressure);
		// TrySendBatch writes into the bundle directly (TrySend goes
		// through the ring); a second goroutine runs the receiver's: two
		// goroutines, as in the raw baseline.
		b.Run(fmt.Sprintf("%dB/invoked", size), func(b *testing.B) {
			benchLoopback(b, size, loopOpts{invoked: true})
		})
		b.Run(fmt.Sprintf("%dB/invoked+discardown", size), func(b *testing.B) {
			benchLoopback(b, size, loopOpts{invoked: true, discardOwn: true})
		})
		b.Run(fmt.Sprintf("%dB/invoked+batch+discardown", size), func(b *testing.B) {
			benchLoopback(b, size, loopOpts{invoked: true, discardOwn: true, batch: 64})
		})
	}
}

// loopOpts is one benchLoopback configuration: loss is injected at the
// receiver only; discardOwn sets the sender's Config.DiscardOwn; batch > 0
// sends with SendBatch, batch messages a call.
type loopOpts struct {
	idle       engine.IdleStrategy
	loss       float64
	thr        engine.Threading
	discardOwn bool
	batch      int
	invoked    bool
	exclusive  bool   // the sender's Config.Agent.ExclusiveSender
	pull       bool   // the receiver in pull mode, polled by a goroutine
	auth       string // "signed" (Config.Keys) or "encrypted" (and Config.Encrypt)
}

// benchLoopback runs one configuration.
func benchLoopback(b *testing.B, size int, o loopOpts) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rawCPU0 := cpuTime()
	raw, err := bench.RunRaw(ctx, bench.RawConfig{Group: benchGroup(), MsgSize: size, Count: int64(b.N), Batch: 64})
	if err != nil {
		b.Fatal(err)
	}
	rawCPU := cpuTime() - rawCPU0
	cs := []*counter{{want: int64(b.N)}, {want: int64(b.N)}}
	key, err := auth.GenerateKey(1)
	if err != nil {
		b.Fatal(err)
	}
	ms := openBench(b, benchIDs(2), func(i int, c *engine.Config) {
		c.Handler = cs[i]
		if o.auth != "" {
			c.Keys, c.Encrypt = []engine.Key{key}, o.auth == "encrypted"
		}
		c.Agent.Idle = o.idle
		c.Agent.Threading = o.thr
		if o.invoked {
			c.Agent.Threading = engine.ThreadingInvoked
		}
		if i == 1 {
			if o.pull {
				c.Handler = nil
			}
			if o.loss > 0 {
				c.Transport.Wrap = memtransport.Faults{Loss: o.loss}.WrapTransport // over UDP, as measured
			}
		} else {
			c.DiscardOwn = o.discardOwn
			c.Agent.ExclusiveSender = o.exclusive
		}
	})
	payload := make([]byte, size)
	defer bench.DriveInvoked(ms[1], engine.IdleYield)() // ThreadingInvoked: the receiver's loop
	if o.pull {
		defer pollLoop(ms[1], cs[1])()
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	cpu0 := cpuTime()
	if o.invoked && o.batch > 0 {
		ps := make([][]byte, o.batch)
		for i := range ps {
			ps[i] = make([]byte, size)
			ps[i][0] = byte(i)
		}
		for i := 0; i < b.N; {
			n, _ := ms[0].TrySendBatch(ps[:min(o.batch, b.N-i)])
			if n == 0 {
				if ms[0].DoWork() == 0 {
					runtime.Gosched()
				}
				continue
			}
			if i/1024 != (i+n)/1024 {
				ms[0].DoWork()
			}
			i += n
		}
	} else if o.invoked {
		for i := 0; i < b.N; {
			payload[0] = byte(i)
			if ms[0].TrySend(payload) == nil {
				if i++; i&1023 == 0 {
					ms[0].DoWork()
				}
			} else if ms[0].DoWork() == 0 {
				runtime.Gosched()
			}
		}
	} else if o.batch > 0 {
		ps := make([][]byte, o.batch)
		for i := range ps {
			ps[i] = make([]byte, size)
			ps[i][0] = byte(i)
		}
		for i := 0; i < b.N; i += o.batch {
			if _, err := ms[0].SendBatch(ctx, ps[:min(o.batch, b.N-i)]); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		for i := 0; i < b.N; i++ {
			payload[0] = byte(i)
			if err := ms[0].Send(ctx, payload); err != nil {
				b.Fatal(err)
			}
		}
	}
	for cs[1].n.Load() < int64(b.N) {
		if ctx.Err() != nil {
			b.Fatalf("timeout: %d of %d delivered", cs[1].n.Load(), b.N)
		}
		if o.invoked {
			if ms[0].DoWork() == 0 {
				runtime.Gosched()
			}
			continue
		}
		time.Sleep(50 * time.Microsecond) // polling the receiver's count, not synchronisation
	}
	el := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	rate := float64(b.N) / el.Seconds()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/msg")
	b.ReportMetric(float64(rawCPU.Nanoseconds())/float64(b.N), "raw-cpu-ns/msg")
	b.ReportMetric(rate, "msgs/s")
	b.ReportMetric(raw.MsgsPerSec, "raw-msgs/s")
	if raw.MsgsPerSec > 0 {
		b.ReportMetric(rate/raw.MsgsPerSec, "engine/raw")
	}
	s := ms[0].Stats()
	r := ms[1].Stats()
	b.ReportMetric(float64(s.Sent)/float64(max(s.Bundles, 1)), "msgs/datagram")
	b.ReportMetric(float64(s.SentInPlace)/float64(max(s.Bundles, 1)), "in-place/datagram")
	b.ReportMetric(float64(s.ProtocolBackPressure), "window-full")
	b.ReportMetric(float64(r.Retransmitted+s.Retransmitted), "retransmitted")
	b.ReportMetric(float64(s.FlowControlWaits), "flow-waits")
	b.ReportMetric(float64(r.Protocol.StableSent), "stable-sent")
	b.ReportMetric(float64(s.Protocol.StabilitySent), "stability-sent")
}

// pollLoop polls m into h on a goroutine of its own, yielding when it
// finds nothing, until the returned function is called.
func pollLoop(m *engine.Member, h engine.Handler) (stop func()) {
	var quit atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !quit.Load() {
			if m.Poll(h, 256) == 0 {
				runtime.Gosched()
			}
		}
	}()
	return func() {
		quit.Store(true)
		<-done
	}
}

// pinger is member A's handler in the ping-pong: it notes the arrival of
// B's pong.
type pinger struct {
	peer digest.Member
	got  atomic.Uint64
}

func (p *pinger) Deliver(s digest.Member, seq uint64, _ []byte) {
	if s == p.peer {
		p.got.Store(seq)
	}
}
func (p *pinger) Lost(digest.Member, uint64, uint64) {}

// ponger is member B's handler: it answers every message of A with a pong
// sent with TrySend from inside the handler (allowed: it never blocks).
type ponger struct {
	peer digest.Member
	m    atomic.Pointer[engine.Member]
	buf  []byte
}

func (p *ponger) Deliver(s digest.Member, _ uint64, _ []byte) {
	if s == p.peer {
		for p.m.Load().TrySend(p.buf) != nil {
		}
	}
}
func (p *ponger) Lost(digest.Member, uint64, uint64) {}

// chainPinger is member A's handler when the ping-pong runs from the
// handlers on both sides: on each pong it records the round trip and sends
// the next ping itself, on A's agent goroutine, as the raw ping-pong's
// goroutine answers right after its read; no third goroutine takes part.
type chainPinger struct {
	peer   digest.Member
	m      *engine.Member
	buf    []byte
	sentAt time.Time
	rtts   []time.Duration // preallocated: warm-up and measured
	done   chan struct{}
}

func (p *chainPinger) Deliver(s digest.Member, _ uint64, _ []byte) {
	if s != p.peer || len(p.rtts) == cap(p.rtts) {
		return
	}
	now := time.Now()
	p.rtts = append(p.rtts, now.Sub(p.sentAt))
	if len(p.rtts) == cap(p.rtts) {
		close(p.done)
		return
	}
	p.sentAt = now // one clock read a round trip
	for p.m.TrySend(p.buf) != nil {
	}
}
func (p *chainPinger) Lost(digest.Member, uint64, uint64) {}

// BenchmarkEnginePingPong measures the round trip of 64 B messages between
// two members on loopback (multicast both ways, push delivery, shared-mode
// agent), and in the same run the raw UDP multicast ping-pong of bench/
// with the matching idle strategy (spin: BusyPoll), reporting p50 and p99
// and their ratios.
func BenchmarkEnginePingPong(b *testing.B) {
	for _, idle := range []engine.IdleStrategy{engine.IdleBlock, engine.IdleYield, engine.IdleSpin} {
		b.Run(idle.String(), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			raw := rawPingPong(ctx, b, idle)
			ms, pi := pingPongPair(b, func(c *engine.Config) { c.Agent.Idle = idle })
			ping := make([]byte, 64)
			warm := max(b.N/10, 10)
			rtts := make([]time.Duration, 0, b.N)
			// The raw run's and the set-up's garbage is not the engine's:
			// collect it now rather than during the round trips (the raw
			// ping-pong ran on a fresh heap too).
			runtime.GC()
			b.ResetTimer()
			for i := 1; i <= warm+b.N; i++ {
				t0 := time.Now()
				for ms[0].TrySend(ping) != nil {
				}
				for pi.got.Load() < uint64(i) {
					runtime.Gosched()
				}
				if i > warm {
					rtts = append(rtts, time.Since(t0))
				}
			}
			b.StopTimer()
			reportPingPong(b, rtts, raw)
		})
		// The same with both sides answering from their handlers (the
		// first ping aside): the application's goroutine does not take
		// part, so two goroutines spin or poll, as in the raw ping-pong.
		b.Run(idle.String()+"/handlers", func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			raw := rawPingPong(ctx, b, idle)
			ids := benchIDs(2)
			warm := max(b.N/10, 10)
			pi := &chainPinger{peer: ids[1], buf: make([]byte, 64), rtts: make([]time.Duration, 0, warm+b.N), done: make(chan struct{})}
			po := &ponger{peer: ids[0], buf: make([]byte, 64)}
			ms := openBench(b, ids, func(i int, c *engine.Config) {
				c.Agent.Idle = idle
				c.Handler = []engine.Handler{pi, po}[i]
			})
			pi.m = ms[0]
			po.m.Store(ms[1])
			runtime.GC() // as above
			b.ResetTimer()
			pi.sentAt = time.Now()
			for ms[0].TrySend(pi.buf) != nil {
			}
			select {
			case <-pi.done:
			case <-ctx.Done():
				b.Fatalf("%d of %d round trips", len(pi.rtts), cap(pi.rtts))
			}
			b.StopTimer()
			reportPingPong(b, slices.Clone(pi.rtts[warm:]), raw)
		})
		if idle == engine.IdleBlock {
			continue
		}
		// The application's goroutine in the loop as in the first
		// variant, with ThreadingInvoked: it runs its member's agent
		// (DoWork) while it waits for the pong, and a second goroutine
		// runs the other member's, whose handler answers; two goroutines
		// as in the raw ping-pong. Between idle DoWork calls both spin,
		// or yield with IdleYield.
		b.Run(idle.String()+"/invoked", func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			raw := rawPingPong(ctx, b, idle)
			ms, pi := pingPongPair(b, func(c *engine.Config) { c.Agent.Threading = engine.ThreadingInvoked })
			defer bench.DriveInvoked(ms[1], idle)()
			ping := make([]byte, 64)
			warm := max(b.N/10, 10)
			rtts := make([]time.Duration, 0, b.N)
			runtime.GC() // as above
			b.ResetTimer()
			for i := 1; i <= warm+b.N; i++ {
				t0 := time.Now()
				for ms[0].TrySend(ping) != nil {
					ms[0].DoWork()
				}
				for pi.got.Load() < uint64(i) {
					if ms[0].DoWork() == 0 && idle == engine.IdleYield {
						runtime.Gosched()
					}
				}
				if i > warm {
					rtts = append(rtts, time.Since(t0))
				}
			}
			b.StopTimer()
			reportPingPong(b, rtts, raw)
		})
	}
}

// pingPongPair opens member A, whose pinger notes B's pongs, and member B,
// whose ponger answers each of A's messages from its handler; mod sets
// both configs.
func pingPongPair(b *testing.B, mod func(c *engine.Config)) ([]*engine.Member, *pinger) {
	ids := benchIDs(2)
	pi := &pinger{peer: ids[1]}
	po := &ponger{peer: ids[0], buf: make([]byte, 64)}
	ms := openBench(b, ids, func(i int, c *engine.Config) {
		mod(c)
		c.Handler = []engine.Handler{pi, po}[i]
	})
	po.m.Store(ms[1])
	return ms, pi
}

// rawPingPong runs the raw ping-pong a ping-pong variant is compared with:
// as many round trips, the matching idle strategy (IdleSpin: busy polls).
func rawPingPong(ctx context.Context, b *testing.B, idle engine.IdleStrategy) bench.PingPongResult {
	raw, err := bench.RunRawPingPong(ctx, bench.PingPongConfig{Group: benchGroup(), Count: max(b.N, 100), Multicast: true, BusyPoll: idle == engine.IdleSpin})
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

// reportPingPong reports the p50 and p99 of rtts beside the raw ping-pong's.
func reportPingPong(b *testing.B, rtts []time.Duration, raw bench.PingPongResult) {
	slices.Sort(rtts)
	p50, p99 := rtts[len(rtts)/2], rtts[len(rtts)*99/100]
	b.ReportMetric(float64(p50)/1e3, "p50-us")
	b.ReportMetric(float64(p99)/1e3, "p99-us")
	b.ReportMetric(float64(raw.P50)/1e3, "raw-p50-us")
	b.ReportMetric(float64(raw.P99)/1e3, "raw-p99-us")
	b.ReportMetric(float64(p50)/float64(raw.P50), "p50-engine/raw")
	b.ReportMetric(float64(p99)/float64(raw.P99), "p99-engine/raw")
}

// cpuTime is the process's user+system CPU time so far: CPU per message is
// a steadier measure than wall time on a shared machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
