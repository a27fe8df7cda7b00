package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nakcast/nakcast/bench"
)

// runNetns runs one member process per network namespace (root).
func runNetns(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("netns", "One member process per network namespace, namespaces on a bridge with veth pairs (root).\nVerifies that every member delivered the same messages (count and hash per sender) and deletes\nevery namespace it created, also on Ctrl-C and on failure.", stderr)
	var ef engineFlags
	var out outputFlags
	ef.register(fs, 3, 2*time.Second)
	out.register(fs)
	mtu := fs.Int("mtu", 1500, "MTU of the veth pairs and the bridge")
	if err := parse(fs, args); err != nil {
		return err
	}
	if ef.iface != "lo" || ef.group != "" {
		return usagef("-interface and -group are chosen by netns (eth0 in each namespace, 239.77.1.1:45600)")
	}
	if err := ef.check(); err != nil {
		return err
	}
	if *mtu < 576 || *mtu > 65535 {
		return usagef("-mtu %d: want 576..65535", *mtu)
	}
	if err := bench.CheckNetns(); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find this program to run the members: %w", err)
	}
	cfg := ef.memberConfig()
	cfg.Group = ef.groupOrZero()
	cfg.LossRate = ef.loss
	rs, runErr := bench.RunNetns(ctx, bench.NetnsRunConfig{Member: cfg, MTU: *mtu, Exe: []string{exe, "member"},
		Progress: func(s string) { fmt.Fprintf(stderr, "netns: %s\n", s) }})
	if len(rs) == 0 {
		return runErr
	}
	datagram := ef.datagram
	if datagram == 0 {
		datagram = *mtu - 28
	}
	rows := []bench.Row{bench.GroupRow(fmt.Sprintf("netns mtu %d", *mtu), caseName(ef.loss), rs, datagram)}
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
