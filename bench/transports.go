package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nakcast/nakcast/ebpf"
	"github.com/nakcast/nakcast/engine"
)

// Transport comparison (mcastbench netns -transport xdp,udp): the same
// group in the same namespaces, once per backend, repeated with the
// backends alternating so that the machine's other load falls on each
// alike, the figures the medians of the repeats.

// UDPWithOffloads names, in a comparison, the UDP backend with its
// segmentation offloads on whatever MemberConfig.Transport.NoGSO says: the backend
// as users run it by default, beside "udp" run like the others.
const UDPWithOffloads = "udp+gso"

// TransportCompareConfig configures CompareTransports.
type TransportCompareConfig struct {
	// Transports to compare: engine.TransportXDP, engine.TransportUDP,
	// UDPWithOffloads.
	Transports []string
	// Member is the members' template (Members, Senders, MsgSize,
	// Duration or Count, NoGSO, Idle, ...), as in NetnsRunConfig; its
	// Transport and, for UDPWithOffloads, NoGSO are set per backend.
	Member MemberConfig
	// Repeat is the number of rounds (default 3); PingCount the round
	// trips of each ping-pong (default 10000; -1: no ping-pong).
	Repeat    int
	PingCount int
	// Netns are the namespaces (made by SetupNetns; MTU 1500 for AF_XDP).
	// Exe runs a member ({exe, "member"}), PingExe a ping-pong member
	// ({exe, "pingpong-member"}), RawExe a raw bundler member ({exe,
	// "raw-member"}; nil: no raw runs).
	Netns    *Netns
	Exe      []string
	PingExe  []string
	RawExe   []string
	Env      []string
	Progress func(string)
}

// TransportSample is one run of one backend.
type TransportSample struct {
	MsgsPerSec float64 `json:"msgs_per_sec"`
	// RecvCPUNs is the receivers' process CPU per datagram they read;
	// GroupCPUNs every member's process CPU (the sender's includes the
	// kernel's forwarding through veth and bridge) per datagram read by
	// the receivers.
	RecvCPUNs  float64 `json:"recv_cpu_ns"`
	GroupCPUNs float64 `json:"group_cpu_ns"`
	PingP50Ns  int64   `json:"ping_p50_ns"`
	PingP99Ns  int64   `json:"ping_p99_ns"`
	Retrans    uint64  `json:"retransmitted"`
	// RawMsgsPerSec and RawRecvCPUNs are the raw bundler's over the same
	// backend (the transport alone: no reliability, no engine).
	RawMsgsPerSec float64 `json:"raw_msgs_per_sec"`
	RawRecvCPUNs  float64 `json:"raw_recv_cpu_ns"`
	Verified      bool    `json:"verified"`
	Note          string  `json:"note,omitempty"`
}

// TransportFigures are one backend's medians over the repeats.
type TransportFigures struct {
	Transport string `json:"transport"`
	// Mode is the AF_XDP attach mode seen ("native", "generic"), empty
	// for UDP.
	Mode    string            `json:"mode,omitempty"`
	Median  TransportSample   `json:"median"`
	Samples []TransportSample `json:"samples"`
}

// CompareTransports runs the comparison: Repeat rounds, each a
// throughput run (RunNetns) and a ping-pong (RunNetnsPingPong) per
// backend in the order given.
func CompareTransports(ctx context.Context, cfg TransportCompareConfig) ([]TransportFigures, error) {
	if cfg.Repeat == 0 {
		cfg.Repeat = 3
	}
	if cfg.PingCount == 0 {
		cfg.PingCount = 10000
	}
	figs := make([]TransportFigures, len(cfg.Transports))
	for i, tr := range cfg.Transports {
		figs[i].Transport = tr
	}
	progress := progressFunc(cfg.Progress)
	for round := range cfg.Repeat {
		for i, tr := range cfg.Transports {
			if err := ctx.Err(); err != nil {
				return figs, err
			}
			progress(fmt.Sprintf("round %d of %d: %s", round+1, cfg.Repeat, tr))
			s, mode, err := compareRun(ctx, cfg, tr)
			if err != nil {
				return figs, fmt.Errorf("%s: %w", tr, err)
			}
			figs[i].Samples = append(figs[i].Samples, s)
			figs[i].Mode = mode
		}
	}
	for i := range figs {
		figs[i].Median = medianSample(figs[i].Samples)
	}
	return figs, nil
}

// compareRun is one backend's throughput run and ping-pong.
func compareRun(ctx context.Context, cfg TransportCompareConfig, tr string) (TransportSample, string, error) {
	mc := cfg.Member
	mc.Transport.Backend = tr
	if tr == UDPWithOffloads {
		mc.Transport.Backend, mc.Transport.NoGSO = engine.TransportUDP, false
	}
	rs, err := RunNetns(ctx, NetnsRunConfig{Member: mc, Netns: cfg.Netns, Exe: cfg.Exe, Env: cfg.Env, Progress: cfg.Progress})
	if len(rs) == 0 {
		return TransportSample{}, "", err
	}
	row := GroupRow("", "", rs, 0)
	s := TransportSample{MsgsPerSec: row.MsgsPerSec, Retrans: row.Retransmitted, Verified: row.Verified && err == nil, Note: row.Note}
	var recvCPU, allCPU int64
	var in uint64
	mode := ""
	for _, r := range rs {
		allCPU += r.CPUNs
		if r.Role != "send" {
			recvCPU += r.CPUNs
			in += r.DatagramsIn
		}
		mode = max(mode, r.Stats.Socket.XDP.Mode)
	}
	if in > 0 {
		s.RecvCPUNs, s.GroupCPUNs = float64(recvCPU)/float64(in), float64(allCPU)/float64(in)
	}
	if err != nil && s.Note == "" {
		s.Note = err.Error()
	}
	if len(cfg.RawExe) > 0 {
		rc := RawConfig{MsgSize: mc.MsgSize, DatagramSize: cfg.Netns.MTU - 28, Duration: mc.Duration, Count: mc.Count,
			Batch: engine.DefaultBatchSize, NoGSO: mc.Transport.NoGSO, Transport: mc.Transport.Backend}
		raw, _, err := RunNetnsRaw(ctx, NetnsRawConfig{Raw: rc, Members: mc.Members, Netns: cfg.Netns, Exe: cfg.RawExe, Env: cfg.Env, Progress: cfg.Progress})
		if err != nil {
			return s, mode, fmt.Errorf("raw bundler: %w", err)
		}
		s.RawMsgsPerSec, s.RawRecvCPUNs = raw.MsgsPerSec, raw.RecvCPUNs
	}
	if cfg.PingCount > 0 {
		tc := engine.TransportConfig{Backend: mc.Transport.Backend, NoGSO: mc.Transport.NoGSO}
		tc.XDP.Mode = mc.Transport.XDP.Mode
		pm := MemberConfig{MsgSize: mc.MsgSize, KeyFile: mc.KeyFile,
			Config: engine.Config{Transport: tc, Keys: mc.Keys, Encrypt: mc.Encrypt, Insecure: mc.Insecure}}
		pp, err := RunNetnsPingPong(ctx, NetnsPingPongConfig{Member: pm, Count: cfg.PingCount, Warmup: compareWarmup(cfg.PingCount), Netns: cfg.Netns,
			Exe: cfg.PingExe, Env: cfg.Env, Progress: cfg.Progress})
		if err != nil {
			return s, mode, fmt.Errorf("ping-pong: %w", err)
		}
		s.PingP50Ns, s.PingP99Ns = pp.RTT.P50Ns, pp.RTT.P99Ns
	}
	return s, mode, nil
}

// compareWarmup is the ping-pong's warm-up in a comparison: the usual
// tenth of the count plus one pass over an AF_XDP member's fill ring
// (ebpf.DefaultFrames round trips). A fresh AF_XDP member's receive frames
// are slower on first use (docs/xdp.md, "The start-up transient"): with the
// usual warm-up alone the ping-pong measures that transient rather than the
// steady state. The UDP rows get the same warm-up, so both backends are
// measured alike.
func compareWarmup(count int) int { return count/10 + ebpf.DefaultFrames }

// medianSample takes each figure's median over samples (the upper one of
// an even count); Verified only if every sample was.
func medianSample(ss []TransportSample) TransportSample {
	if len(ss) == 0 {
		return TransportSample{}
	}
	med := func(f func(TransportSample) float64) float64 {
		v := make([]float64, len(ss))
		for i, s := range ss {
			v[i] = f(s)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	m := TransportSample{Verified: true}
	m.MsgsPerSec = med(func(s TransportSample) float64 { return s.MsgsPerSec })
	m.RecvCPUNs = med(func(s TransportSample) float64 { return s.RecvCPUNs })
	m.GroupCPUNs = med(func(s TransportSample) float64 { return s.GroupCPUNs })
	m.PingP50Ns = int64(med(func(s TransportSample) float64 { return float64(s.PingP50Ns) }))
	m.PingP99Ns = int64(med(func(s TransportSample) float64 { return float64(s.PingP99Ns) }))
	m.Retrans = uint64(med(func(s TransportSample) float64 { return float64(s.Retrans) }))
	m.RawMsgsPerSec = med(func(s TransportSample) float64 { return s.RawMsgsPerSec })
	m.RawRecvCPUNs = med(func(s TransportSample) float64 { return s.RawRecvCPUNs })
	for _, s := range ss {
		m.Verified = m.Verified && s.Verified
	}
	return m
}

// WriteTransportTable writes the medians, one line per backend, then the
// AF_XDP backend's ratios to each UDP one (with the targets).
func WriteTransportTable(w io.Writer, figs []TransportFigures) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%9s %8s %5s %9s %13s %14s %9s %9s %8s %9s %11s %13s\n", "transport", "mode", "runs", "msgs/s", "recv CPU/dgm",
		"group CPU/dgm", "ping p50", "ping p99", "retrans", "verified", "raw msgs/s", "raw recv CPU")
	for _, f := range figs {
		m := f.Median
		fmt.Fprintf(&b, "%9s %8s %5d %9s %13s %14s %9s %9s %8d %9s %11s %13s\n", f.Transport, dash(f.Mode), len(f.Samples),
			FormatRate(m.MsgsPerSec), nsString(m.RecvCPUNs), nsString(m.GroupCPUNs),
			FormatDuration(time.Duration(m.PingP50Ns)), FormatDuration(time.Duration(m.PingP99Ns)), m.Retrans, yesNo(m.Verified),
			FormatRate(m.RawMsgsPerSec), nsString(m.RawRecvCPUNs))
	}
	x := slices.IndexFunc(figs, func(f TransportFigures) bool { return f.Transport == engine.TransportXDP })
	for _, u := range figs {
		if x < 0 || u.Transport == engine.TransportXDP {
			continue
		}
		a, o := figs[x].Median, u.Median
		fmt.Fprintf(&b, "xdp vs %s: msgs/s %s (target >= 1.30x), recv CPU/datagram %s (target <= 0.60x), group CPU/datagram %s, ping p50 %s (target <= 0.80x), p99 %s\n",
			u.Transport, ratio(a.MsgsPerSec, o.MsgsPerSec), ratio(a.RecvCPUNs, o.RecvCPUNs), ratio(a.GroupCPUNs, o.GroupCPUNs),
			ratio(float64(a.PingP50Ns), float64(o.PingP50Ns)), ratio(float64(a.PingP99Ns), float64(o.PingP99Ns)))
		if a.RawMsgsPerSec > 0 {
			fmt.Fprintf(&b, "  raw bundler (the transport alone), xdp vs %s: msgs/s %s, recv CPU/datagram %s\n",
				u.Transport, ratio(a.RawMsgsPerSec, o.RawMsgsPerSec), ratio(a.RawRecvCPUNs, o.RawRecvCPUNs))
		}
	}
	for _, f := range figs {
		fmt.Fprintf(&b, "%s runs (msgs/s, recv CPU/dgm, ping p50):", f.Transport)
		for _, s := range f.Samples {
			fmt.Fprintf(&b, " %s/%s/%s", FormatRate(s.MsgsPerSec), nsString(s.RecvCPUNs), FormatDuration(time.Duration(s.PingP50Ns)))
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func ratio(a, b float64) string {
	if b <= 0 || a <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

func nsString(ns float64) string {
	if ns <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fus", ns/1e3)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(v bool) string {
	if v {
		return "yes"
	}
	return "NO"
}
