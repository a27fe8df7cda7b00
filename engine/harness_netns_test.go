//go:build linux

package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nakcast/nakcast/bench"
	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine"
	"github.com/stretchr/testify/require"
)

// Multi-process harness: namespaces from bench.SetupNetns (a bridge in a
// namespace of its own, one namespace per member with eth0 on a veth pair,
// MTU 1500, addresses in 10.199.0.0/24 only inside them), one member
// process per namespace (netnsMemberMain), and the test following each
// member through the lines it prints. Everything is torn down by
// t.Cleanup, also when the test fails: processes killed and reaped first,
// then the namespaces deleted.

// needNetns skips the test unless namespaces can be made here: iproute2,
// root, and CAP_NET_ADMIN and CAP_SYS_ADMIN in the effective set.
func needNetns(t *testing.T) {
	t.Helper()
	if err := bench.CheckNetns(); err != nil {
		t.Skipf("skipping the multi-process namespace test: %v", err)
	}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("skipping the multi-process namespace test: cannot read capabilities: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Skipf("skipping the multi-process namespace test: CapEff %q: %v", v, err)
			}
			const netAdmin, sysAdmin = 12, 21
			if caps&(1<<netAdmin) == 0 || caps&(1<<sysAdmin) == 0 {
				t.Skipf("skipping the multi-process namespace test: needs CAP_NET_ADMIN and CAP_SYS_ADMIN (CapEff %s)", strings.TrimSpace(v))
			}
		}
	}
}

// rootLinks lists the links of the namespace the test runs in, which the
// test must leave alone.
func rootLinks(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link", "show").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			names = append(names, strings.Split(f[1], "@")[0])
		}
	}
	return strings.Join(names, " ")
}

// netnsRun is one test's namespaces and member processes.
type netnsRun struct {
	t     *testing.T
	ns    *bench.Netns
	exe   string
	dir   string
	ids   []uint64 // member i's ID
	procs []*netnsProc
	keys  string // the run's group key file
}

// newNetnsRun makes n member namespaces (deleted at test end).
func newNetnsRun(t *testing.T, n int) *netnsRun {
	t.Helper()
	needNetns(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := rootLinks(t)
	ns, err := bench.SetupNetns(ctx, n, 1500)
	require.NoError(t, err, "creating the namespaces")
	t.Cleanup(func() {
		if err := ns.Close(); err != nil {
			t.Errorf("deleting the namespaces: %v", err)
		}
		if after := rootLinks(t); after != before {
			t.Errorf("the test's own namespace's links changed: %q before, %q after", before, after)
		}
	})
	r := &netnsRun{t: t, ns: ns, exe: exe, dir: t.TempDir(), procs: make([]*netnsProc, n)}
	_, r.keys, err = bench.WriteKeyFile(r.dir)
	require.NoError(t, err)
	base := rand.Uint64()&^0xffff | 0x10000
	for i := range n {
		r.ids = append(r.ids, base+uint64(i+1))
	}
	return r
}

// config returns member i's default role: dynamic membership on the
// namespaces' group, 5% receive loss, failure detection slow enough for a
// loaded 2-core machine running several race-instrumented processes.
// configs returns every member's configuration: members 0..senders-1
// send n messages each, paced over pace (0: as fast as they can), and
// every member expects n from each of them; mod, if not nil, adjusts
// member i's afterwards.
func (r *netnsRun) configs(senders, n int, pace time.Duration, mod func(i int, c *netnsMemberConfig)) []netnsMemberConfig {
	cfgs := make([]netnsMemberConfig, len(r.ids))
	for i := range cfgs {
		c := r.config(i)
		if i < senders {
			c.Send = n
			if pace > 0 {
				c.RateLimit = netnsRate(n, pace)
			}
		}
		c.Expect, c.PerSender = r.ids[:senders], n
		if mod != nil {
			mod(i, &c)
		}
		cfgs[i] = c
	}
	return cfgs
}

func (r *netnsRun) config(i int) netnsMemberConfig {
	suspect := engine.NetnsSuspect
	return netnsMemberConfig{
		Index:             i,
		ID:                r.ids[i],
		Group:             bench.NetnsGroup,
		Unicast:           netip.AddrPortFrom(r.ns.Addrs[i], 0),
		LossRate:          0.05,
		LossSeed:          rand.Uint64(),
		HeartbeatInterval: 100 * time.Millisecond,
		SuspectTimeout:    suspect,
		ProbeTimeout:      500 * time.Millisecond,
		DiscoveryTimeout:  500 * time.Millisecond,
		Result:            filepath.Join(r.dir, fmt.Sprintf("result%d.json", i)),
		KeyFile:           r.keys,
	}
}

// netnsState is what the test knows of a member process from its lines.
type netnsState struct {
	open       bool
	self       digest.Member
	view       digest.ViewID
	members    []uint64
	counts     map[uint64]int
	cutsClosed uint64
	done       bool
	sent       bool
	left       []string
	exited     bool
	exitErr    error
	lines      []string // the last few
}

// netnsProc is one member process.
type netnsProc struct {
	i      int
	cmd    *exec.Cmd
	stdin  interface{ Write([]byte) (int, error) }
	stderr lockedBuffer
	result string
	killed bool

	mu      sync.Mutex
	st      netnsState
	changed chan struct{} // closed and replaced on every change
	exited  chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// start runs member cfg.Index in its namespace. The process is killed and
// reaped at test end whatever happens.
func (r *netnsRun) start(cfg netnsMemberConfig) *netnsProc {
	t := r.t
	t.Helper()
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	path := filepath.Join(r.dir, fmt.Sprintf("member%d.json", cfg.Index))
	require.NoError(t, os.WriteFile(path, b, 0o600))
	p := &netnsProc{i: cfg.Index, result: cfg.Result, changed: make(chan struct{}), exited: make(chan struct{})}
	p.st.counts = map[uint64]int{}
	// ip netns exec execs the binary in place (no fork): the member is
	// the process we start, and dies with us (Pdeathsig).
	p.cmd = r.ns.Command(cfg.Index, r.exe, "-test.run=^$")
	p.cmd.Env = append(os.Environ(), netnsMemberEnv+"="+path)
	p.cmd.Stderr = &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := p.cmd.StdinPipe()
	require.NoError(t, err)
	p.stdin = stdin
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start(), "member %d", cfg.Index)
	r.procs[cfg.Index] = p
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var l netnsLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				p.update(func(st *netnsState) { st.lines = append(st.lines, "unparsed: "+sc.Text()) })
				continue
			}
			text := sc.Text()
			p.update(func(st *netnsState) {
				if l.Ev != "status" {
					st.lines = append(st.lines, text)
				}
				switch l.Ev {
				case "open":
					st.open, st.self = true, l.Self
				case "view":
					st.view, st.members = l.View, l.Members
				case "status":
					st.counts, st.cutsClosed = l.Counts, l.CutsClosed
				case "done":
					st.done = true
				case "sent":
					st.sent = true
				case "left":
					st.left = append(st.left, l.Err)
				}
			})
		}
		err := p.cmd.Wait()
		p.update(func(st *netnsState) { st.exited, st.exitErr = true, err })
		close(p.exited)
	}()
	return p
}

func (p *netnsProc) update(f func(*netnsState)) {
	p.mu.Lock()
	f(&p.st)
	if n := len(p.st.lines); n > 30 {
		p.st.lines = slices.Delete(p.st.lines, 0, n-30)
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// command writes a command line to the member.
func (p *netnsProc) command(r *netnsRun, cmd string) {
	_, err := p.stdin.Write([]byte(cmd + "\n"))
	require.NoError(r.t, err, "member %d: command %q", p.i, cmd)
}

// waitFor waits until cond (called with the state locked) holds; it fails
// the test, with every member's state and logs, if ctx ends first or the
// member exits first (or leaves the group: an exclusion by mistake).
func (r *netnsRun) waitFor(ctx context.Context, p *netnsProc, what string, cond func(*netnsState) bool) {
	r.t.Helper()
	for {
		p.mu.Lock()
		ok := cond(&p.st)
		exited, left := p.st.exited, len(p.st.left) > 0
		ch := p.changed
		p.mu.Unlock()
		switch {
		case ok:
			return
		case exited:
			r.t.Fatalf("member %d exited while the test waited for %s\n%s", p.i, what, r.dump())
		case left:
			r.t.Fatalf("member %d left the group (excluded by mistake?) while the test waited for %s\n%s", p.i, what, r.dump())
		}
		select {
		case <-ch:
		case <-ctx.Done():
			r.t.Fatalf("member %d: %s: %v\n%s", p.i, what, context.Cause(ctx), r.dump())
		}
	}
}

// dump describes every member process for a failure message.
func (r *netnsRun) dump() string {
	var b strings.Builder
	for _, p := range r.procs {
		if p == nil {
			continue
		}
		p.mu.Lock()
		st := p.st
		p.mu.Unlock()
		fmt.Fprintf(&b, "--- member %d (ID %d): open %v self %v view %v members %v counts %v cuts %d done %v sent %v exited %v (%v) killed %v\n",
			p.i, r.ids[p.i], st.open, st.self, st.view, st.members, st.counts, st.cutsClosed, st.done, st.sent, st.exited, st.exitErr, p.killed)
		for _, l := range st.lines {
			fmt.Fprintf(&b, "    %s\n", l)
		}
		if s := p.stderr.String(); s != "" {
			if len(s) > 4000 {
				s = "..." + s[len(s)-4000:]
			}
			fmt.Fprintf(&b, "  stderr:\n%s\n", s)
		}
	}
	return b.String()
}

// startJoined starts the members of cfgs one after another, each once the
// previous one is open (joined), so they join one group through discovery
// in order.
func (r *netnsRun) startJoined(ctx context.Context, cfgs ...netnsMemberConfig) []*netnsProc {
	r.t.Helper()
	var ps []*netnsProc
	for _, c := range cfgs {
		p := r.start(c)
		r.waitFor(ctx, p, "open (joined)", func(st *netnsState) bool { return st.open })
		ps = append(ps, p)
	}
	return ps
}

// waitView waits until every member of ps has installed the same view,
// whose members are exactly ps, and returns it.
func (r *netnsRun) waitView(ctx context.Context, ps []*netnsProc) (digest.ViewID, []uint64) {
	r.t.Helper()
	var want []uint64
	for _, p := range ps {
		want = append(want, r.ids[p.i])
	}
	slices.Sort(want)
	for {
		for _, p := range ps {
			r.waitFor(ctx, p, fmt.Sprintf("a view of members %v", want), func(st *netnsState) bool {
				return slices.Equal(want, slices.Sorted(slices.Values(st.members)))
			})
		}
		var ids []digest.ViewID
		var members []uint64
		for _, p := range ps {
			p.mu.Lock()
			ids = append(ids, p.st.view)
			members = p.st.members
			p.mu.Unlock()
		}
		top := slices.MaxFunc(ids, func(a, b digest.ViewID) int { return cmpCounter(a.Counter, b.Counter) })
		if slices.IndexFunc(ids, func(id digest.ViewID) bool { return id != top }) < 0 {
			return top, members
		}
		// Some member has not installed the latest view yet.
		for _, p := range ps {
			r.waitFor(ctx, p, fmt.Sprintf("view %v", top), func(st *netnsState) bool { return st.view.Counter >= top.Counter })
		}
	}
}

func cmpCounter(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// finish closes the members of ps one at a time, last first (graceful
// leaves, one view change each), and returns their results in ps order.
func (r *netnsRun) finish(ctx context.Context, ps []*netnsProc) []netnsResult {
	r.t.Helper()
	res := make([]netnsResult, len(ps))
	for k := len(ps) - 1; k >= 0; k-- {
		p := ps[k]
		p.command(r, "close")
		select {
		case <-p.exited:
		case <-ctx.Done():
			r.t.Fatalf("member %d did not exit after close: %v\n%s", p.i, context.Cause(ctx), r.dump())
		}
		p.mu.Lock()
		err := p.st.exitErr
		p.mu.Unlock()
		require.NoError(r.t, err, "member %d exit\n%s", p.i, r.dump())
		b, err := os.ReadFile(p.result)
		require.NoError(r.t, err, "member %d result", p.i)
		require.NoError(r.t, json.Unmarshal(b, &res[k]), "member %d result", p.i)
		require.Empty(r.t, res[k].CloseErr, "member %d Close", p.i)
		require.Empty(r.t, res[k].Left, "member %d was excluded by mistake", p.i)
	}
	return res
}

// deliverExactly runs a stream on joined members ps: once they share a
// view, members 0..senders-1 send n messages each; every member must
// deliver them all with no view change meanwhile. It closes the members
// and checks that each delivered every message of every sender exactly
// once, in order, returning their results.
func (r *netnsRun) deliverExactly(ctx context.Context, ps []*netnsProc, senders, n int) []netnsResult {
	t := r.t
	t.Helper()
	id, _ := r.waitView(ctx, ps)
	t.Logf("view %v installed at every member", id)
	for _, p := range ps[:senders] {
		p.command(r, "go")
	}
	for _, p := range ps {
		r.waitFor(ctx, p, "every message delivered", func(st *netnsState) bool { return st.done })
	}
	for _, p := range ps {
		p.mu.Lock()
		require.Equal(t, id, p.st.view, "member %d: no view change while the messages flowed", p.i)
		p.mu.Unlock()
	}
	res := r.finish(ctx, ps)
	for k := range senders {
		r.requireExact(res, k, n, false)
	}
	return res
}

// kill sends SIGKILL to p and reaps it.
func (r *netnsRun) kill(p *netnsProc) {
	p.killed = true
	require.NoError(r.t, p.cmd.Process.Kill())
	<-p.exited
}

// requireExact checks that every result delivered all n messages of
// sender index k exactly once, in order (count and order-sensitive hash),
// with no lost range.
func (r *netnsRun) requireExact(res []netnsResult, k, n int, small bool) {
	r.t.Helper()
	want, _ := netnsExpectedHash(k, n, small, nil)
	for _, x := range res {
		s, err := x.sender(r.ids[k])
		require.NoError(r.t, err)
		require.Equal(r.t, n, s.Count, "member %d: messages of sender %d", x.Index, k)
		require.Equal(r.t, want, s.Hash, "member %d: hash of sender %d's messages", x.Index, k)
		require.Empty(r.t, s.Errs, "member %d: sender %d order", x.Index, k)
		require.Empty(r.t, s.Lost, "member %d: sender %d lost ranges", x.Index, k)
	}
}

// requireInjected checks that loss was injected and that nobody reported
// a lost range.
func requireInjected(t *testing.T, res []netnsResult) {
	t.Helper()
	var injected, retrans, naks uint64
	for _, x := range res {
		injected += x.Injected
		retrans += x.Stats.Retransmitted
		naks += x.Stats.NakSent
	}
	require.NotZero(t, injected, "no loss injected")
	require.NotZero(t, retrans, "no repairs")
	t.Logf("datagrams dropped by injected loss: %d; NAKs sent %d, messages retransmitted %d", injected, naks, retrans)
}
