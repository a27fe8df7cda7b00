package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nakcast/nakcast/bench"
	"github.com/nakcast/nakcast/engine"
	"github.com/nakcast/nakcast/wire/wireshark"
)

// runNetns runs one member process per network namespace (root), beside
// the raw bundler between the same namespaces.
func runNetns(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("netns", "One member process per network namespace, namespaces on a bridge with veth pairs (root),\nbeside the raw bundler between the same namespaces (one raw process per namespace, member 0\nsending) with the same message and datagram sizes. Verifies that every member delivered the\nsame messages (count and hash per sender) and deletes every namespace it created, also on\nCtrl-C and on failure.", stderr)
	var ef engineFlags
	var out outputFlags
	ef.register(fs, 3, 2*time.Second)
	out.register(fs)
	out.registerPlot(fs)
	mtu := fs.Int("mtu", 1500, "MTU of the veth pairs and the bridge (datagrams of MTU-28 bytes)")
	noRaw := fs.Bool("noraw", false, "skip the raw baseline")
	pcap := fs.String("pcap", "", "capture eth0 of each member namespace during the nakcast run into `DIR`/member<i>.pcap,\nwith the Wireshark dissector nakcast.lua beside them (wireshark -X lua_script:DIR/nakcast.lua DIR/member0.pcap)")
	pcapSnap := fs.Int("pcap-snaplen", 0, "with -pcap, keep at most this many bytes of each frame (0: all; 200 keeps the headers and the first messages)")
	rate := fs.Float64("rate", 0, "messages per second each sender sends, paced (0: as fast as it can)")
	egress := fs.Float64("egress-loss", 0, "fraction of every member's outgoing UDP datagrams the bridge drops (nftables; loss near the sender, for every receiver); with one sender and -rate, prints issue 19's repair figures from the members' counters beside the simulator's for the same group (implies -no-gso)")
	static := fs.Bool("static", false, "the members run a fixed view (mcastbench member -static) instead of automatic membership")
	repeat := fs.Int("repeat", 3, "with several -transport values (xdp,udp,udp+gso): rounds of the comparison, figures the medians")
	pingCount := fs.Int("pingpong-count", 10000, "with several -transport values: round trips of each ping-pong (spinning agents; 0: none)")
	var chaos chaosFlags
	chaos.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	transports := strings.Split(ef.transport, ",")
	if len(transports) > 1 {
		ef.transport = engine.TransportUDP // checked below, one by one
	}
	if ef.iface != "lo" || ef.group != "" {
		return usagef("-interface and -group are chosen by netns (eth0 in each namespace, %v)", bench.NetnsGroup)
	}
	if err := ef.check(); err != nil {
		return err
	}
	if err := out.check(); err != nil {
		return err
	}
	if *pcapSnap < 0 {
		return usagef("-pcap-snaplen %d: want 0 (all) or more", *pcapSnap)
	}
	if *pcap != "" && (len(transports) > 1 || ef.transport != engine.TransportUDP) {
		return usagef("-pcap captures what passes the kernel's stack, which AF_XDP datagrams bypass: use it with -transport udp")
	}
	if *mtu < 576 || *mtu > 65535 {
		return usagef("-mtu %d: want 576..65535", *mtu)
	}
	if *rate < 0 || !(*egress >= 0 && *egress < 1) {
		return usagef("-rate %v, -egress-loss %v: want rate >= 0 and 0 <= egress-loss < 1", *rate, *egress)
	}
	if (*egress > 0 || *rate > 0) && len(transports) > 1 {
		return usagef("-rate and -egress-loss are for a single -transport run")
	}
	if *egress > 0 {
		if err := bench.CheckNft(); err != nil {
			return err
		}
		ef.noGSO = true
	}
	if ef.members < 2 {
		return usagef("-members %d: want at least 2 in namespaces (a sender and a receiver)", ef.members)
	}
	if len(transports) > 1 {
		for _, tr := range transports {
			if tr != engine.TransportUDP && tr != engine.TransportXDP && tr != bench.UDPWithOffloads {
				return usagef("-transport %q: want a list of xdp, udp and %s to compare", tr, bench.UDPWithOffloads)
			}
		}
		if *repeat < 1 || *pingCount < 0 {
			return usagef("-repeat %d, -pingpong-count %d: want at least 1 and 0", *repeat, *pingCount)
		}
	}
	if err := chaos.check(&ef, *static, transports); err != nil {
		return err
	}
	if err := bench.CheckNetns(); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find this program to run the members: %w", err)
	}
	datagram := ef.datagram
	if datagram == 0 {
		datagram = *mtu - 28
	}
	path := gsoPath(fmt.Sprintf("netns mtu %d", *mtu), ef.noGSO)
	progressLine := func(s string) { fmt.Fprintf(stderr, "netns: %s\n", s) }
	progressLine(fmt.Sprintf("creating %d namespaces %s* (bridge, veth MTU %d)", ef.members, bench.NetnsPrefix(), *mtu))
	ns, err := bench.SetupNetns(ctx, ef.members, *mtu)
	if err != nil {
		return err
	}
	defer func() {
		progressLine("deleting the namespaces")
		if err := ns.Close(); err != nil {
			fmt.Fprintf(stderr, "netns: %v\n", err)
		}
	}()

	if chaos.on() {
		cfg := ef.memberConfig()
		cfg.LossRate, cfg.Dynamic, cfg.Rate = ef.loss, true, *rate
		return runChaosNetns(ctx, ns, exe, cfg, chaos, stdout, progressLine, out)
	}
	if len(transports) > 1 {
		cfg := ef.memberConfig()
		cfg.LossRate, cfg.Dynamic = ef.loss, !*static
		pings := *pingCount
		if pings == 0 {
			pings = -1 // none
		}
		var rawExe []string
		if !*noRaw {
			rawExe = []string{exe, "raw-member"}
		}
		figs, err := bench.CompareTransports(ctx, bench.TransportCompareConfig{Transports: transports, Member: cfg,
			Repeat: *repeat, PingCount: pings, Netns: ns,
			Exe: []string{exe, "member"}, PingExe: []string{exe, "pingpong-member"}, RawExe: rawExe, Progress: progressLine})
		fmt.Fprintf(stdout, "%s, %d members, %s messages, medians of %d rounds:\n", path, ef.members, bench.FormatBytes(ef.size), *repeat)
		if werr := bench.WriteTransportTable(stdout, figs); werr != nil {
			return werr
		}
		return err
	}
	var rows []bench.Row
	if !*noRaw {
		rc := bench.RawConfig{MsgSize: ef.size, DatagramSize: datagram, Duration: ef.duration, Count: ef.count,
			Batch: engine.DefaultBatchSize, Receivers: ef.members - 1, NoGSO: ef.noGSO}
		if ef.transport == engine.TransportXDP {
			rc.Transport = ef.transport // the bundler over the same backend
		}
		progressLine(fmt.Sprintf("raw bundler, %s messages in %d B datagrams", bench.FormatBytes(ef.size), datagram))
		raw, _, err := bench.RunNetnsRaw(ctx, bench.NetnsRawConfig{Raw: rc, Members: ef.members, Netns: ns,
			Exe: []string{exe, "raw-member"}, Progress: progressLine})
		if err != nil {
			return fmt.Errorf("raw baseline: %w", err)
		}
		rows = append(rows, bench.RawRow(path, rc, raw))
	}
	cfg := ef.memberConfig()
	cfg.Group = ef.groupOrZero()
	cfg.LossRate, cfg.Dynamic = ef.loss, !*static
	cfg.Rate = *rate
	if cfg.Count > 0 {
		cfg.Duration = 0 // -count decides, not the default -duration
	}
	progressLine("nakcast")
	rs, runErr := bench.RunNetns(ctx, bench.NetnsRunConfig{Member: cfg, Netns: ns, Exe: []string{exe, "member"}, Progress: progressLine,
		Pcap: *pcap, PcapSnapLen: *pcapSnap, EgressLoss: *egress})
	if *pcap != "" {
		progressLine(fmt.Sprintf("open a capture with: wireshark -X lua_script:%s %s",
			filepath.Join(*pcap, wireshark.DissectorFile), filepath.Join(*pcap, bench.CaptureFile(0))))
	}
	if len(rs) == 0 {
		return runErr
	}
	if *egress > 0 && *rate > 0 && ef.senders == 1 {
		printScaleFigures(stdout, rs, cfg, *rate, *egress, datagram)
	}
	rows = append(rows, bench.GroupRow(path, withAuthMode(caseName(ef.loss), rs), rs, datagram))
	bench.SetRatios(rows)
	if err := bench.WriteTable(stdout, rows); err != nil {
		return err
	}
	if problems := bench.Verify(rs); len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintf(stdout, "verify: %s\n", p)
		}
		runErr = errors.Join(runErr, fmt.Errorf("delivery not verified: %d problems", len(problems)))
	} else {
		fmt.Fprintf(stdout, "verified: %d members delivered the same messages of %d sender(s), in order, nothing lost\n", len(rs), ef.senders)
	}
	if err := out.write(rows, [][]bench.MemberResult{rs}); err != nil {
		return err
	}
	return runErr
}

// withAuthMode appends the members' authentication mode to a case name
// ("lossless, signed"); nothing in open mode (-insecure).
func withAuthMode(name string, rs []bench.MemberResult) string {
	if m := rs[0].Stats.Auth.Mode; m != "" && m != "open" {
		return name + ", " + m
	}
	return name
}

// printScaleFigures prints issue 19's figures of a run with -egress-loss,
// from the members' counters, beside those of its simulated twin.
func printScaleFigures(w io.Writer, rs []bench.MemberResult, cfg bench.MemberConfig, rate, loss float64, datagram int) {
	f, err := bench.ScaleFiguresOf(rs, 0, rate)
	if err != nil {
		fmt.Fprintf(w, "scale figures: %v\n", err)
		return
	}
	fmt.Fprintf(w, "scale figures, netns (members' counters): %v\n", f)
	count := int(rs[0].Sent)
	twin, err := bench.SimScaleTwin(bench.SimTwinConfig{Members: len(rs), Count: count, MsgSize: cfg.MsgSize, Rate: rate,
		Loss: loss, Datagram: datagram, Seed: 1})
	if err != nil {
		fmt.Fprintf(w, "scale figures, simulator: %v\n", err)
		return
	}
	fmt.Fprintf(w, "scale figures, simulator (%d members, %d messages at %g/s, seed 1): %v\n", len(rs), count, rate, twin)
}

// runRawMember is one raw bundler process (bench.RawMemberMain), what
// netns runs in each namespace for the raw baseline.
func runRawMember(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	err := bench.RawMemberMain(ctx, args, os.Stdin, stdout, stderr)
	if errors.Is(err, bench.ErrUsage) {
		return usageError{err.Error()}
	}
	return err
}
