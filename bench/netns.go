package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Network namespaces for multi-process runs. Everything is created inside
// namespaces this process makes (named NetnsPrefix()...): a bridge
// namespace holding the bridge and one end of each veth pair, and one
// namespace per member holding the other end (eth0) with an address in
// 10.199.0.0/24 and a route for 239.0.0.0/8. Nothing is added to the
// namespace the command runs in, so the host's interfaces, addresses and
// routes are never touched; deleting the namespaces deletes every link.

// NetnsSubnet is the only address range used, and only inside the
// namespaces created here.
var NetnsSubnet = netip.MustParsePrefix("10.199.0.0/24")

// ErrNetnsUnavailable is returned when network namespaces cannot be
// created here (not root, no CAP_NET_ADMIN, no iproute2).
var ErrNetnsUnavailable = errors.New("network namespaces unavailable")

// NetnsPrefix is the name prefix of this process's namespaces.
func NetnsPrefix() string { return fmt.Sprintf("nakcast-%d-", os.Getpid()) }

// CheckNetns reports why namespaces cannot be created here, or nil.
func CheckNetns() error {
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("%w: the ip command (iproute2) is not installed", ErrNetnsUnavailable)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN to create namespaces); run as root", ErrNetnsUnavailable)
	}
	return nil
}

// Netns is a set of member namespaces on a bridge.
type Netns struct {
	prefix  string
	created []string // namespaces, in creation order
	// Members are the member namespaces' names, Addrs their eth0
	// addresses.
	Members []string
	Addrs   []netip.Addr
	MTU     int
}

// SetupNetns creates n member namespaces on a bridge with veth pairs of
// the given MTU (0: 1500). On failure it deletes what it created. The
// caller must Close the result.
func SetupNetns(ctx context.Context, n, mtu int) (*Netns, error) {
	if err := CheckNetns(); err != nil {
		return nil, err
	}
	if n < 1 || n > 250 {
		return nil, fmt.Errorf("bench: netns: %d members: want 1..250", n)
	}
	if mtu == 0 {
		mtu = 1500
	}
	if mtu < 576 || mtu > 65535 {
		return nil, fmt.Errorf("bench: netns: MTU %d: want 576..65535", mtu)
	}
	ns := &Netns{prefix: NetnsPrefix(), MTU: mtu}
	ok := false
	defer func() {
		if !ok {
			_ = ns.Close()
		}
	}()
	br := ns.prefix + "br"
	if err := ns.add(ctx, br); err != nil {
		return nil, err
	}
	m := strconv.Itoa(mtu)
	for _, args := range [][]string{
		{"-n", br, "link", "set", "lo", "up"},
		// Snooping off: with no querier on the bridge, multicast floods to
		// every port, which is what the members need.
		{"-n", br, "link", "add", "br0", "mtu", m, "type", "bridge", "mcast_snooping", "0"},
		{"-n", br, "link", "set", "br0", "up"},
	} {
		if err := ipCmd(ctx, args...); err != nil {
			return nil, err
		}
	}
	for i := range n {
		name := fmt.Sprintf("%sm%d", ns.prefix, i)
		if err := ns.add(ctx, name); err != nil {
			return nil, err
		}
		a := NetnsSubnet.Addr().As4()
		a[3] = byte(i + 1)
		addr := netip.AddrFrom4(a)
		peer := fmt.Sprintf("v%d", i)
		for _, args := range [][]string{
			{"-n", name, "link", "set", "lo", "up"},
			// Both ends are created in namespaces of ours: eth0 in the
			// member's, the peer straight into the bridge's.
			{"-n", name, "link", "add", "eth0", "mtu", m, "type", "veth", "peer", "name", peer, "mtu", m, "netns", br},
			{"-n", br, "link", "set", peer, "master", "br0"},
			{"-n", br, "link", "set", peer, "up"},
			{"-n", name, "addr", "add", netip.PrefixFrom(addr, NetnsSubnet.Bits()).String(), "dev", "eth0"},
			{"-n", name, "link", "set", "eth0", "up"},
			{"-n", name, "route", "add", "239.0.0.0/8", "dev", "eth0"},
		} {
			if err := ipCmd(ctx, args...); err != nil {
				return nil, err
			}
		}
		ns.Members = append(ns.Members, name)
		ns.Addrs = append(ns.Addrs, addr)
	}
	ok = true
	return ns, nil
}

func (ns *Netns) add(ctx context.Context, name string) error {
	if err := ipCmd(ctx, "netns", "add", name); err != nil {
		return err
	}
	ns.created = append(ns.created, name)
	return nil
}

// Close deletes every namespace created (and so every link in them), also
// after a partial setup. It keeps going past errors and returns them
// joined.
func (ns *Netns) Close() error {
	var errs []error
	for i := len(ns.created) - 1; i >= 0; i-- {
		if err := ipCmd(context.Background(), "netns", "del", ns.created[i]); err != nil {
			errs = append(errs, err)
		}
	}
	ns.created = nil
	return errors.Join(errs...)
}

// Created lists the namespaces that exist now (for tests).
func (ns *Netns) Created() []string { return append([]string(nil), ns.created...) }

// Bridge is the name of the namespace that holds the bridge (and the
// bridge's ends of the veth pairs).
func (ns *Netns) Bridge() string { return ns.prefix + "br" }

// Command returns a command running argv in member i's namespace.
func (ns *Netns) Command(i int, argv ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns.Members[i]}, argv...)...)
}

func ipCmd(ctx context.Context, args ...string) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("bench: ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// netnsKeys gives the members of a namespace run their key file: by
// default a key generated for the run (the members are off loopback, where
// open mode must be chosen: Member.Insecure), or Member.Keys written out.
func netnsKeys(mc *MemberConfig, dir string) error {
	var err error
	switch {
	case mc.Insecure || mc.KeyFile != "":
	case len(mc.Keys) == 0:
		mc.Keys, mc.KeyFile, err = WriteKeyFile(dir)
	default:
		mc.KeyFile = filepath.Join(dir, "keys")
		err = writeKeys(mc.KeyFile, mc.Keys)
	}
	return err
}

// NetnsRunConfig configures RunNetns.
type NetnsRunConfig struct {
	// Member is the template of every member (Members, Senders, MsgSize,
	// Count or Duration, Idle...); Interface, Unicast, TTL, Group and
	// RunID are set per run. LossRate applies to the receivers only.
	// Without Keys (or KeyFile) and Insecure the run generates a group key:
	// its datagrams are authenticated (Encrypt: and encrypted).
	Member MemberConfig
	// Netns, if set, are namespaces made by SetupNetns to run in (at least
	// Member.Members of them); the caller keeps them and closes them.
	// Otherwise RunNetns makes its own and always deletes them.
	Netns *Netns
	// MTU of the veth pairs and the bridge (default 1500) when RunNetns
	// makes the namespaces.
	MTU int
	// Exe is the member program and its leading arguments, for example
	// {"/usr/bin/mcastbench", "member"}; MemberArgs are appended.
	Exe []string
	// Env is added to the member processes' environment.
	Env []string
	// Kill, if set, is called with member i's process once all are
	// running (tests kill one).
	Kill func(i int, p *os.Process)
	// Progress, if set, receives one line per step.
	Progress func(string)
	// Pcap, if set, is a directory where eth0 of each member namespace is
	// captured while the members run (CaptureFile(i), with the Wireshark
	// dissector beside them); PcapSnapLen keeps at most that many bytes of
	// each frame (0: all).
	Pcap        string
	PcapSnapLen int
	// EgressLoss, if positive, drops that fraction of the UDP datagrams
	// every member sends, in its namespace (nftables, Netns.DropEgress:
	// loss near the sender, for every receiver); each member's result
	// gets the drop counts (MemberResult.NetDrops). Use with NoGSO.
	EgressLoss float64
	// Chaos, if set, is run on the member processes from the start of
	// sending (ParseChaos; ChaosSchedule.Check it against the run first;
	// Kill is not called then). A killed member's missing result is no
	// error; each restart's result follows the members' in the results
	// (MemberResult.Restart), in restart order.
	Chaos ChaosSchedule
	// LinkLoss, if positive, drops that fraction of the UDP datagrams
	// arriving at every member (nftables in its namespace: loss on each
	// member's link, independent per receiver); it makes a chaos run
	// even without a schedule.
	LinkLoss float64
	// Monitor, if set, is called during a chaos run every MonitorEvery
	// (default 1 s) with the member processes running then.
	Monitor      func(elapsed time.Duration, live []ChaosProc)
	MonitorEvery time.Duration
}

// NetnsGroup is the group of runs in namespaces: it only exists inside
// them.
var NetnsGroup = netip.MustParseAddrPort("239.77.1.1:45600")

// NetnsUnicastPort is the unicast port of every member of RunNetns, each
// alone in its namespace: the members know each other's addresses from
// the start (MemberConfig.Addrs).
const NetnsUnicastPort = 45601

// RunNetns runs one member process per namespace (making the namespaces
// unless cfg.Netns is set), starts them together, waits for them and
// returns their results in view order (a member that wrote none has a zero
// result). Namespaces it made are always deleted before it returns;
// cancelling ctx sends SIGINT to the members (they finish their streams and
// report) and, if they do not exit within 10 s, SIGKILL.
func RunNetns(ctx context.Context, cfg NetnsRunConfig) ([]MemberResult, error) {
	if len(cfg.Exe) == 0 {
		return nil, errors.New("bench: RunNetns: Exe is empty")
	}
	mc := cfg.Member
	if mc.Members == 0 {
		mc.Members = 3
	}
	if len(mc.Senders) == 0 {
		mc.Senders = []int{0}
	}
	mc.RunID = RandomRunID()
	mc.Group = NetnsGroup
	mc.Interface = "eth0"
	mc.Network.TTL = 1
	mc.Network.AllowNonLoopback = true
	mc.Transport.NoLoopback = true // one member per namespace: nobody local to loop back to
	if _, err := mc.withDefaults(); err != nil {
		return nil, err
	}
	progress := progressFunc(cfg.Progress)
	ns, done, err := useNetns(ctx, cfg.Netns, mc.Members, cfg.MTU, progress)
	if err != nil {
		return nil, err
	}
	defer done()
	dir, err := os.MkdirTemp("", "nakcast-netns-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := netnsKeys(&mc, dir); err != nil {
		return nil, err
	}

	senders := map[int]bool{}
	for _, s := range mc.Senders {
		senders[s] = true
	}
	specs := make([]procSpec, mc.Members)
	mc.Membership.MemberAddrs = make([]netip.AddrPort, mc.Members)
	for i := range mc.Membership.MemberAddrs {
		mc.Membership.MemberAddrs[i] = netip.AddrPortFrom(ns.Addrs[i], NetnsUnicastPort)
	}
	spec := func(i, restart int) procSpec {
		c := mc
		c.Index = i
		c.Network.Unicast = mc.Membership.MemberAddrs[i]
		if senders[i] {
			c.LossRate = 0
		}
		out := filepath.Join(dir, fmt.Sprintf("member%d.json", i))
		if restart > 0 {
			c.Join = true
			out = filepath.Join(dir, fmt.Sprintf("member%d.r%d.json", i, restart))
		}
		return procSpec{argv: append(append([]string(nil), cfg.Exe...), MemberArgs(c, out, true)...), out: out, index: i, restart: restart}
	}
	for i := range specs {
		specs[i] = spec(i, 0)
	}
	if cfg.EgressLoss > 0 {
		if err := ns.egressLoss(ctx, mc.Members, cfg.EgressLoss); err != nil {
			return nil, err
		}
		defer ns.clearEgress(mc.Members)
	}
	stopCaptures, err := startCaptures(ns, mc.Members, cfg.Pcap, cfg.PcapSnapLen, progress)
	if err != nil {
		return nil, err
	}
	var procErr error
	if len(cfg.Chaos) > 0 || cfg.LinkLoss > 0 {
		specs, procErr = runChaosProcs(ctx, ns, specs, cfg, spec, progress)
	} else {
		procErr = runNetnsProcs(ctx, ns, specs, cfg.Env, cfg.Kill, progress)
	}
	errs := []error{procErr, stopCaptures()}
	results := make([]MemberResult, len(specs))
	for i, sp := range specs {
		results[i].Index, results[i].Restart, results[i].Killed = sp.index, sp.restart, sp.killed
		b, err := os.ReadFile(sp.out)
		if err != nil {
			if !sp.killed {
				errs = append(errs, fmt.Errorf("bench: member %d (restart %d) wrote no result", sp.index, sp.restart))
			}
			continue
		}
		if err := json.Unmarshal(b, &results[i]); err != nil {
			errs = append(errs, fmt.Errorf("bench: member %d: result: %w", i, err))
		}
		results[i].Restart, results[i].Killed = sp.restart, sp.killed
	}
	if cfg.EgressLoss > 0 {
		ns.netDrops(ctx, results)
	}
	return results, errors.Join(errs...)
}

// NetnsRawConfig configures RunNetnsRaw.
type NetnsRawConfig struct {
	// Raw gives the message and datagram sizes, Duration or Count, Batch,
	// RecvBuffer and Drain; Group, Interface, Unicast, TTL and
	// AllowNonLoopback are set by RunNetnsRaw (the namespaces' eth0).
	Raw RawConfig
	// Members is the number of member processes (default 3): member 0
	// sends, the others receive.
	Members int
	// Netns, MTU, Exe (for example {"/usr/bin/mcastbench", "raw-member"};
	// RawMemberArgs are appended), Env and Progress are as in
	// NetnsRunConfig.
	Netns    *Netns
	MTU      int
	Exe      []string
	Env      []string
	Progress func(string)
}

// RunNetnsRaw measures the raw bundler between namespaces: one raw member
// process per namespace, member 0 sending, the others receiving, started
// together like RunNetns. It returns the combined result (the slowest
// receiver's rate, from the sender's first send to that receiver's last
// datagram, CLOCK_MONOTONIC being shared by the processes) and every
// member's own.
func RunNetnsRaw(ctx context.Context, cfg NetnsRawConfig) (RawResult, []RawMemberResult, error) {
	if len(cfg.Exe) == 0 {
		return RawResult{}, nil, errors.New("bench: RunNetnsRaw: Exe is empty")
	}
	if cfg.Members == 0 {
		cfg.Members = 3
	}
	if cfg.Members < 2 {
		return RawResult{}, nil, fmt.Errorf("bench: RunNetnsRaw: Members %d: want at least 2 (a sender and a receiver)", cfg.Members)
	}
	rc := cfg.Raw
	rc.Group, rc.Interface, rc.TTL, rc.AllowNonLoopback, rc.Receivers = NetnsGroup, "eth0", 1, true, cfg.Members-1
	if rc.Drain == 0 {
		rc.Drain = 500 * time.Millisecond // separate processes: allow for a scheduling hiccup
	}
	if _, err := rc.withDefaults(); err != nil {
		return RawResult{}, nil, err
	}
	progress := progressFunc(cfg.Progress)
	ns, done, err := useNetns(ctx, cfg.Netns, cfg.Members, cfg.MTU, progress)
	if err != nil {
		return RawResult{}, nil, err
	}
	defer done()
	dir, err := os.MkdirTemp("", "nakcast-netns-raw-")
	if err != nil {
		return RawResult{}, nil, err
	}
	defer os.RemoveAll(dir)
	specs := make([]procSpec, cfg.Members)
	for i := range specs {
		c := RawMemberConfig{Raw: rc, Index: i, Send: i == 0}
		c.Raw.Unicast = netip.AddrPortFrom(ns.Addrs[i], 0)
		out := filepath.Join(dir, fmt.Sprintf("raw%d.json", i))
		specs[i] = procSpec{argv: append(append([]string(nil), cfg.Exe...), RawMemberArgs(c, out, true)...), out: out}
	}
	errs := []error{runNetnsProcs(ctx, ns, specs, cfg.Env, nil, progress)}
	results := make([]RawMemberResult, cfg.Members)
	for i, sp := range specs {
		results[i].Index = i
		b, err := os.ReadFile(sp.out)
		if err != nil {
			errs = append(errs, fmt.Errorf("bench: raw member %d wrote no result", i))
			continue
		}
		if err := json.Unmarshal(b, &results[i]); err != nil {
			errs = append(errs, fmt.Errorf("bench: raw member %d: result: %w", i, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return RawResult{}, results, err
	}
	res, err := CombineRaw(results)
	return res, results, err
}

func progressFunc(f func(string)) func(string) {
	if f == nil {
		return func(string) {}
	}
	return f
}

// useNetns returns the namespaces given, or makes n of them; done deletes
// the ones it made.
func useNetns(ctx context.Context, given *Netns, n, mtu int, progress func(string)) (*Netns, func(), error) {
	if given != nil {
		if len(given.Members) < n {
			return nil, nil, fmt.Errorf("bench: netns: %d members, only %d namespaces", n, len(given.Members))
		}
		return given, func() {}, nil
	}
	if mtu == 0 {
		mtu = 1500
	}
	progress(fmt.Sprintf("creating %d namespaces %s* (bridge, veth MTU %d)", n, NetnsPrefix(), mtu))
	ns, err := SetupNetns(ctx, n, mtu)
	if err != nil {
		return nil, nil, err
	}
	return ns, func() {
		progress("deleting the namespaces")
		_ = ns.Close()
	}, nil
}

// procSpec is one member process: its command line and result file;
// with a chaos schedule also its member index, restart (0: started with
// the run) and whether the schedule killed it.
type procSpec struct {
	argv           []string
	out            string
	index, restart int
	killed         bool
}

// memberProc is one member process started in its namespace.
type memberProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	ready  chan error
	done   chan error
	exited chan struct{} // closed once it exited (done may be read once)
}

// startMemberProc starts argv in member namespace i, in a process group of
// its own (a Ctrl-C at the terminal reaches the members through us, in
// order). ready gets nil once it printed ReadyLine (or an error if it
// exits first); done gets its exit.
func startMemberProc(ns *Netns, i int, argv, env []string) (*memberProc, error) {
	p := &memberProc{ready: make(chan error, 1), done: make(chan error, 1), exited: make(chan struct{})}
	p.cmd = ns.Command(i, argv...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: member %d: %w", i, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == ReadyLine {
				p.ready <- nil
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
		}
		p.ready <- errors.New("exited before it was ready")
	}()
	go func() {
		err := p.cmd.Wait()
		close(p.exited)
		p.done <- err
		close(p.done)
	}()
	return p, nil
}

// waitReady waits until p (member i) is open.
func (p *memberProc) waitReady(ctx context.Context, i int) error {
	select {
	case err := <-p.ready:
		if err != nil {
			<-p.exited // stderr complete
			return fmt.Errorf("bench: member %d %s: %s", i, err, strings.TrimSpace(p.stderr.String()))
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return fmt.Errorf("bench: member %d: not open after 30s: %s", i, strings.TrimSpace(p.stderr.String()))
	}
}

// reap kills p unless it has exited, and waits for it: no member process
// outlives a run.
func (p *memberProc) reap() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies too
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// startMemberProcs starts specs[i] in member namespace i, waits until
// every one is open and writes the start line to all.
func startMemberProcs(ctx context.Context, ns *Netns, specs []procSpec, env []string, progress func(string)) ([]*memberProc, error) {
	procs := make([]*memberProc, len(specs))
	for i, sp := range specs {
		p, err := startMemberProc(ns, i, sp.argv, env)
		if err != nil {
			return procs, err
		}
		procs[i] = p
	}
	progress(fmt.Sprintf("started %d member processes; waiting until every one is open", len(procs)))
	for i, p := range procs {
		if err := p.waitReady(ctx, i); err != nil {
			return procs, err
		}
	}
	for _, p := range procs {
		_, _ = p.stdin.Write([]byte("go\n"))
	}
	progress("running")
	return procs, nil
}

// signalAll sends sig to every process of procs still running.
func signalAll(procs []*memberProc, sig syscall.Signal) {
	for _, p := range procs {
		if p != nil && p.cmd.Process != nil {
			_ = p.cmd.Process.Signal(sig)
		}
	}
}

// waitMemberProcs waits for procs to exit; cancelling ctx sends SIGINT to
// all, then SIGKILL after 10 s. A process for which expected(i) says so
// may die of a signal without it being an error.
func waitMemberProcs(ctx context.Context, procs []*memberProc, expected func(i int) bool) error {
	var errs []error
	interrupted := false
	for i, p := range procs {
	wait:
		for {
			select {
			case err := <-p.done:
				if err != nil && (expected == nil || !expected(i)) {
					errs = append(errs, fmt.Errorf("bench: member %d: %v: %s", i, err, strings.TrimSpace(p.stderr.String())))
				}
				break wait
			case <-ctx.Done():
				if !interrupted {
					interrupted = true
					signalAll(procs, syscall.SIGCONT)
					signalAll(procs, syscall.SIGINT)
					t := time.AfterFunc(10*time.Second, func() { signalAll(procs, syscall.SIGKILL) })
					defer t.Stop()
				}
				ctx = context.Background()
			}
		}
	}
	return errors.Join(errs...)
}

// runNetnsProcs runs specs[i] in member namespace i with -wait-start
// semantics: it waits until every process printed ReadyLine, writes the
// start line to all, calls kill (if set) for each, and waits for every one
// to exit. Cancelling ctx sends SIGINT to all, then SIGKILL after 10 s. No
// process outlives the call.
func runNetnsProcs(ctx context.Context, ns *Netns, specs []procSpec, env []string, kill func(int, *os.Process), progress func(string)) error {
	procs, err := startMemberProcs(ctx, ns, specs, env, progress)
	defer func() {
		for _, p := range procs {
			p.reap()
		}
	}()
	if err != nil {
		return err
	}
	if kill != nil {
		for i, p := range procs {
			kill(i, p.cmd.Process)
		}
	}
	return waitMemberProcs(ctx, procs, nil)
}
