package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nakcast/nakcast/bench"
)

// runSoak is the soak (make soak): five members in namespaces under
// continuous traffic and link loss for ten minutes, one killed and
// restarted every minute; it prints every process's resident memory and
// what the members that stayed lost.
func runSoak(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("soak", "A long chaos run in network namespaces (root): members under continuous paced traffic and loss\non their links, one member killed and restarted periodically. Samples every member process's\nresident memory (VmRSS) and prints it at the start, after warm-up and at the end, then the\nchaos check and the messages lost by the members that stayed (must be 0).", stderr)
	var c bench.SoakConfig
	fs.IntVar(&c.Members, "members", 5, "member processes")
	senders := fs.Int("senders", 2, "how many of the members send (members 0..senders-1)")
	fs.DurationVar(&c.Duration, "duration", 10*time.Minute, "how long the senders send")
	fs.Float64Var(&c.Rate, "rate", 1000, "messages per second each sender sends")
	fs.IntVar(&c.MsgSize, "size", 200, "message size in bytes")
	fs.Float64Var(&c.LinkLoss, "link-loss", 0.05, "fraction of the UDP datagrams arriving at each member its namespace drops (nftables)")
	fs.IntVar(&c.Victim, "victim", 0, "the member killed and restarted (0: the last)")
	fs.DurationVar(&c.Every, "every", time.Minute, "kill the victim every this long (first at this time)")
	fs.DurationVar(&c.Down, "down", 10*time.Second, "restart the victim this long after each kill")
	fs.DurationVar(&c.Sample, "sample", 5*time.Second, "resident memory sampling period")
	fs.DurationVar(&c.WarmUp, "warmup", 2*time.Minute, "a process's memory after this long counts as warmed up (past the first kill's stall and restart)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if c.Members < 2 || *senders < 1 || *senders >= c.Members || c.MsgSize < bench.MinMsgSize || c.Rate <= 0 || c.Duration <= 0 {
		return usagef("-members %d, -senders %d, -size %d, -rate %g, -duration %v: want 2 or more members, 1..members-1 senders, size >= %d, rate and duration > 0",
			c.Members, *senders, c.MsgSize, c.Rate, c.Duration, bench.MinMsgSize)
	}
	for i := range *senders {
		c.Senders = append(c.Senders, i)
	}
	if err := c.Validate(); err != nil {
		return usagef("%v", strings.TrimPrefix(err.Error(), "bench: soak: "))
	}
	if err := bench.CheckNetns(); err != nil {
		return err
	}
	if err := bench.CheckNft(); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find this program to run the members: %w", err)
	}
	c.Exe = []string{exe, "member"}
	c.Progress = func(s string) { fmt.Fprintf(stderr, "soak: %s\n", s) }
	rep, err := bench.RunSoak(ctx, c)
	if len(rep.Results) > 0 {
		bench.WriteSoak(stdout, rep, c)
		if rep.StayersLost > 0 {
			err = errors.Join(err, fmt.Errorf("the members that stayed lost %d messages", rep.StayersLost))
		}
	}
	return err
}
