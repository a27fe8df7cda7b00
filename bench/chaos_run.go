package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ChaosProc is a member process of a chaos run as NetnsRunConfig.Monitor
// sees it: member Index, its Restart (0: the process started with the
// run, k: the k-th restart of that member), its Pid, and whether it is
// stopped (SIGSTOP) now.
type ChaosProc struct {
	Index, Restart, Pid int
	Stopped             bool
}

// chaosTable is the nftables table the chaos run adds in each member
// namespace: chain loss (LinkLoss) and chain partition (the cuts).
const chaosTable = "nakcast_chaos"

// linkLoss makes member i's namespace drop the fraction p of the UDP
// datagrams that arrive on its eth0, at random (loss on that member's
// link, independent of the other members'), and adds the (empty)
// partition chain that cuts fill.
func (ns *Netns) linkLoss(ctx context.Context, i int, p float64) error {
	rules := fmt.Sprintf(`table inet %s {
	chain partition {
		type filter hook input priority -10; policy accept;
	}
	chain loss {
		type filter hook input priority 0; policy accept;
	}
}
`, chaosTable)
	if p > 0 {
		rules += fmt.Sprintf("add rule inet %s loss iifname \"eth0\" meta l4proto udp numgen random mod 1000000 < %d counter drop\n", chaosTable, int64(p*1e6))
	}
	_, err := ns.nftIn(ctx, ns.Members[i], rules, "-f", "-")
	return err
}

// cut partitions the members: each member's namespace drops every IPv4
// datagram from the members on another side (side[j] is member j's).
func (ns *Netns) cut(ctx context.Context, side []int) error {
	return ns.inEach(len(side), func(i int) error {
		var others []string
		for j := range side {
			if side[j] != side[i] {
				others = append(others, ns.Addrs[j].String())
			}
		}
		if len(others) == 0 {
			return nil
		}
		rule := fmt.Sprintf("add rule inet %s partition ip saddr { %s } counter drop\n", chaosTable, strings.Join(others, ", "))
		_, err := ns.nftIn(ctx, ns.Members[i], rule, "-f", "-")
		return err
	})
}

// heal removes every cut.
func (ns *Netns) heal(ctx context.Context, members int) error {
	return ns.inEach(members, func(i int) error {
		_, err := ns.nftIn(ctx, ns.Members[i], "", "flush", "chain", "inet", chaosTable, "partition")
		return err
	})
}

// inEach runs f for members 0..n-1 at once and joins their errors: a cut
// or a heal reaches every namespace at about the same time (one nft
// process after another takes tens of milliseconds each on a loaded
// machine, and a heal half a second late is a longer partition for the
// last members).
func (ns *Netns) inEach(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(i) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// clearChaos deletes the chaos table of the first n members (their link
// loss and any cut), for namespaces that outlive the run.
func (ns *Netns) clearChaos(n int) {
	for i := range n {
		_, _ = ns.nftIn(context.Background(), ns.Members[i], "", "delete", "table", "inet", chaosTable)
	}
}

// chaosRun runs a schedule on a group of member processes.
type chaosRun struct {
	ns       *Netns
	members  int
	env      []string
	progress func(string)
	// restartSpec is the command line of member i's k-th restart.
	restartSpec func(i, k int) procSpec

	mu       sync.Mutex
	procs    []*memberProc // the first members processes, then restarts
	specs    []procSpec    // procs' specs
	current  []int         // member index -> its running process in procs (-1: none)
	stopped  []bool        // by position in procs
	joined   []bool        // by position in procs: open, in the group
	restarts []int         // restarts so far, by member index
	t0       time.Time
}

// runChaosProcs is runNetnsProcs with cfg.Chaos run from the start of
// sending, cfg.LinkLoss on every member's link (linkLoss; the partition
// chain is added even at 0; both go at the end) and cfg.Monitor called
// every cfg.MonitorEvery with the processes running. It returns the specs
// of every process it started, the restarts' after specs, with killed set
// where the schedule killed the process.
func runChaosProcs(ctx context.Context, ns *Netns, specs []procSpec, cfg NetnsRunConfig, restartSpec func(i, k int) procSpec, progress func(string)) ([]procSpec, error) {
	n := len(specs)
	defer ns.clearChaos(n)
	for i := range n {
		if err := ns.linkLoss(ctx, i, cfg.LinkLoss); err != nil {
			return specs, err
		}
	}
	r := &chaosRun{ns: ns, members: n, env: cfg.Env, progress: progress, restartSpec: restartSpec,
		specs: append([]procSpec(nil), specs...), current: make([]int, n), restarts: make([]int, n)}
	procs, err := startMemberProcs(ctx, ns, specs, cfg.Env, progress)
	r.procs = procs
	r.stopped, r.joined = make([]bool, len(procs)), make([]bool, len(procs))
	defer func() {
		for _, p := range r.procs {
			p.reap()
		}
	}()
	if err != nil {
		return r.specs, err
	}
	for i := range r.current {
		r.current[i], r.joined[i] = i, true
	}
	r.t0 = time.Now()
	stopMonitor := r.monitor(cfg.Monitor, cfg.MonitorEvery)
	runErr := r.schedule(ctx, cfg.Chaos)
	if runErr != nil {
		cctx, cancel := context.WithCancel(ctx)
		cancel() // the schedule failed: end the run
		ctx = cctx
	}
	r.mu.Lock()
	procs = append([]*memberProc(nil), r.procs...)
	r.mu.Unlock()
	waitErr := waitMemberProcs(ctx, procs, func(i int) bool { return r.specs[i].killed })
	stopMonitor()
	return r.specs, errors.Join(runErr, waitErr)
}

// schedule performs the schedule's actions at their times.
func (r *chaosRun) schedule(ctx context.Context, s ChaosSchedule) error {
	for _, a := range s.actions() {
		t := time.NewTimer(time.Until(r.t0.Add(a.at)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil // interrupted: the members end their streams
		}
		if err := r.act(ctx, a); err != nil {
			return fmt.Errorf("chaos at %v: %s: %w", a.at, a.ev, err)
		}
	}
	r.progress(fmt.Sprintf("chaos %v: schedule done", time.Since(r.t0).Round(100*time.Millisecond)))
	return nil
}

// act performs one action.
func (r *chaosRun) act(ctx context.Context, a chaosAction) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := a.ev
	say := func(f string, x ...any) {
		r.progress(fmt.Sprintf("chaos %v: ", time.Since(r.t0).Round(100*time.Millisecond)) + fmt.Sprintf(f, x...))
	}
	switch {
	case e.Kind == ChaosPartition && !a.end:
		say("partition %s", e)
		return r.ns.cut(ctx, partitionSides(e.Sets, r.members))
	case e.Kind == ChaosPartition:
		say("heal the partition")
		return r.ns.heal(ctx, r.members)
	case e.Kind == ChaosRestart:
		return r.restart(ctx, e.Member, say)
	}
	pos := r.current[e.Member]
	if pos < 0 {
		return fmt.Errorf("member %d has no process", e.Member)
	}
	p := r.procs[pos]
	switch {
	case e.Kind == ChaosKill:
		say("SIGKILL member %d (pid %d)", e.Member, p.cmd.Process.Pid)
		r.specs[pos].killed = true
		r.current[e.Member] = -1
		return p.cmd.Process.Kill()
	case !a.end:
		say("SIGSTOP member %d (pid %d) for %v", e.Member, p.cmd.Process.Pid, e.For)
		r.stopped[pos] = true
		return p.cmd.Process.Signal(syscall.SIGSTOP)
	default:
		say("SIGCONT member %d (pid %d)", e.Member, p.cmd.Process.Pid)
		r.stopped[pos] = false
		return p.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// restart starts member i again: it joins the running group (the start
// line is written at once; its ready line says it joined).
func (r *chaosRun) restart(ctx context.Context, i int, say func(string, ...any)) error {
	r.restarts[i]++
	k := r.restarts[i]
	sp := r.restartSpec(i, k)
	p, err := startMemberProc(r.ns, i, sp.argv, r.env)
	if err != nil {
		return err
	}
	_, _ = p.stdin.Write([]byte("go\n"))
	r.procs = append(r.procs, p)
	r.specs = append(r.specs, sp)
	r.stopped, r.joined = append(r.stopped, false), append(r.joined, false)
	pos := len(r.procs) - 1
	r.current[i] = pos
	say("restart member %d (restart %d, pid %d)", i, k, p.cmd.Process.Pid)
	start := time.Now()
	go func() {
		if err := p.waitReady(ctx, i); err != nil {
			r.progress(fmt.Sprintf("chaos: restart %d of member %d: %v", k, i, err))
			return
		}
		r.mu.Lock()
		r.joined[pos] = true
		r.mu.Unlock()
		r.progress(fmt.Sprintf("chaos %v: member %d (restart %d) joined the group %v after its start",
			time.Since(r.t0).Round(100*time.Millisecond), i, k, time.Since(start).Round(10*time.Millisecond)))
	}()
	return nil
}

// monitor calls f every every (default 1 s) with the processes running,
// until the returned stop is called.
func (r *chaosRun) monitor(f func(time.Duration, []ChaosProc), every time.Duration) (stop func()) {
	if f == nil {
		return func() {}
	}
	if every <= 0 {
		every = time.Second
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		f(0, r.live())
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				f(time.Since(r.t0), r.live())
			}
		}
	}()
	return func() { close(quit); <-done }
}

// live lists the processes running now that are open and in the group.
func (r *chaosRun) live() []ChaosProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []ChaosProc
	for pos, p := range r.procs {
		select {
		case <-p.exited:
			continue
		default:
		}
		if r.specs[pos].killed || !r.joined[pos] {
			continue
		}
		out = append(out, ChaosProc{Index: r.specs[pos].index, Restart: r.specs[pos].restart, Pid: p.cmd.Process.Pid, Stopped: r.stopped[pos]})
	}
	return out
}
