package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nakcast/nakcast/engine"
)

// memberEnv makes the test binary run MemberMain instead of the tests: the
// netns tests start it as their member processes.
const memberEnv = "NAKCAST_BENCH_MEMBER_PROCESS"

// rawMemberEnv does the same for RawMemberMain.
const rawMemberEnv = "NAKCAST_BENCH_RAW_MEMBER_PROCESS"

func TestMain(m *testing.M) {
	if os.Getenv(memberEnv) == "1" && len(os.Args) > 1 && os.Args[1] == "raw-member" {
		if err := RawMemberMain(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "raw member:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(memberEnv) == "1" && len(os.Args) > 1 && os.Args[1] == "pingpong-member" {
		if err := PingPongMemberMain(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "ping-pong member:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(memberEnv) == "1" {
		if err := MemberMain(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "member:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(attackerEnv) == "1" {
		if err := attackerMain(os.Args[1:], os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, "attacker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(rawMemberEnv) == "1" {
		if err := RawMemberMain(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "raw member:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// needNetns skips without root or iproute2.
func needNetns(t *testing.T) {
	t.Helper()
	if err := CheckNetns(); err != nil {
		t.Skipf("skipping: %v", err)
	}
}

// ourNamespaces lists the namespaces with this process's prefix.
func ourNamespaces(t *testing.T) []string {
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	require.NoError(t, err, string(out))
	var ns []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], NetnsPrefix()) {
			ns = append(ns, f[0])
		}
	}
	return ns
}

// rootLinks lists the links of the namespace the test runs in.
func rootLinks(t *testing.T) string {
	out, err := exec.Command("ip", "-o", "link", "show").CombinedOutput()
	require.NoError(t, err, string(out))
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			names = append(names, strings.Split(f[1], "@")[0])
		}
	}
	return strings.Join(names, " ")
}

func TestNetnsSetupAndTeardown(t *testing.T) {
	needNetns(t)
	before := rootLinks(t)
	ns, err := SetupNetns(context.Background(), 2, 1500)
	require.NoError(t, err, "namespace creation failed: refusing to run anything")
	require.Len(t, ourNamespaces(t), 3)
	require.Equal(t, before, rootLinks(t), "the root namespace's links changed")
	out, err := ns.Command(0, "ip", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "10.199.0.1/24")
	out, err = ns.Command(0, "ping", "-c", "1", "-W", "2", "10.199.0.2").CombinedOutput()
	if _, lerr := exec.LookPath("ping"); lerr == nil {
		require.NoError(t, err, string(out))
	}
	require.NoError(t, ns.Close())
	require.Empty(t, ourNamespaces(t))
	require.Equal(t, before, rootLinks(t))
}

func TestNetnsSetupFailureCleansUp(t *testing.T) {
	needNetns(t)
	_, err := SetupNetns(context.Background(), 2, 100) // MTU refused before anything is made
	require.Error(t, err)
	require.Empty(t, ourNamespaces(t))
}

// TestNetnsThreeMembers: three member processes, one namespace each, 5%
// loss injected at the receivers: every member delivers every message
// exactly once, in order, and the namespaces go. Also with the members
// shaped like the raw bundler (ThreadingInvoked, SendBatch, DiscardOwn:
// the sender records what it sent).
func TestNetnsThreeMembers(t *testing.T) {
	needNetns(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	count := int64(netnsMessages)
	for _, tc := range []struct {
		name string
		mod  func(c *MemberConfig)
	}{
		{"shared", func(*MemberConfig) {}},
		{"invoked+batch+discard-own", func(c *MemberConfig) {
			c.Agent.Threading, c.SendBatch, c.DiscardOwn = engine.ThreadingInvoked, 64, true
		}},
		{"insecure", func(c *MemberConfig) { c.Insecure = true }},
		{"encrypted", func(c *MemberConfig) { c.Encrypt = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := rootLinks(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cfg := MemberConfig{Members: 3, MsgSize: 200, Count: count, LossRate: 0.05, Timeout: time.Minute}
			tc.mod(&cfg)
			rs, err := RunNetns(ctx, NetnsRunConfig{
				Member:   cfg,
				Exe:      []string{exe},
				Env:      []string{memberEnv + "=1"},
				Progress: func(s string) { t.Log(s) },
			})
			require.NoError(t, err)
			require.Empty(t, ourNamespaces(t), "namespaces left behind")
			require.Equal(t, before, rootLinks(t))
			require.Empty(t, Verify(rs))
			var injected, repaired uint64
			for _, r := range rs {
				require.True(t, r.Complete, "member %d", r.Index)
				require.Equal(t, "eth0", r.Interface)
				require.Len(t, r.Senders, 1)
				require.Equal(t, count, r.Senders[0].Delivered, "member %d", r.Index)
				injected += r.Injected
				repaired += r.Stats.Retransmitted
				mode := map[bool]string{false: "signed", true: "encrypted"}[cfg.Encrypt]
				if cfg.Insecure {
					mode = "open"
				}
				require.Equal(t, mode, r.Stats.Auth.Mode, "a namespace run generates a key unless Insecure")
				require.Zero(t, r.Stats.Drops.Auth.Total(), "member %d", r.Index)
			}
			require.Positive(t, injected, "no loss was injected")
			require.Positive(t, repaired, "loss injected but nothing repaired")
			row := GroupRow("netns", "loss 5%", rs, 1472)
			require.True(t, row.Verified, row.Note)
			t.Logf("%s msgs/s, p99 %v, %d repaired", FormatRate(row.MsgsPerSec), time.Duration(row.Latency.P99Ns), row.Retransmitted)
		})
	}
}

func TestNetnsRawBetweenTheSameNamespaces(t *testing.T) {
	needNetns(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	before := rootLinks(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns, err := SetupNetns(ctx, 3, 9000)
	require.NoError(t, err)
	defer ns.Close()
	// 3000 messages of 1 KiB in 8972 B datagrams: 375 datagrams, far less
	// than the receive buffers, so none is lost.
	const count = 3000
	res, rs, err := RunNetnsRaw(ctx, NetnsRawConfig{Raw: RawConfig{MsgSize: 1024, DatagramSize: 8972, Count: count},
		Netns: ns, Exe: []string{exe}, Env: []string{rawMemberEnv + "=1"}, Progress: func(s string) { t.Log(s) }})
	require.NoError(t, err)
	require.Len(t, rs, 3)
	require.Equal(t, int64(count), res.SentMsgs)
	require.Equal(t, int64(count), res.Msgs)
	require.Equal(t, 8, res.MsgsPerDatagram)
	require.Zero(t, res.LossPct)
	require.Positive(t, res.MsgsPerSec)
	for _, r := range rs {
		require.Equal(t, "eth0", r.Interface)
	}
	// The same namespaces then carry a nakcast run.
	mrs, err := RunNetns(ctx, NetnsRunConfig{Member: MemberConfig{Members: 3, MsgSize: 1024, Count: count, Timeout: 30 * time.Second},
		Netns: ns, Exe: []string{exe}, Env: []string{memberEnv + "=1"}})
	require.NoError(t, err)
	require.Empty(t, Verify(mrs))
	require.Len(t, ourNamespaces(t), 4, "namespaces given to the runs are the caller's to delete")
	require.NoError(t, ns.Close())
	require.Empty(t, ourNamespaces(t))
	require.Equal(t, before, rootLinks(t))
}

// TestNetnsCompareTransportsXDP: a short comparison of the AF_XDP and UDP
// backends between namespaces (mcastbench netns -transport xdp,udp): both
// verified, every figure measured, the AF_XDP members on XDP.
func TestNetnsCompareTransportsXDP(t *testing.T) {
	needNetns(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns, err := SetupNetns(ctx, 2, 1500)
	require.NoError(t, err)
	defer ns.Close()
	figs, err := CompareTransports(ctx, TransportCompareConfig{
		Transports: []string{engine.TransportXDP, engine.TransportUDP},
		Member:     MemberConfig{Members: 2, MsgSize: 64, Count: 20000, Timeout: time.Minute, Config: engine.Config{Transport: engine.TransportConfig{NoGSO: true}}},
		Repeat:     1, PingCount: 200, Netns: ns,
		Exe: []string{exe}, PingExe: []string{exe, "pingpong-member"}, RawExe: []string{exe, "raw-member"},
		Env: []string{memberEnv + "=1"},
	})
	require.NoError(t, err)
	var b strings.Builder
	require.NoError(t, WriteTransportTable(&b, figs))
	t.Logf("\n%s", b.String())
	require.Len(t, figs, 2)
	require.NotEmpty(t, figs[0].Mode, "the AF_XDP members ran AF_XDP")
	require.Empty(t, figs[1].Mode)
	for _, f := range figs {
		m := f.Median
		require.True(t, m.Verified, "%s: %s", f.Transport, m.Note)
		require.Positive(t, m.MsgsPerSec, f.Transport)
		require.Positive(t, m.RecvCPUNs, f.Transport)
		require.Positive(t, m.PingP50Ns, f.Transport)
		require.Positive(t, m.RawMsgsPerSec, f.Transport)
		require.Positive(t, m.RawRecvCPUNs, f.Transport)
	}
	require.Contains(t, b.String(), "xdp vs udp: msgs/s")
}
