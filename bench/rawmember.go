package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/nakcast/nakcast/ebpf"
	"github.com/nakcast/nakcast/engine"
	"github.com/nakcast/nakcast/engine/transport"
)

// RawMemberSchema names the JSON layout of RawMemberResult.
const RawMemberSchema = "nakcast.rawmember/1"

// RawMemberConfig is one process of a multi-process raw bundler run
// (RunNetnsRaw): the sender or one receiver.
type RawMemberConfig struct {
	// Raw gives the group (with its port: processes cannot share an
	// ephemeral one), interface, unicast address, TTL, sizes, Duration or
	// Count (sender), Batch, RecvBuffer and Drain (receiver). Receivers is
	// ignored.
	Raw RawConfig
	// Index is the member's number in the run (reported only).
	Index int
	// Send makes this member the sender; otherwise it receives.
	Send bool
	// Timeout bounds how long a receiver waits for the first datagram once
	// started (default the sending Duration or 10 s, plus 30 s).
	Timeout time.Duration
	// Ready, if set, is called once the sockets are open; Start, if set,
	// is waited on before sending or receiving.
	Ready func()
	Start <-chan struct{}
}

// RawMemberResult is what one raw member measured (schema RawMemberSchema).
// Times are CLOCK_MONOTONIC ns (Nanotime), comparable across processes on
// one host.
type RawMemberResult struct {
	Schema       string `json:"schema"`
	Index        int    `json:"index"`
	Role         string `json:"role"` // "send" or "receive"
	Group        string `json:"group"`
	Interface    string `json:"interface"`
	MsgSize      int    `json:"msg_size"`
	DatagramSize int    `json:"datagram_size"`
	// Sender: what it sent, from SendStartNs for SendNs.
	SentMsgs      int64 `json:"sent_msgs"`
	SentDatagrams int64 `json:"sent_datagrams"`
	SendStartNs   int64 `json:"send_start_ns"`
	SendNs        int64 `json:"send_ns"`
	// Receiver: what it got and parsed, and when the last datagram came.
	Msgs       int64  `json:"msgs"`
	Bytes      int64  `json:"bytes"`
	Datagrams  int64  `json:"datagrams"`
	Malformed  int64  `json:"malformed"`
	LastNs     int64  `json:"last_ns"`
	Checksum   uint64 `json:"checksum"`
	RecvBuffer int    `json:"recv_buffer"`
	// CPUNs is the receiver process's CPU time (user and system) over
	// its receiving.
	CPUNs int64 `json:"cpu_ns"`
	// Interrupted says the run was cancelled; Error is the first error.
	Interrupted bool   `json:"interrupted,omitempty"`
	Error       string `json:"error,omitempty"`
}

// RunRawMember runs one raw member: the sender sends like RunRaw's; a
// receiver reads and parses every datagram until none has come for Drain
// after the first, or ctx ends, or Timeout passes without any.
func RunRawMember(ctx context.Context, cfg RawMemberConfig) (RawMemberResult, error) {
	rc := cfg.Raw
	rc.Receivers = 1
	rc, err := rc.withDefaults()
	if err != nil {
		return RawMemberResult{}, err
	}
	if rc.Group.Port() == 0 {
		return RawMemberResult{}, errors.New("bench: raw member: the group needs a port (the processes of a run cannot share an ephemeral one)")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
		if rc.Duration > 0 {
			cfg.Timeout += rc.Duration
		} else {
			cfg.Timeout += 10 * time.Second
		}
	}
	res := RawMemberResult{Schema: RawMemberSchema, Index: cfg.Index, Role: "receive", Group: rc.Group.String(),
		Interface: rc.Interface, MsgSize: rc.MsgSize, DatagramSize: rc.DatagramSize}
	if cfg.Send {
		res.Role = "send"
	}
	t, info, err := rc.openTransport(cfg.Send)
	if err != nil {
		return RawMemberResult{}, fmt.Errorf("bench: raw member %d: %w", cfg.Index, err)
	}
	defer t.Close()
	res.RecvBuffer = info.GroupRecvBuffer
	if cfg.Ready != nil {
		cfg.Ready()
	}
	if cfg.Start != nil {
		select {
		case <-cfg.Start:
		case <-ctx.Done():
		}
	}
	if cfg.Send {
		res.SendStartNs = Nanotime()
		sent, err := sendRaw(ctx, t, rc)
		res.SendNs = Nanotime() - res.SendStartNs
		res.SentMsgs, res.SentDatagrams = sent.msgs, sent.datagrams
		res.Interrupted = ctx.Err() != nil
		if err != nil {
			err = fmt.Errorf("bench: raw member %d: send: %w", cfg.Index, err)
			res.Error = err.Error()
		}
		return res, err
	}

	cpu0 := ProcessCPU()
	r := &rawReceiver{t: t}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.run(rc, 0) // last: absolute Nanotime
	}()
	deadline := time.Now().Add(cfg.Timeout)
	lastProgress, lastCount := time.Now(), int64(0)
	timedOut := false
	for {
		n := r.datagrams.Load() + r.malformed.Load()
		if n != lastCount {
			lastCount, lastProgress = n, time.Now()
		} else if n > 0 && time.Since(lastProgress) > rc.Drain {
			break
		}
		if ctx.Err() != nil {
			res.Interrupted = true
			break
		}
		if n == 0 && time.Now().After(deadline) {
			timedOut = true
			break
		}
		time.Sleep(time.Millisecond)
	}
	_ = t.Close()
	wg.Wait()
	res.CPUNs = int64(ProcessCPU() - cpu0)
	res.Msgs, res.Bytes, res.Datagrams = r.msgs.Load(), r.bytes.Load(), r.datagrams.Load()
	res.Malformed, res.LastNs, res.Checksum = r.malformed.Load(), r.last.Load(), r.checksum
	switch {
	case r.err != nil:
		err = fmt.Errorf("bench: raw member %d: receive: %w", cfg.Index, r.err)
	case timedOut:
		err = fmt.Errorf("bench: raw member %d: no datagram within %v", cfg.Index, cfg.Timeout)
	}
	if err != nil {
		res.Error = err.Error()
	}
	return res, err
}

// openTransport opens a raw member's backend (Transport): a receiver's
// or, send true, the sender's.
func (c RawConfig) openTransport(send bool) (transport.Transport, transport.Info, error) {
	tc := c.transportConfig(c.Group, send)
	if c.Transport == engine.TransportXDP {
		x, err := ebpf.Open(ebpf.Config{Config: tc})
		if err != nil {
			return nil, transport.Info{}, err
		}
		return x, x.Info(), nil
	}
	u, err := transport.Open(tc)
	if err != nil {
		return nil, transport.Info{}, err
	}
	return u, u.Info(), nil
}

// CombineRaw turns the results of one multi-process raw run (one sender,
// the rest receivers) into a RawResult: the slowest receiver's messages
// over the time from the sender's first send to that receiver's last
// datagram, and the worst receiver's datagram loss.
func CombineRaw(rs []RawMemberResult) (RawResult, error) {
	var snd *RawMemberResult
	for i := range rs {
		if rs[i].Role == "send" {
			snd = &rs[i]
		}
	}
	if snd == nil {
		return RawResult{}, errors.New("bench: raw run: no sender result")
	}
	res := RawResult{SentMsgs: snd.SentMsgs, SentDatagrams: snd.SentDatagrams, SendElapsed: time.Duration(snd.SendNs),
		MsgsPerDatagram: msgsPerDatagram(snd.DatagramSize, snd.MsgSize), Msgs: -1}
	var cpu, datagrams int64
	if snd.SendNs > 0 {
		res.SendMsgsPerSec = float64(snd.SentMsgs) / (float64(snd.SendNs) / 1e9)
	}
	for _, r := range rs {
		if r.Role != "receive" {
			continue
		}
		if r.Schema == "" {
			return RawResult{}, fmt.Errorf("bench: raw run: receiver %d: no result", r.Index)
		}
		elapsed := time.Duration(r.LastNs - snd.SendStartNs)
		rate := 0.0
		if elapsed > 0 && r.Datagrams > 0 {
			rate = float64(r.Msgs) / elapsed.Seconds()
		}
		if res.Msgs < 0 || rate < res.MsgsPerSec {
			res.Msgs, res.Bytes, res.Datagrams, res.Elapsed, res.MsgsPerSec = r.Msgs, r.Bytes, r.Datagrams, elapsed, rate
			res.MBPerSec = 0
			if rate > 0 {
				res.MBPerSec = float64(r.Bytes) / elapsed.Seconds() / 1e6
			}
		}
		if snd.SentDatagrams > 0 {
			res.LossPct = max(res.LossPct, 100*float64(snd.SentDatagrams-r.Datagrams)/float64(snd.SentDatagrams))
		}
		res.Malformed += r.Malformed
		res.Checksum += r.Checksum
		res.RecvBuffer = r.RecvBuffer
		cpu += r.CPUNs
		datagrams += r.Datagrams
	}
	if datagrams > 0 {
		res.RecvCPUNs = float64(cpu) / float64(datagrams)
	}
	if res.Msgs < 0 {
		return RawResult{}, errors.New("bench: raw run: no receiver result")
	}
	return res, nil
}

// RawMemberArgs returns the command-line flags that make RawMemberMain run
// cfg (hooks are not carried), writing its result to out.
func RawMemberArgs(cfg RawMemberConfig, out string, waitStart bool) []string {
	r := cfg.Raw
	role := "receive"
	if cfg.Send {
		role = "send"
	}
	a := []string{
		"-role", role,
		"-index", strconv.Itoa(cfg.Index),
		"-group", r.Group.String(),
		"-size", strconv.Itoa(r.MsgSize),
		"-datagram", strconv.Itoa(r.DatagramSize),
		"-count", strconv.FormatInt(r.Count, 10),
		"-duration", r.Duration.String(),
		"-batch", strconv.Itoa(r.Batch),
		"-drain", r.Drain.String(),
		"-out", out,
	}
	if r.RecvBuffer != 0 {
		a = append(a, "-recv-buffer", strconv.Itoa(r.RecvBuffer))
	}
	if r.NoGSO {
		a = append(a, "-no-gso")
	}
	if r.Transport != "" {
		a = append(a, "-transport", r.Transport)
	}
	return appendProcessArgs(a, r.Interface, r.Unicast, r.TTL, cfg.Timeout, waitStart)
}

// RawMemberMain is the raw member process (mcastbench raw-member): it
// parses args, runs RunRawMember and writes its RawMemberResult as JSON to
// the -out file (or stdout). Errors about the command line wrap ErrUsage.
// A result is written whenever the sockets opened, also for a failed run.
func RawMemberMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mcastbench raw-member", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: mcastbench raw-member -role send|receive -group ADDR:PORT [flags]\n\nOne process of a multi-process raw bundler run (no reliability); writes its result as JSON\n(schema %s). Every process of a run gets the same -group, -size and -datagram.\n\nflags:\n", RawMemberSchema)
		fs.PrintDefaults()
	}
	role := fs.String("role", "", "send or receive (required)")
	index := fs.Int("index", 0, "this member's number in the run (reported only)")
	group := fs.String("group", "", "multicast group ADDR:PORT in 239.0.0.0/8 (required)")
	iface := fs.String("interface", "lo", "interface")
	unicast := fs.String("unicast", "", "address to send from, ADDR:PORT (default 127.0.0.1:0; the interface's address off loopback)")
	ttl := fs.Int("ttl", 0, "multicast TTL (0 on loopback, 1 on a bridge)")
	size := fs.Int("size", 64, "message size in bytes")
	datagram := fs.Int("datagram", transport.MaxUDPPayloadIPv4, "datagram size in bytes")
	count := fs.Int64("count", 0, "messages to send (0: send for -duration)")
	duration := fs.Duration("duration", 2*time.Second, "how long to send when -count is 0")
	batch := fs.Int("batch", 8, "datagrams per sendmmsg/recvmmsg")
	recvBuf := fs.Int("recv-buffer", 0, "SO_RCVBUF in bytes (0: 4 MiB)")
	noGSO := fs.Bool("no-gso", false, "send every datagram on its own (no UDP segmentation offload)")
	tr := fs.String("transport", "udp", "udp, or xdp (AF_XDP: root, an Ethernet interface, TTL 1)")
	drain := fs.Duration("drain", 500*time.Millisecond, "receiver: stop once no datagram came for this long")
	timeout := fs.Duration("timeout", 0, "receiver: give up when no datagram came this long after the start (0: -duration or 10s, plus 30s)")
	out := fs.String("out", "-", "result file (- for stdout)")
	waitStart := fs.Bool("wait-start", false, "print "+ReadyLine+" once open, then wait for a line on stdin before starting")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, a...)...)
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q", fs.Arg(0))
	}
	cfg := RawMemberConfig{Index: *index, Timeout: *timeout, Raw: RawConfig{Interface: *iface, TTL: *ttl, MsgSize: *size,
		DatagramSize: *datagram, Count: *count, Duration: *duration, Batch: *batch, RecvBuffer: *recvBuf, Drain: *drain,
		AllowNonLoopback: *iface != "lo", NoGSO: *noGSO, Transport: *tr}}
	switch *role {
	case "send":
		cfg.Send = true
	case "receive":
	default:
		return bad("-role %q: want send or receive", *role)
	}
	var err error
	if *group == "" {
		return bad("-group is required (ADDR:PORT in 239.0.0.0/8)")
	}
	if cfg.Raw.Group, err = netip.ParseAddrPort(*group); err != nil {
		return bad("-group %q: %v", *group, err)
	}
	if cfg.Raw.Group.Port() == 0 {
		return bad("-group %v: want a non-zero port", cfg.Raw.Group)
	}
	if *unicast != "" {
		if cfg.Raw.Unicast, err = netip.ParseAddrPort(*unicast); err != nil {
			return bad("-unicast %q: %v", *unicast, err)
		}
	}
	if *timeout < 0 {
		return bad("-timeout %v: want >= 0", *timeout)
	}
	if _, err := cfg.Raw.withDefaults(); err != nil {
		return bad("%v", err)
	}
	if err := cfg.Raw.transportConfig(cfg.Raw.Group, cfg.Send).Validate(); err != nil {
		return bad("%v", err)
	}
	if *tr != engine.TransportUDP && *tr != engine.TransportXDP {
		return bad("-transport %q: want udp or xdp", *tr)
	}
	if *waitStart {
		cfg.Ready, cfg.Start = readyThenGo(stdout, stdin)
	}
	res, runErr := RunRawMember(ctx, cfg)
	if res.Schema == "" {
		return runErr // never opened: nothing to report
	}
	return errors.Join(runErr, writeResult(stdout, *out, res))
}
