package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/ebpf"
	"github.com/nakcast/nakcast/engine"
)

// NetnsPingPongConfig configures RunNetnsPingPong. Zero fields take the
// defaults named.
type NetnsPingPongConfig struct {
	// Member gives both members' Transport.Backend, Transport.NoGSO,
	// Transport.XDP.Mode, MsgSize (default 64) and Keys (or KeyFile),
	// Encrypt and Insecure (without Keys and Insecure the run generates a
	// group key); Agent.Idle and Agent.Threading are both members'
	// (default engine.IdleSpin and
	// engine.ThreadingInvoked: each process spins on one goroutine that
	// runs its agent, the lowest latency on a machine with few cores).
	// The rest is set per run.
	Member MemberConfig
	// Count round trips are measured (default 10000) after Warmup
	// (default Count/10); Timeout bounds the run (default 60 s).
	Count, Warmup int
	Timeout       time.Duration
	// Netns, MTU, Exe (for example {"/usr/bin/mcastbench",
	// "pingpong-member"}), Env and Progress are as in NetnsRunConfig.
	Netns    *Netns
	MTU      int
	Exe      []string
	Env      []string
	Progress func(string)
}

func (c NetnsPingPongConfig) withDefaults() NetnsPingPongConfig {
	if c.Member.Agent.Idle == 0 && c.Member.Agent.Threading == 0 {
		c.Member.Agent.Idle, c.Member.Agent.Threading = engine.IdleSpin, engine.ThreadingInvoked
	}
	pingPongDefaults(&c.Member.MsgSize, &c.Count, &c.Warmup, &c.Timeout)
	return c
}

// pingPongDefaults fills in a ping-pong's zero sizes and bounds: 64 B,
// 10000 round trips after a tenth as many, a minute.
func pingPongDefaults(msgSize, count, warmup *int, timeout *time.Duration) {
	if *msgSize == 0 {
		*msgSize = 64
	}
	if *count == 0 {
		*count = 10000
	}
	if *warmup == 0 {
		*warmup = *count / 10
	}
	if *timeout == 0 {
		*timeout = time.Minute
	}
}

// RunNetnsPingPong measures the round trip of messages between two member
// processes in namespaces 0 and 1 (multicast both ways, push delivery):
// member 0 sends a ping, member 1's handler answers with a pong, member 0
// times send to delivery of the pong. The processes start together like
// RunNetns's.
func RunNetnsPingPong(ctx context.Context, cfg NetnsPingPongConfig) (PingPongLatency, error) {
	if len(cfg.Exe) == 0 {
		return PingPongLatency{}, errors.New("bench: RunNetnsPingPong: Exe is empty")
	}
	cfg = cfg.withDefaults()
	progress := progressFunc(cfg.Progress)
	ns, done, err := useNetns(ctx, cfg.Netns, 2, cfg.MTU, progress)
	if err != nil {
		return PingPongLatency{}, err
	}
	defer done()
	dir, err := os.MkdirTemp("", "nakcast-netns-pingpong-")
	if err != nil {
		return PingPongLatency{}, err
	}
	defer os.RemoveAll(dir)
	mc := cfg.Member
	if err := netnsKeys(&mc, dir); err != nil {
		return PingPongLatency{}, err
	}
	runID := RandomRunID()
	specs := make([]procSpec, 2)
	for i := range specs {
		out := filepath.Join(dir, fmt.Sprintf("pingpong%d.json", i))
		a := []string{"-role", [2]string{"ping", "pong"}[i], "-run-id", strconv.FormatUint(runID, 10),
			"-group", NetnsGroup.String(), "-transport", mc.Transport.Backend, "-idle", mc.Agent.Idle.String(),
			"-threading", mc.Agent.Threading.String(), "-size", strconv.Itoa(mc.MsgSize),
			"-count", strconv.Itoa(cfg.Count), "-warmup", strconv.Itoa(cfg.Warmup), "-out", out}
		if mc.Transport.NoGSO {
			a = append(a, "-no-gso")
		}
		if mc.Transport.XDP.Mode != "" {
			a = append(a, "-xdp-mode", mc.Transport.XDP.Mode)
		}
		a = appendAuthArgs(a, mc.KeyFile, mc.Encrypt, mc.Insecure)
		a = appendProcessArgs(a, "eth0", netip.AddrPortFrom(ns.Addrs[i], 0), 1, cfg.Timeout, true)
		specs[i] = procSpec{argv: append(append([]string(nil), cfg.Exe...), a...), out: out}
	}
	if err := runNetnsProcs(ctx, ns, specs, cfg.Env, nil, progress); err != nil {
		return PingPongLatency{}, err
	}
	b, err := os.ReadFile(specs[0].out)
	if err != nil {
		return PingPongLatency{}, errors.New("bench: the pinging member wrote no result")
	}
	var res PingPongLatency
	if err := json.Unmarshal(b, &res); err != nil {
		return PingPongLatency{}, fmt.Errorf("bench: ping-pong result: %w", err)
	}
	return res, nil
}

// pingPongArgs is a ping-pong member process's command line.
type pingPongArgs struct {
	role                   string
	runID                  uint64
	cfg                    engine.Config
	msgSize, count, warmup int
	timeout                time.Duration
	out                    string
}

// PingPongMemberMain is one member of RunNetnsPingPong (mcastbench
// pingpong-member): -role ping times the round trips and writes them
// (PingPongLatency, JSON) to -out; -role pong answers every ping. Both
// print ReadyLine once open and start on the line that follows on stdin;
// both close once the last round trip is done. Errors about the command
// line wrap ErrUsage.
func PingPongMemberMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	a, err := parsePingPongArgs(args, stderr)
	if err != nil {
		return err
	}
	ids := []digest.Member{MemberID(a.runID, 0), MemberID(a.runID, 1)}
	pi := &pingHandler{peer: ids[1]}
	po := &pongHandler{peer: ids[0], buf: make([]byte, a.msgSize)}
	a.cfg.Membership.Members, a.cfg.Self, a.cfg.Handler = ids, ids[0], engine.Handler(pi)
	if a.role == "pong" {
		a.cfg.Self, a.cfg.Handler = ids[1], po
	}
	m, err := engine.Open(ctx, a.cfg)
	if err != nil {
		return fmt.Errorf("bench: ping-pong %s: %w", a.role, err)
	}
	po.m.Store(m)
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Close(cctx)
	}()
	ready, start := readyThenGo(stdout, stdin)
	ready()
	select {
	case <-start:
	case <-ctx.Done():
		return ctx.Err()
	}
	invoked := a.cfg.Agent.Threading == engine.ThreadingInvoked
	idle := func() {
		if invoked && m.DoWork() > 0 {
			return
		}
		if !invoked || a.cfg.Agent.Idle != engine.IdleSpin {
			runtime.Gosched()
		}
	}
	if a.role == "pong" {
		for po.answered.Load() < uint64(a.warmup+a.count) && ctx.Err() == nil {
			idle()
		}
		return ctx.Err()
	}
	res, err := pingLoop(ctx, m, pi, a.msgSize, a.warmup, a.count, a.timeout, idle)
	if err != nil {
		return err
	}
	return writeResult(stdout, a.out, res)
}

func parsePingPongArgs(args []string, stderr io.Writer) (pingPongArgs, error) {
	fs := flag.NewFlagSet("mcastbench pingpong-member", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var a pingPongArgs
	fs.StringVar(&a.role, "role", "", "ping (times round trips) or pong (answers)")
	fs.Uint64Var(&a.runID, "run-id", 0, "run id, the same in both processes")
	group := fs.String("group", "", "multicast group ADDR:PORT")
	transport := fs.String("transport", "udp", "udp, xdp or auto")
	idle := fs.String("idle", "spin", "idle strategy")
	threading := fs.String("threading", "invoked", "threading mode")
	fs.IntVar(&a.msgSize, "size", 64, "message size")
	fs.IntVar(&a.count, "count", 10000, "round trips measured")
	fs.IntVar(&a.warmup, "warmup", 1000, "round trips before measuring")
	noGSO := fs.Bool("no-gso", false, "UDP segmentation offloads off")
	xdpMode := fs.String("xdp-mode", "", "AF_XDP attach mode")
	iface := fs.String("interface", "lo", "interface")
	unicast := fs.String("unicast", "", "unicast ADDR:PORT")
	ttl := fs.Int("ttl", 0, "multicast TTL")
	fs.DurationVar(&a.timeout, "timeout", time.Minute, "bound on the run")
	keyFile := fs.String("key-file", "", "group key file (engine.Config.Keys)")
	encrypt := fs.Bool("encrypt", false, "with -key-file, also encrypt datagram bodies")
	insecure := fs.Bool("insecure", false, "open mode off loopback (engine.Config.Insecure)")
	fs.StringVar(&a.out, "out", "-", "result file (ping)")
	fs.Bool("wait-start", true, "wait for a line on stdin before starting (always)")
	bad := func(format string, args ...any) (pingPongArgs, error) {
		return a, fmt.Errorf("%w: "+format, append([]any{ErrUsage}, args...)...)
	}
	if err := fs.Parse(args); err != nil {
		return bad("%v", err)
	}
	var err error
	c := engine.Config{
		Interface: *iface,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Network:   engine.NetworkConfig{TTL: *ttl, AllowNonLoopback: *iface != "lo"},
		Transport: engine.TransportConfig{Backend: *transport, NoGSO: *noGSO, XDP: ebpf.Options{Mode: *xdpMode}, NoLoopback: *iface != "lo"},
	}
	if c.Group, err = netip.ParseAddrPort(*group); err != nil {
		return bad("-group %q: %v", *group, err)
	}
	if *unicast != "" {
		if c.Network.Unicast, err = netip.ParseAddrPort(*unicast); err != nil {
			return bad("-unicast %q: %v", *unicast, err)
		}
	}
	c.Encrypt, c.Insecure = *encrypt, *insecure
	if c.Keys, _, err = ReadKeyFile(*keyFile); err != nil {
		return bad("-key-file: %v", err)
	}
	if c.Agent.Idle, err = engine.ParseIdleStrategy(*idle); err != nil {
		return bad("-idle: %v", err)
	}
	if c.Agent.Threading, err = engine.ParseThreading(*threading); err != nil {
		return bad("-threading: %v", err)
	}
	switch {
	case a.role != "ping" && a.role != "pong":
		return bad("-role %q: want ping or pong", a.role)
	case a.runID == 0:
		return bad("-run-id: want a non-zero run id")
	case a.msgSize < 1 || a.count < 1 || a.warmup < 0:
		return bad("-size %d, -count %d, -warmup %d: want positive sizes and counts", a.msgSize, a.count, a.warmup)
	}
	a.cfg = c
	return a, nil
}
