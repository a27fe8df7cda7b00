package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nakcast/nakcast/bench"
	"github.com/nakcast/nakcast/ebpf"
	"github.com/nakcast/nakcast/engine"
)

// errFlagParse marks a command line the flag package refused (it printed
// the error naming the flag, and the usage).
var errFlagParse = errors.New("bad flags")

// engineFlags are the engine settings shared by the modes that run
// members.
type engineFlags struct {
	members, senders int
	size             int
	count            int64
	duration         time.Duration
	loss             float64
	transport        string
	idle             string
	threading        string
	bundleBytes      int
	bundleDelay      time.Duration
	datagram         int
	window           int
	iface            string
	group            string
	sample           int
	batch            int
	discardOwn       bool
	exclusive        bool
	noGSO            bool
	xdpMode          string
	keyFile          string
	encrypt          bool
	insecure         bool
}

func (f *engineFlags) register(fs *flag.FlagSet, members int, duration time.Duration) {
	fs.IntVar(&f.members, "members", members, "members in the group (senders included)")
	fs.IntVar(&f.senders, "senders", 1, "how many of the members send (members 0..senders-1)")
	fs.IntVar(&f.size, "size", 64, "message size in bytes (at least 16: send time and index)")
	fs.Int64Var(&f.count, "count", 0, "messages per sender (0: send for -duration)")
	fs.DurationVar(&f.duration, "duration", duration, "how long each sender sends when -count is 0")
	fs.Float64Var(&f.loss, "loss", 0, "fraction of datagrams dropped at each receiver (0 <= loss < 1)")
	fs.StringVar(&f.transport, "transport", "udp", "transport: udp, xdp (AF_XDP: root, an Ethernet interface, TTL 1; the netns mode) or auto (xdp where it runs, else udp)")
	fs.StringVar(&f.idle, "idle", "block", "agent idle strategy: block, yield or spin")
	fs.StringVar(&f.threading, "threading", "shared", "agent goroutines: shared (one), dedicated (a sender and a receiver) or invoked (run by the harness through DoWork)")
	fs.IntVar(&f.bundleBytes, "bundle-bytes", 0, "bundling limit in bytes (0: the datagram size)")
	fs.DurationVar(&f.bundleDelay, "bundle-delay", 0, "longest a message waits in an open bundle (0: flush when the ring goes idle)")
	fs.IntVar(&f.datagram, "datagram", 0, "largest datagram in bytes (0: the interface MTU less headers, 65507 on loopback)")
	fs.IntVar(&f.window, "window", 0, "retention window in messages, a power of two (0: the engine default)")
	fs.StringVar(&f.iface, "interface", "lo", "interface to multicast on")
	fs.StringVar(&f.group, "group", "", "multicast group ADDR:PORT in 239.0.0.0/8 (default: random 239.77.x.y:port)")
	fs.IntVar(&f.sample, "sample", 0, "record the latency of one message in N (0: 1 in 16)")
	fs.IntVar(&f.batch, "batch", 0, "senders send with SendBatch, this many messages a call (0 or 1: Send per message)")
	fs.StringVar(&f.xdpMode, "xdp-mode", "", "with -transport xdp: where the XDP program attaches, native or generic (default: native where the driver can)")
	fs.BoolVar(&f.noGSO, "no-gso", false, "UDP segmentation offload off, for the engine and the raw baseline alike: every datagram goes through the kernel's send path on its own (the raw bundler as the engine issue defines it)")
	fs.BoolVar(&f.discardOwn, "discard-own", false, "senders do not deliver their own messages (engine.Config.DiscardOwn); each records what it sent, and receivers are verified against that")
	fs.StringVar(&f.keyFile, "key-file", "", "group key file, one key a line as \"ID HEX\" (32 or 64 hex digits), the current key first (engine.Config.Keys): every datagram is authenticated; the key is never printed")
	fs.BoolVar(&f.encrypt, "encrypt", false, "with -key-file, also encrypt datagram bodies (engine.Config.Encrypt)")
	fs.BoolVar(&f.insecure, "insecure", false, "off loopback, run in open mode without a key (engine.Config.Insecure); namespace runs otherwise generate a key")
	fs.BoolVar(&f.exclusive, "exclusive-sender", false, "each sender sends from one goroutine and says so (engine.Config.Agent.ExclusiveSender): its log buffer claims and commits without atomic read-modify-writes")
}

// check validates the flags the way engine.Config would, naming the flag.
func (f *engineFlags) check() error {
	switch {
	case f.members < 1 || f.members > 1024:
		return usagef("-members %d: want 1..1024", f.members)
	case f.senders < 1 || f.senders > f.members:
		return usagef("-senders %d: want 1..-members (%d)", f.senders, f.members)
	case f.size < bench.MinMsgSize || f.size > engine.DefaultMaxMessage:
		return usagef("-size %d: want %d..%d", f.size, bench.MinMsgSize, engine.DefaultMaxMessage)
	case f.count < 0:
		return usagef("-count %d: want >= 0", f.count)
	case f.count == 0 && f.duration <= 0:
		return usagef("-duration %v: want > 0 when -count is 0", f.duration)
	case !(f.loss >= 0 && f.loss < 1):
		return usagef("-loss %v: want 0 <= loss < 1", f.loss)
	case f.sample < 0:
		return usagef("-sample %d: want >= 0", f.sample)
	case f.batch < 0 || f.batch > 4096:
		return usagef("-batch %d: want 0..4096", f.batch)
	case f.encrypt && f.keyFile == "":
		return usagef("-encrypt: needs -key-file")
	case f.insecure && f.keyFile != "":
		return usagef("-insecure with -key-file: choose one")
	}
	if _, _, err := bench.ReadKeyFile(f.keyFile); err != nil {
		return usagef("-key-file: %v", err)
	}
	switch f.transport {
	case engine.TransportUDP, engine.TransportXDP, engine.TransportAuto:
	default:
		return usagef("-transport %q: want udp, xdp or auto", f.transport)
	}
	if _, err := parseIdle(f.idle); err != nil {
		return err
	}
	if _, err := parseThreading(f.threading); err != nil {
		return err
	}
	if f.group != "" {
		g, err := netip.ParseAddrPort(f.group)
		if err != nil {
			return usagef("-group %q: want ADDR:PORT: %v", f.group, err)
		}
		if !g.Addr().Is4() || g.Addr().As4()[0] != 239 || g.Port() == 0 {
			return usagef("-group %v: want an IPv4 group in 239.0.0.0/8 with a non-zero port", g)
		}
	}
	return nil
}

func parseThreading(s string) (engine.Threading, error) {
	t, err := engine.ParseThreading(s)
	if err != nil {
		return 0, usagef("-threading: %v", err)
	}
	return t, nil
}

func parseIdle(s string) (engine.IdleStrategy, error) {
	v, err := engine.ParseIdleStrategy(s)
	if err != nil {
		return 0, usagef("-idle: %v", err)
	}
	return v, nil
}

// memberConfig is the template member config of the flags (check has
// read the key file once already).
func (f *engineFlags) memberConfig() bench.MemberConfig {
	keys, keyFile, _ := bench.ReadKeyFile(f.keyFile)
	idle, _ := parseIdle(f.idle)
	thr, _ := parseThreading(f.threading)
	senders := make([]int, f.senders)
	for i := range senders {
		senders[i] = i
	}
	var g netip.AddrPort
	if f.group != "" {
		g = netip.MustParseAddrPort(f.group)
	}
	return bench.MemberConfig{
		Members:     f.members,
		Senders:     senders,
		MsgSize:     f.size,
		Count:       f.count,
		Duration:    f.duration,
		SampleEvery: sampleEvery(f.sample),
		SendBatch:   f.batch,
		KeyFile:     keyFile,
		Config: engine.Config{
			Group:      g,
			Interface:  f.iface,
			DiscardOwn: f.discardOwn,
			Keys:       keys,
			Encrypt:    f.encrypt,
			Insecure:   f.insecure,
			Transport:  engine.TransportConfig{Backend: f.transport, NoGSO: f.noGSO, XDP: ebpf.Options{Mode: f.xdpMode}},
			Tuning: engine.TuningConfig{MaxDatagram: f.datagram, BundleBytes: f.bundleBytes,
				BundleDelay: f.bundleDelay, Window: f.window},
			Agent: engine.AgentConfig{Idle: idle, Threading: thr, ExclusiveSender: f.exclusive},
		},
	}
}

// sampleEvery is the latency sampling, one message in 16 unless the flag
// says otherwise: a clock read costs more than the rest of the receiving
// handler, and a message is delivered at every member, so reading it for
// every message would make the harness, not the engine, the larger part
// of a member's work. Which messages are sampled does not depend on their
// latency, and a run of seconds still records hundreds of thousands.
func sampleEvery(flagValue int) int {
	if flagValue > 0 {
		return flagValue
	}
	return 16
}

// groupOrZero is the -group flag, or the zero value when unset.
func (f *engineFlags) groupOrZero() netip.AddrPort {
	if f.group == "" {
		return netip.AddrPort{}
	}
	return netip.MustParseAddrPort(f.group)
}

// outputFlags are the result files every mode can write.
type outputFlags struct {
	jsonFile, csvFile string
	stats             time.Duration
	plot              string
}

// registerPlot adds -plot (the modes that run nakcast groups).
func (o *outputFlags) registerPlot(fs *flag.FlagSet) {
	fs.StringVar(&o.plot, "plot", "", "draw the latency distribution and the throughput over time to this .png or .svg file")
}

// check validates the output flags before anything runs.
func (o *outputFlags) check() error {
	if o.plot != "" {
		switch strings.ToLower(filepath.Ext(o.plot)) {
		case ".png", ".svg":
		default:
			return usagef("-plot %q: want a file name ending in .png or .svg", o.plot)
		}
	}
	if o.stats < 0 {
		return usagef("-stats %v: want >= 0", o.stats)
	}
	return nil
}

func (o *outputFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.jsonFile, "json", "", "write the results as JSON to this file")
	fs.StringVar(&o.csvFile, "csv", "", "write the results table as CSV to this file")
	fs.DurationVar(&o.stats, "stats", 0, "print every member's engine counters at this interval (0: off)")
}

func (o *outputFlags) write(rows []bench.Row, members [][]bench.MemberResult) error {
	if o.jsonFile != "" {
		if err := writeFile(o.jsonFile, func(w io.Writer) error { return bench.WriteJSON(w, rows, members) }); err != nil {
			return err
		}
	}
	if o.csvFile != "" {
		if err := writeFile(o.csvFile, func(w io.Writer) error { return bench.WriteCSV(w, rows) }); err != nil {
			return err
		}
	}
	if o.plot != "" {
		return writePlot(o.plot, rows, members)
	}
	return nil
}

func writeFile(name string, fill func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := fill(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	return f.Close()
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name, summary string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("mcastbench "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: mcastbench %s [flags]\n\n%s\n\nflags:\n", name, summary)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args and refuses positional arguments.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errFlagParse
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (flags only)", fs.Arg(0))
	}
	return nil
}

// intList parses "0,2,3".
func intList(s string) ([]int, error) {
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
	return out, nil
}

// gsoPath is a table's path label: marked "nogso" when the engine and the
// raw bundler ran without the segmentation offloads (-no-gso), so that
// rows with and without them pair their ratios apart.
func gsoPath(path string, noGSO bool) string {
	if noGSO {
		return path + " nogso"
	}
	return path
}
