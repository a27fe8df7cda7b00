package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/nakcast/nakcast/bench"
	"github.com/nakcast/nakcast/engine"
	"github.com/nakcast/nakcast/engine/auth"
)

// loopbackDatagram is the datagram size of loopback runs: the IPv4 UDP
// maximum, what the engine uses on lo.
const loopbackDatagram = 65507

// runSuite is the default mode: 64 B and 1 KiB messages, one sender and
// two receivers on loopback, lossless and with 5% loss at the receivers,
// each beside the raw bundler with the same sizes, all in this run.
func runSuite(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("", "The default suite on loopback: 1 sender, 2 receivers, 64 B and 1 KiB messages in 64 KB datagrams,\nlossless and 5% loss at the receivers, beside the raw batched-UDP bundler measured in the same run.", stderr)
	var out outputFlags
	out.register(fs)
	out.registerPlot(fs)
	duration := fs.Duration("duration", 2*time.Second, "how long each measurement sends")
	sizes := fs.String("sizes", "64,1024", "message sizes in bytes, comma-separated")
	loss := fs.Float64("loss", 0.05, "loss injected at the receivers in the lossy case (0: skip that case)")
	keyFile := fs.String("key-file", "", "group key file for the signed and encrypted rows (lines \"ID HEX\"; default: a key generated for the run)")
	if err := parse(fs, args); err != nil {
		return err
	}
	keys, _, err := bench.ReadKeyFile(*keyFile)
	if err != nil {
		return usagef("-key-file: %v", err)
	}
	if err := out.check(); err != nil {
		return err
	}
	ss, err := intList(*sizes)
	if err != nil || len(ss) == 0 {
		return usagef("-sizes %q: want sizes in bytes separated by commas", *sizes)
	}
	for _, s := range ss {
		if s < bench.MinMsgSize || s > 60000 {
			return usagef("-sizes: %d: want %d..60000", s, bench.MinMsgSize)
		}
	}
	if *duration <= 0 || *duration > time.Hour {
		return usagef("-duration %v: want 0 < duration <= 1h", *duration)
	}
	if !(*loss >= 0 && *loss < 1) {
		return usagef("-loss %v: want 0 <= loss < 1", *loss)
	}
	fmt.Fprintf(stdout, "mcastbench: loopback, 1 sender -> 2 receivers, %v per measurement, %d cores, %s\n", *duration, runtime.NumCPU(), runtime.Version())
	rows, members, firstErr := loopbackSuite(ctx, ss, 2, *duration, *loss, keys, out.stats, stderr)
	if firstErr != nil && len(rows) == 0 {
		return firstErr
	}
	progressDone(stderr)
	bench.SetRatios(rows)
	if err := bench.WriteTable(stdout, rows); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "msgs/s and MB/s: slowest receiver; latency: send to delivery under full load (queueing included), all receivers, one message in 16;")
	fmt.Fprintln(stdout, "retrans: messages repaired; loss: messages a receiver never got; vs raw: nakcast msgs/s over the raw bundler's.")
	bench.WriteAuthCost(stdout, rows)
	if ctx.Err() != nil {
		fmt.Fprintln(stdout, "interrupted: the table holds what was measured so far")
	}
	if err := out.write(rows, members); err != nil {
		return err
	}
	return firstErr
}

// loopbackSuite measures, per message size, the raw bundler and nakcast
// (lossless, with loss at the receivers when loss > 0, then lossless with
// every datagram signed and encrypted under keys, or a key generated for
// the run), 1 sender and the given number of receivers on loopback with
// 64 KB datagrams.
func loopbackSuite(ctx context.Context, sizes []int, receivers int, duration time.Duration, loss float64, keys []engine.Key, statsEvery time.Duration, stderr io.Writer) ([]bench.Row, [][]bench.MemberResult, error) {
	var rows []bench.Row
	var members [][]bench.MemberResult
	var firstErr error
	if len(keys) == 0 {
		k, err := auth.GenerateKey(1)
		if err != nil {
			return nil, nil, err
		}
		keys = []engine.Key{k}
	}
	for _, size := range sizes {
		if ctx.Err() != nil {
			break
		}
		rawCfg := bench.RawConfig{MsgSize: size, DatagramSize: loopbackDatagram, Duration: duration, Receivers: receivers, Batch: engine.DefaultBatchSize}
		progress(stderr, fmt.Sprintf("raw %s", bench.FormatBytes(size)))
		raw, err := bench.RunRaw(ctx, rawCfg)
		if err != nil {
			return rows, members, fmt.Errorf("raw baseline %d B: %w", size, err)
		}
		rows = append(rows, bench.RawRow("loopback", rawCfg, raw))
		cases := []suiteCase{{name: caseName(0)}}
		if loss > 0 {
			cases = append(cases, suiteCase{name: caseName(loss), loss: loss})
		}
		cases = append(cases, suiteCase{name: bench.CaseSigned, keys: keys}, suiteCase{name: bench.CaseEncrypted, keys: keys, encrypt: true})
		for _, sc := range cases {
			if ctx.Err() != nil {
				break
			}
			cfg := bench.MemberConfig{
				Members:     receivers + 1,
				MsgSize:     size,
				Duration:    duration,
				SampleEvery: sampleEvery(0),
				Config:      engine.Config{Interface: "lo", Keys: sc.keys, Encrypt: sc.encrypt},
			}
			l, name := sc.loss, sc.name
			cpu0 := bench.ProcessCPU()
			rs, err := runGroup(ctx, cfg, l, fmt.Sprintf("nakcast %s %s", bench.FormatBytes(size), name), statsEvery, stderr)
			cpu := bench.ProcessCPU() - cpu0
			if err != nil && firstErr == nil && ctx.Err() == nil {
				firstErr = fmt.Errorf("nakcast %d B %s: %w", size, name, err)
			}
			row := bench.GroupRow("loopback", name, rs, loopbackDatagram)
			var sent int64
			for _, r := range rs {
				sent += r.Sent
			}
			if sent > 0 {
				row.CPUNsPerMsg = float64(cpu.Nanoseconds()) / float64(sent)
			}
			rows = append(rows, row)
			members = append(members, rs)
		}
	}
	progressDone(stderr)
	return rows, members, firstErr
}

// suiteCase is one nakcast row of a size in the loopback suite.
type suiteCase struct {
	name    string
	loss    float64
	keys    []engine.Key
	encrypt bool
}

func caseName(loss float64) string {
	if loss == 0 {
		return "lossless"
	}
	return fmt.Sprintf("loss %g%%", loss*100)
}

// runGroup runs one in-process group with loss injected at the receivers,
// showing progress and, every statsEvery, the counters.
func runGroup(ctx context.Context, cfg bench.MemberConfig, loss float64, label string, statsEvery time.Duration, stderr io.Writer) ([]bench.MemberResult, error) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	senders := map[int]bool{}
	for _, s := range cfg.Senders {
		senders[s] = true
	}
	if len(senders) == 0 {
		senders[0] = true
	}
	return bench.RunGroup(ctx, cfg, func(i int, c *bench.MemberConfig) {
		if !senders[i] {
			c.LossRate = loss
		}
	}, func(ms []*engine.Member) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			watch(ms, label, statsEvery, stop, stderr)
		}()
	})
}

// watch prints a progress line twice a second (on a terminal) and the
// counters every statsEvery.
func watch(ms []*engine.Member, label string, statsEvery time.Duration, stop <-chan struct{}, stderr io.Writer) {
	start := time.Now()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var statsC <-chan time.Time
	if statsEvery > 0 {
		st := time.NewTicker(statsEvery)
		defer st.Stop()
		statsC = st.C
	}
	prev := make([]engine.Stats, len(ms))
	prevT := start
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if isTerminal(stderr) {
				var sent, minDel uint64
				for i, m := range ms {
					s := m.Stats()
					sent += s.Sent
					if i == 0 || s.Delivered < minDel {
						minDel = s.Delivered
					}
				}
				fmt.Fprintf(stderr, "\r\033[K%s: %4.1fs sent %s delivered (slowest) %s", label, time.Since(start).Seconds(),
					bench.FormatRate(float64(sent)), bench.FormatRate(float64(minDel)))
			}
		case now := <-statsC:
			dt := now.Sub(prevT).Seconds()
			prevT = now
			progressDone(stderr)
			for i, m := range ms {
				s := m.Stats()
				p := prev[i]
				fmt.Fprintf(stderr, "stats %s member %d: sent %s/s delivered %s/s retrans %d naks %d/%d lost-ranges %d backlog %d bp-waits %d flow-waits %d agent-busy %d peer-wakes %d drops full %d nobuf %d\n",
					label, i, bench.FormatRate(float64(s.Sent-p.Sent)/dt), bench.FormatRate(float64(s.Delivered-p.Delivered)/dt),
					s.Retransmitted, s.NakSent, s.NakReceived, s.LostRanges, s.Backlog, s.BackPressureWaits, s.FlowControlWaits,
					s.AgentBusy, s.PeerWakes, s.Drops.RingFull, s.Drops.NoBuffer)
				prev[i] = s
			}
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func progress(w io.Writer, label string) {
	if isTerminal(w) {
		fmt.Fprintf(w, "\r\033[K%s ...", label)
	}
}

func progressDone(w io.Writer) {
	if isTerminal(w) {
		fmt.Fprint(w, "\r\033[K")
	}
}

// runThroughput is one configurable nakcast run in this process beside
// its raw baseline.
func runThroughput(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("throughput", "One nakcast throughput run, all members in this process, beside the raw bundler\n(same message and datagram sizes, same receivers) measured in the same run.", stderr)
	var ef engineFlags
	var out outputFlags
	ef.register(fs, 3, 3*time.Second)
	out.register(fs)
	out.registerPlot(fs)
	noRaw := fs.Bool("noraw", false, "skip the raw baseline")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := ef.check(); err != nil {
		return err
	}
	if err := out.check(); err != nil {
		return err
	}
	cfg := ef.memberConfig()
	datagram := ef.datagram
	if datagram == 0 {
		datagram = loopbackDatagram
		if ef.iface != "lo" {
			datagram = 1472
		}
	}
	path := gsoPath("loopback", ef.noGSO)
	var rows []bench.Row
	if !*noRaw && ef.members > 1 {
		rc := bench.RawConfig{Interface: ef.iface, MsgSize: ef.size, DatagramSize: datagram, Duration: ef.duration, Count: ef.count,
			Receivers: ef.members - 1, Batch: engine.DefaultBatchSize, NoGSO: ef.noGSO}
		progress(stderr, "raw")
		raw, err := bench.RunRaw(ctx, rc)
		if err != nil {
			return fmt.Errorf("raw baseline: %w", err)
		}
		rows = append(rows, bench.RawRow(path, rc, raw))
	}
	rs, err := runGroup(ctx, cfg, ef.loss, "nakcast", out.stats, stderr)
	progressDone(stderr)
	if len(rs) > 0 && rs[0].Schema != "" {
		rows = append(rows, bench.GroupRow(path, caseName(ef.loss), rs, datagram))
	}
	bench.SetRatios(rows)
	if werr := bench.WriteTable(stdout, rows); werr != nil {
		return werr
	}
	if werr := out.write(rows, [][]bench.MemberResult{rs}); werr != nil {
		return werr
	}
	return err
}

// runLatency is the ping-pong comparison.
func runLatency(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("latency", "Ping-pong round trips of small messages between two members on loopback (shared-mode agents,\nor the agents on the pinging and answering goroutines with -threading invoked), beside a raw\nUDP multicast ping-pong on the same path with the matching idle strategy.", stderr)
	var out outputFlags
	out.register(fs)
	count := fs.Int("count", 20000, "round trips measured per idle strategy")
	size := fs.Int("size", 64, "ping and pong size in bytes")
	idles := fs.String("idle", "yield,spin", "idle strategies to measure, comma-separated (block, yield, spin)")
	iface := fs.String("interface", "lo", "interface (loopback only)")
	threading := fs.String("threading", "shared", "agents: shared (one goroutine each, the application's beside them) or invoked (run by the application's goroutines: DoWork)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *count < 1 {
		return usagef("-count %d: want >= 1", *count)
	}
	thr, err := parseThreading(*threading)
	if err != nil {
		return err
	}
	if thr == engine.ThreadingDedicated {
		return usagef("-threading dedicated: want shared or invoked (the ping-pong compares shared-mode agents)")
	}
	if *size < 8 || *size > 60000 {
		return usagef("-size %d: want 8..60000", *size)
	}
	var strategies []engine.IdleStrategy
	for _, s := range strings.Split(*idles, ",") {
		st, err := parseIdle(strings.TrimSpace(s))
		if err != nil {
			return err
		}
		strategies = append(strategies, st)
	}
	type result struct {
		Idle     string                `json:"idle"`
		Nakcast  bench.PingPongLatency `json:"nakcast"`
		Raw      bench.PingPongLatency `json:"raw"`
		P50Ratio float64               `json:"p50_ratio"`
		P99Ratio float64               `json:"p99_ratio"`
	}
	var results []result
	var runErr error
	for _, st := range strategies {
		if ctx.Err() != nil {
			break
		}
		progress(stderr, "raw ping-pong "+st.String())
		raw, err := bench.RunRawPingPong(ctx, bench.PingPongConfig{Group: bench.RandomGroup(), Interface: *iface, MsgSize: *size, Count: *count,
			Multicast: true, BusyPoll: st == engine.IdleSpin})
		if err != nil {
			runErr = fmt.Errorf("raw ping-pong (%v): %w", st, err)
			break
		}
		progress(stderr, "nakcast ping-pong "+st.String())
		nk, err := bench.RunEnginePingPong(ctx, bench.EnginePingPongConfig{Interface: *iface, MsgSize: *size, Count: *count, Idle: st, Threading: thr})
		if err != nil {
			runErr = fmt.Errorf("nakcast ping-pong (%v): %w", st, err)
			break
		}
		r := result{Idle: st.String(), Nakcast: nk, Raw: bench.RawPingPongLatency(raw)}
		if r.Raw.RTT.P50Ns > 0 {
			r.P50Ratio = float64(nk.RTT.P50Ns) / float64(r.Raw.RTT.P50Ns)
			r.P99Ratio = float64(nk.RTT.P99Ns) / float64(r.Raw.RTT.P99Ns)
		}
		results = append(results, r)
	}
	progressDone(stderr)
	fmt.Fprintf(stdout, "round trip of %d B on %s, %d round trips each, multicast both ways, %v agents\n", *size, *iface, *count, thr)
	fmt.Fprintf(stdout, "%-6s %-8s %9s %9s %9s %9s %9s\n", "idle", "what", "min", "p50", "p99", "p99.9", "max")
	for _, r := range results {
		for _, x := range []struct {
			n string
			l bench.Latency
		}{{"nakcast", r.Nakcast.RTT}, {"raw", r.Raw.RTT}} {
			d := func(ns int64) string { return bench.FormatDuration(time.Duration(ns)) }
			fmt.Fprintf(stdout, "%-6s %-8s %9s %9s %9s %9s %9s\n", r.Idle, x.n, d(x.l.MinNs), d(x.l.P50Ns), d(x.l.P99Ns), d(x.l.P999Ns), d(x.l.MaxNs))
		}
		fmt.Fprintf(stdout, "%-6s %-8s %9s %8.2fx %8.2fx\n", r.Idle, "ratio", "", r.P50Ratio, r.P99Ratio)
	}
	if out.jsonFile != "" {
		if err := writeFile(out.jsonFile, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(map[string]any{"schema": "nakcast.mcastbench.latency/1", "results": results})
		}); err != nil {
			return err
		}
	}
	return runErr
}

// runRawMode is the raw bundler alone.
func runRawMode(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("raw", "The raw baseline alone: messages packed into datagrams, sendmmsg out, recvmmsg in and every\nmessage parsed, no reliability, all in this process.", stderr)
	var out outputFlags
	out.register(fs)
	size := fs.Int("size", 64, "message size in bytes")
	datagram := fs.Int("datagram", loopbackDatagram, "datagram size in bytes")
	receivers := fs.Int("receivers", 1, "receiving sockets")
	duration := fs.Duration("duration", 2*time.Second, "how long the sender sends when -count is 0")
	count := fs.Int64("count", 0, "messages to send (0: send for -duration)")
	batch := fs.Int("batch", engine.DefaultBatchSize, "datagrams per sendmmsg/recvmmsg")
	iface := fs.String("interface", "lo", "interface (loopback)")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg := bench.RawConfig{Interface: *iface, MsgSize: *size, DatagramSize: *datagram, Receivers: *receivers, Duration: *duration, Count: *count, Batch: *batch}
	switch {
	case *count < 0:
		return usagef("-count %d: want >= 0", *count)
	case *count == 0 && *duration <= 0:
		return usagef("-duration %v: want > 0 when -count is 0", *duration)
	case *receivers < 1 || *receivers > 64:
		return usagef("-receivers %d: want 1..64", *receivers)
	case *batch < 1 || *batch > 1024:
		return usagef("-batch %d: want 1..1024", *batch)
	case *datagram < 15 || *datagram > loopbackDatagram:
		return usagef("-datagram %d: want 15..%d", *datagram, loopbackDatagram)
	case *size < 1 || *size > *datagram-14:
		return usagef("-size %d: want 1..%d for -datagram %d", *size, *datagram-14, *datagram)
	}
	progress(stderr, "raw")
	res, err := bench.RunRaw(ctx, cfg)
	progressDone(stderr)
	if err != nil {
		return err
	}
	rows := []bench.Row{bench.RawRow("loopback", cfg, res)}
	if err := bench.WriteTable(stdout, rows); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "sent %d msgs in %d datagrams (%d msgs/datagram) at %s msgs/s; receive buffer %d B\n",
		res.SentMsgs, res.SentDatagrams, res.MsgsPerDatagram, bench.FormatRate(res.SendMsgsPerSec), res.RecvBuffer)
	return out.write(rows, nil)
}
