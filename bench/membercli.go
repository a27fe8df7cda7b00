package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/nakcast/nakcast/ebpf"
	"github.com/nakcast/nakcast/engine"
)

// ErrUsage is wrapped by MemberMain's errors about its command line (the
// command exits with status 2 for them).
var ErrUsage = errors.New("usage")

// ReadyLine is what a member process started with -wait-start prints on
// stdout once it is open; it then waits for a line on stdin before
// sending.
const ReadyLine = "READY"

// MemberArgs returns the command-line flags that make MemberMain run cfg
// (hooks and the logger are not carried), writing its result to out.
func MemberArgs(cfg MemberConfig, out string, waitStart bool) []string {
	senders := make([]string, len(cfg.Senders))
	for i, s := range cfg.Senders {
		senders[i] = strconv.Itoa(s)
	}
	a := []string{
		"-run-id", strconv.FormatUint(cfg.RunID, 10),
		"-index", strconv.Itoa(cfg.Index),
		"-members", strconv.Itoa(cfg.Members),
		"-senders", strings.Join(senders, ","),
		"-group", cfg.Group.String(),
		"-size", strconv.Itoa(cfg.MsgSize),
		"-count", strconv.FormatInt(cfg.Count, 10),
		"-duration", cfg.Duration.String(),
		"-rate", strconv.FormatFloat(cfg.Rate, 'g', -1, 64),
		"-loss", strconv.FormatFloat(cfg.LossRate, 'g', -1, 64),
		"-idle", cfg.Agent.Idle.String(),
		"-threading", cfg.Agent.Threading.String(),
		"-sample", strconv.Itoa(cfg.SampleEvery),
		"-out", out,
	}
	if cfg.SendBatch > 1 {
		a = append(a, "-batch", strconv.Itoa(cfg.SendBatch))
	}
	if cfg.DiscardOwn {
		a = append(a, "-discard-own")
	}
	if cfg.Agent.ExclusiveSender {
		a = append(a, "-exclusive-sender")
	}
	if cfg.Transport.Backend != "" {
		a = append(a, "-transport", cfg.Transport.Backend)
	}
	if cfg.Tuning.MaxDatagram != 0 {
		a = append(a, "-datagram", strconv.Itoa(cfg.Tuning.MaxDatagram))
	}
	if cfg.Tuning.BundleBytes != 0 {
		a = append(a, "-bundle-bytes", strconv.Itoa(cfg.Tuning.BundleBytes))
	}
	if cfg.Transport.NoLoopback {
		a = append(a, "-no-loopback")
	}
	if cfg.Transport.NoGSO {
		a = append(a, "-no-gso")
	}
	if cfg.Transport.XDP.Mode != "" {
		a = append(a, "-xdp-mode", cfg.Transport.XDP.Mode)
	}
	if !cfg.Dynamic {
		a = append(a, "-static")
	}
	if cfg.Join {
		a = append(a, "-join")
	}
	if d := cfg.Membership.SuspectTimeout; d != 0 {
		a = append(a, "-suspect-timeout", d.String())
	}
	a = appendAuthArgs(a, cfg.KeyFile, cfg.Encrypt, cfg.Insecure)
	if len(cfg.Membership.MemberAddrs) > 0 {
		addrs := make([]string, len(cfg.Membership.MemberAddrs))
		for i, ad := range cfg.Membership.MemberAddrs {
			addrs[i] = ad.String()
		}
		a = append(a, "-addrs", strings.Join(addrs, ","))
	}
	return appendProcessArgs(a, cfg.Interface, cfg.Network.Unicast, cfg.Network.TTL, cfg.Timeout, waitStart)
}

// MemberMain is the member process (mcastbench member): it parses args,
// runs one member with RunMember and writes its MemberResult as JSON to the
// -out file (or stdout). Errors about the command line wrap ErrUsage. A
// result is written whenever the member opened, also for a failed run.
func MemberMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	cfg, out, waitStart, err := parseMemberArgs(args, stderr)
	if err != nil {
		return err
	}
	if waitStart {
		ready, start := readyThenGo(stdout, stdin)
		cfg.Ready = func(*engine.Member) { ready() }
		cfg.Start = start
	}
	res, runErr := RunMember(ctx, cfg)
	if res.Schema == "" {
		return runErr // never opened: nothing to report
	}
	return errors.Join(runErr, writeResult(stdout, out, res))
}

// parseMemberArgs is MemberMain's command line: the member's config (its
// engine config validated), the result file and -wait-start.
func parseMemberArgs(args []string, stderr io.Writer) (cfg MemberConfig, out string, waitStart bool, err error) {
	fs := flag.NewFlagSet("mcastbench member", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: mcastbench member -group ADDR:PORT [flags]\n\nOne engine member as its own process; writes its result as JSON (schema %s).\nEvery member of a run must get the same -run-id, -members, -senders, -group and -static.\nMembership is automatic (discovery, join, failure detection, leave) unless -static: each member\nwaits until its view holds -members members before it sends, and its result lists the views\nit installed and the events it got (suspect, lost, lagging, left) with their times.\n\nflags:\n", MemberSchema)
		fs.PrintDefaults()
	}
	runID := fs.Uint64("run-id", 0x6e616b6300000000, "base of the run's member identities (same in every member)")
	index := fs.Int("index", 0, "this member's position in the view (0 is the coordinator)")
	members := fs.Int("members", 1, "view size")
	senders := fs.String("senders", "0", "indexes of the sending members, comma-separated")
	group := fs.String("group", "", "multicast group ADDR:PORT (required): IPv4 in 239.0.0.0/8, or IPv6 in ff01::/16, ff02::/16, ff11::/16 or ff12::/16 written [ADDR]:PORT")
	iface := fs.String("interface", "lo", "interface")
	unicast := fs.String("unicast", "", "unicast bind address ADDR:PORT (default 127.0.0.1:0 or [::1]:0; required off loopback unless -addrs names it)")
	ttl := fs.Int("ttl", 0, "multicast TTL (0 on loopback, 1 on a bridge)")
	size := fs.Int("size", 64, "message size in bytes")
	count := fs.Int64("count", 0, "messages to send (0: send for -duration)")
	duration := fs.Duration("duration", 2*time.Second, "how long to send when -count is 0")
	rate := fs.Float64("rate", 0, "messages per second each sender sends, paced (0: as fast as it can)")
	loss := fs.Float64("loss", 0, "fraction of received datagrams dropped before the protocol")
	idle := fs.String("idle", "block", "idle strategy: block, yield or spin")
	threading := fs.String("threading", "shared", "agent goroutines: shared (one), dedicated (sender and receiver) or invoked (the harness runs DoWork)")
	transport := fs.String("transport", "udp", "transport: udp")
	datagram := fs.Int("datagram", 0, "largest datagram (0: interface MTU less headers)")
	bundle := fs.Int("bundle-bytes", 0, "bundling limit in bytes (0: the datagram size)")
	sample := fs.Int("sample", 1, "record the latency of one message in N")
	batch := fs.Int("batch", 0, "send with SendBatch, this many messages a call (0 or 1: Send per message)")
	timeout := fs.Duration("timeout", 0, "give up this long after sending starts (0: -duration or 10s, plus 30s)")
	discardOwn := fs.Bool("discard-own", false, "a sender does not deliver its own messages (engine.Config.DiscardOwn); it records what it sent instead")
	exclusive := fs.Bool("exclusive-sender", false, "one goroutine sends (engine.Config.Agent.ExclusiveSender): the log buffer claims and commits without atomic read-modify-writes")
	noGSO := fs.Bool("no-gso", false, "UDP segmentation offload off (engine.Config.Transport.NoGSO)")
	xdpMode := fs.String("xdp-mode", "", "with -transport xdp: where the XDP program attaches, native or generic (default: native where the driver can)")
	noLoop := fs.Bool("no-loopback", false, "multicast loopback off (engine.Config.Transport.NoLoopback): only for a member alone in its host or namespace")
	keyFile := fs.String("key-file", "", "group key file (lines \"ID HEX\", current key first; engine.Config.Keys): authenticated datagrams")
	encrypt := fs.Bool("encrypt", false, "with -key-file, also encrypt datagram bodies (engine.Config.Encrypt)")
	insecure := fs.Bool("insecure", false, "open mode off loopback: datagrams not authenticated (engine.Config.Insecure)")
	addrs := fs.String("addrs", "", "every member's unicast ADDR:PORT in index order, comma-separated: with -static engine.Config.Membership.MemberAddrs (default: bound on first contact), else the others' are Membership.InitialHosts (default: multicast discovery)")
	static := fs.Bool("static", false, "a fixed view of -members members (engine.Config.Membership.Members: nobody joins, leaves or is excluded) instead of automatic membership (discovery, join, failure detection, leave)")
	join := fs.Bool("join", false, "join a group already running (a restarted member): wait only until the view holds this member and one other, then deliver from the join point on")
	suspect := fs.Duration("suspect-timeout", 0, "silence before a member is probed and suspected (engine.Config.Membership.SuspectTimeout; 0: the default)")
	outFile := fs.String("out", "-", "result file (- for stdout)")
	wait := fs.Bool("wait-start", false, "print "+ReadyLine+" once open, then wait for a line on stdin before sending")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, "", false, err
		}
		return cfg, "", false, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	bad := func(format string, a ...any) (MemberConfig, string, bool, error) {
		return MemberConfig{}, "", false, fmt.Errorf("%w: "+format, append([]any{ErrUsage}, a...)...)
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q", fs.Arg(0))
	}
	if *members < 1 || *members > maxMembers {
		return bad("-members %d: want 1..%d", *members, maxMembers)
	}
	if *size > engine.DefaultMaxMessage {
		return bad("-size %d: larger than the engine's largest message (engine.DefaultMaxMessage, %d bytes)", *size, engine.DefaultMaxMessage)
	}
	if *batch < 0 || *batch > maxSendBatch {
		return bad("-batch %d: want 0..%d", *batch, maxSendBatch)
	}
	cfg = MemberConfig{
		RunID:       *runID,
		Index:       *index,
		Members:     *members,
		MsgSize:     *size,
		Count:       *count,
		Duration:    *duration,
		Rate:        *rate,
		LossRate:    *loss,
		SampleEvery: *sample,
		Timeout:     *timeout,
		SendBatch:   *batch,
		Dynamic:     !*static,
		Join:        *join,
		Config:      engine.Config{Interface: *iface, Network: engine.NetworkConfig{TTL: *ttl}, Transport: engine.TransportConfig{Backend: *transport, NoLoopback: *noLoop, NoGSO: *noGSO, XDP: ebpf.Options{Mode: *xdpMode}}, Tuning: engine.TuningConfig{MaxDatagram: *datagram, BundleBytes: *bundle}, DiscardOwn: *discardOwn, Agent: engine.AgentConfig{ExclusiveSender: *exclusive}},
	}
	if cfg.Senders, err = parseInts(*senders); err != nil {
		return bad("-senders %q: %v", *senders, err)
	}
	if *group == "" {
		return bad("-group is required (ADDR:PORT: 239.0.0.0/8, or [ADDR]:PORT in ff01::/16, ff02::/16, ff11::/16 or ff12::/16)")
	}
	if cfg.Group, err = netip.ParseAddrPort(*group); err != nil {
		return bad("-group %q: %v", *group, err)
	}
	if *unicast != "" {
		if cfg.Network.Unicast, err = netip.ParseAddrPort(*unicast); err != nil {
			return bad("-unicast %q: %v", *unicast, err)
		}
	}
	for _, a := range strings.Split(*addrs, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		ap, err := netip.ParseAddrPort(a)
		if err != nil {
			return bad("-addrs %q: %v", a, err)
		}
		cfg.Membership.MemberAddrs = append(cfg.Membership.MemberAddrs, ap)
	}
	cfg.Network.AllowNonLoopback = *iface != "lo"
	if cfg.Network.AllowNonLoopback && *unicast == "" && len(cfg.Membership.MemberAddrs) == 0 {
		return bad("-interface %s: -unicast ADDR:PORT is required off loopback (this member's address on %s; the default binds 127.0.0.1, where the others cannot reach it)", *iface, *iface)
	}
	cfg.Encrypt, cfg.Insecure = *encrypt, *insecure
	cfg.Membership.SuspectTimeout = *suspect
	if cfg.Join && !cfg.Dynamic {
		return bad("-join needs automatic membership: a fixed view (-static) has no join")
	}
	if cfg.Keys, cfg.KeyFile, err = ReadKeyFile(*keyFile); err != nil {
		return bad("-key-file: %v", err)
	}
	if cfg.Agent.Idle, err = engine.ParseIdleStrategy(*idle); err != nil {
		return bad("-idle: %v", err)
	}
	if cfg.Agent.Threading, err = engine.ParseThreading(*threading); err != nil {
		return bad("-threading: %v", err)
	}
	if _, err := cfg.withDefaults(); err != nil {
		return MemberConfig{}, "", false, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	ec, _ := cfg.engineConfig(nil)
	if err := ec.Validate(); err != nil {
		return bad("%v", err)
	}
	return cfg, *outFile, *wait, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		v, err := strconv.Atoi(p)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("want at least one index")
	}
	return out, nil
}

// maxSendBatch bounds -batch.
const maxSendBatch = 4096
