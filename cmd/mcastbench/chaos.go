package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nakcast/nakcast/bench"
	"github.com/nakcast/nakcast/engine"
)

// chaosFlags are the netns mode's fault options: a chaos schedule, loss
// on the members' links and the members' suspicion timeout.
type chaosFlags struct {
	spec     string
	linkLoss float64
	suspect  time.Duration
	sched    bench.ChaosSchedule
}

func (c *chaosFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.spec, "chaos", "", "chaos schedule run from the start of sending, events comma-separated:\n"+
		"kill:I@T (SIGKILL member I at T), stop:I@T+D (SIGSTOP at T, SIGCONT at T+D), restart:I@T (start\n"+
		"a killed member again: it joins the running group), partition:A|B@T+D (cut member sets A, B, ...\n"+
		"written 1,2|3,4 from each other, heal at T+D; members in no set are on the first); for example\n"+
		"kill:2@5s,stop:3@8s+4s,restart:2@12s,partition:1,2|3,4@15s+5s. Receivers only for kill, stop and\n"+
		"restart; every event over before -duration ends. The run ends with the chaos check")
	fs.Float64Var(&c.linkLoss, "link-loss", 0, "fraction of the UDP datagrams arriving at each member that its namespace drops (nftables;\nloss on every member's link, independent per receiver): a chaos run, with -chaos or alone")
	fs.DurationVar(&c.suspect, "suspect-timeout", 0, "the members' suspicion timeout (engine.Config.Membership.SuspectTimeout; 0: the default, 5s)")
}

// on says a chaos run was asked for.
func (c *chaosFlags) on() bool { return c.spec != "" || c.linkLoss > 0 }

// check parses and validates the options against the run.
func (c *chaosFlags) check(ef *engineFlags, static bool, transports []string) error {
	if c.suspect < 0 {
		return usagef("-suspect-timeout %v: want >= 0", c.suspect)
	}
	if !c.on() {
		return nil
	}
	switch {
	case !(c.linkLoss >= 0 && c.linkLoss < 1):
		return usagef("-link-loss %v: want 0 <= link-loss < 1", c.linkLoss)
	case static:
		return usagef("-chaos and -link-loss run automatic membership: a fixed view (-static) never excludes a dead member")
	case len(transports) > 1 || ef.transport == engine.TransportXDP:
		return usagef("-chaos and -link-loss: one -transport, udp (the nftables rules see what passes the kernel's stack)")
	case ef.count > 0:
		return usagef("-chaos: the schedule is timed: send for -duration, not -count")
	}
	if c.spec != "" {
		s, err := bench.ParseChaos(c.spec)
		if err != nil {
			return usagef("-chaos: %v", strings.TrimPrefix(err.Error(), "chaos: "))
		}
		cfg := ef.memberConfig()
		if err := s.Check(cfg.Members, cfg.Senders, cfg.Duration); err != nil {
			return usagef("-chaos: %v", strings.TrimPrefix(err.Error(), "chaos: "))
		}
		c.sched = s
	}
	return bench.CheckNft()
}

// runChaosNetns runs the members in ns with the schedule and link loss,
// then prints the chaos check (bench.CheckChaos).
func runChaosNetns(ctx context.Context, ns *bench.Netns, exe string, cfg bench.MemberConfig, c chaosFlags, stdout io.Writer, progress func(string), out outputFlags) error {
	cfg.Membership.SuspectTimeout = c.suspect
	progress(fmt.Sprintf("chaos run: %q, %g link loss", c.sched.String(), c.linkLoss))
	rs, runErr := bench.RunNetns(ctx, bench.NetnsRunConfig{Member: cfg, Netns: ns, Exe: []string{exe, "member"}, Progress: progress,
		Chaos: c.sched, LinkLoss: c.linkLoss})
	if len(rs) == 0 {
		return runErr
	}
	rep := bench.CheckChaos(rs)
	fmt.Fprint(stdout, rep)
	if len(rep.Problems) > 0 {
		runErr = errors.Join(runErr, fmt.Errorf("chaos check failed: %d problems", len(rep.Problems)))
	}
	return errors.Join(runErr, out.write(nil, [][]bench.MemberResult{rs}))
}
