//go:build linux

package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nakcast/nakcast/bench"
	"github.com/nakcast/nakcast/ebpf"
	"github.com/nakcast/nakcast/engine"
)

// The AF_XDP backend in groups of member processes (the harness of
// netns_test.go): members on a bridge, some or all of them with
// Transport "xdp", and loss injected by nftables rules in the bridge's
// namespace that drop 5% of the UDP datagrams each member sends
// (bench.Netns.DropEgress). The rules sit in the bridge because the
// member namespaces' own netfilter hooks never see AF_XDP traffic: XDP
// takes the group's frames before the stack, and AF_XDP sends past it.
// Every test checks, at its end and after a SIGKILL, that no XDP program
// is left on any interface.

// xdpNetnsRun is newNetnsRun for AF_XDP tests: nftables is needed, and
// the namespaces are checked for XDP programs before they are deleted.
func xdpNetnsRun(t *testing.T, n int) *netnsRun {
	t.Helper()
	needNetns(t)
	if err := bench.CheckNft(); err != nil {
		t.Skipf("skipping the AF_XDP namespace test: %v", err)
	}
	r := newNetnsRun(t, n)
	t.Cleanup(func() { r.requireNoXDP(t) }) // before the namespaces go
	return r
}

// dropNearSenders makes the bridge drop pct of the UDP datagrams every
// member sends, before it floods them (bench.Netns.DropEgress: a dropped
// multicast is lost for every receiver), and returns a function reading
// how many it dropped.
func (r *netnsRun) dropNearSenders(ctx context.Context, p float64) func() uint64 {
	t := r.t
	t.Helper()
	for i := range r.ns.Members {
		require.NoError(t, r.ns.DropEgress(ctx, i, p))
	}
	return func() uint64 {
		var n uint64
		for i := range r.ns.Members {
			d, err := r.ns.EgressDrops(ctx, i)
			require.NoError(t, err)
			n += d.Data + d.Other
		}
		return n
	}
}

// requireNoXDP fails the test if an XDP program is attached to any
// interface of the run's namespaces, polling a while: the kernel
// detaches a dead process's program as it closes its files.
func (r *netnsRun) requireNoXDP(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := r.xdpAttached(t)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("XDP programs left attached: %v", left)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// xdpAttached lists the XDP programs in the run's namespaces (only
// member i's when i >= 0).
func (r *netnsRun) xdpAttached(t *testing.T, only ...int) []string {
	names := append([]string{r.ns.Bridge()}, r.ns.Members...)
	if len(only) > 0 {
		names = []string{r.ns.Members[only[0]]}
	}
	var left []string
	for _, name := range names {
		require.NoError(t, bench.InNetns(name, func() error {
			att, err := ebpf.AttachedPrograms()
			for _, a := range att {
				left = append(left, fmt.Sprintf("%s/%s: program %d", name, a.Interface, a.ProgramID))
			}
			return err
		}))
	}
	return left
}

// requireXDPUsed checks which members ran the AF_XDP backend.
func requireXDPUsed(t *testing.T, res []netnsResult, xdp func(i int) bool) {
	t.Helper()
	for _, x := range res {
		mode := x.Stats.Socket.XDP.Mode
		if xdp(x.Index) {
			require.NotEmpty(t, mode, "member %d ran AF_XDP", x.Index)
			require.Zero(t, x.Stats.Socket.XDP.Malformed+x.Stats.Socket.XDP.RxInvalidDescs, "member %d: %+v", x.Index, x.Stats.Socket.XDP)
		} else {
			require.Empty(t, mode, "member %d ran UDP", x.Index)
		}
	}
}

// requireRepaired checks that the bridge dropped frames, that repairs
// made up for them and that nobody reported a lost range.
func requireRepaired(t *testing.T, res []netnsResult, dropped uint64) {
	t.Helper()
	var retrans, naks uint64
	for _, x := range res {
		retrans += x.Stats.Retransmitted
		naks += x.Stats.NakSent
	}
	require.NotZero(t, dropped, "the bridge dropped nothing")
	require.NotZero(t, retrans, "no repairs")
	t.Logf("frames dropped by the bridge: %d; NAKs sent %d, messages retransmitted %d", dropped, naks, retrans)
}

// xdpConfigs is configs with nftables loss instead of the engine's
// injected loss, and member i on AF_XDP where xdp(i).
func (r *netnsRun) xdpConfigs(senders, n int, xdp func(i int) bool) []netnsMemberConfig {
	return r.configs(senders, n, 0, func(i int, c *netnsMemberConfig) {
		c.LossRate = 0
		if xdp(i) {
			c.Transport = engine.TransportXDP
		}
	})
}

// runXDPGroup runs members with the given transports, three of them (or
// all, if fewer) sending, under 5% loss in the bridge, and checks exact
// delivery.
func runXDPGroup(t *testing.T, members int, xdp func(i int) bool) {
	senders := min(3, members)
	n := netnsCount()
	r := xdpNetnsRun(t, members)
	ctx, cancel := context.WithTimeout(context.Background(), engine.NetnsTimeout)
	defer cancel()
	dropped := r.dropNearSenders(ctx, 0.05)
	ps := r.startJoined(ctx, r.xdpConfigs(senders, n, xdp)...)
	res := r.deliverExactly(ctx, ps, senders, n)
	requireXDPUsed(t, res, xdp)
	requireRepaired(t, res, dropped())
	r.requireNoXDP(t)
}

// TestXDPNetnsMixedGroup: four members, member 1 on AF_XDP and the others
// on UDP, members 0..2 sending, 5% loss: every member delivers every
// message of every sender exactly once, in order.
func TestXDPNetnsMixedGroup(t *testing.T) {
	runXDPGroup(t, 4, func(i int) bool { return i == 1 })
}

// TestXDPNetnsAllXDP: three members, all on AF_XDP and all sending, 5%
// loss: exact delivery as over UDP.
func TestXDPNetnsAllXDP(t *testing.T) {
	runXDPGroup(t, 3, func(int) bool { return true })
}

// TestXDPNetnsMemberKilled: four members on AF_XDP, two sending (paced),
// 5% loss; an AF_XDP receiver is killed with SIGKILL mid-run: its
// interface has no XDP program left, the survivors exclude it and finish
// exactly.
func TestXDPNetnsMemberKilled(t *testing.T) {
	const members, senders, victim = 4, 2, 3
	n := netnsCount()
	r := xdpNetnsRun(t, members)
	ctx, cancel := context.WithTimeout(context.Background(), engine.NetnsTimeout)
	defer cancel()
	dropped := r.dropNearSenders(ctx, 0.05)
	cfgs := r.configs(senders, n, 2*time.Second, func(_ int, c *netnsMemberConfig) {
		c.LossRate, c.Window, c.Transport = 0, 256, engine.TransportXDP
	})
	ps := r.startJoined(ctx, cfgs...)
	r.waitView(ctx, ps)
	require.Len(t, r.xdpAttached(t), members, "one program per member")
	for _, p := range ps[:senders] {
		p.command(r, "go")
	}
	r.waitFor(ctx, ps[victim], "a quarter of the messages delivered", func(st *netnsState) bool {
		return st.counts[r.ids[0]]+st.counts[r.ids[1]] >= senders*n/4
	})
	r.kill(ps[victim])
	deadline := time.Now().Add(10 * time.Second)
	for len(r.xdpAttached(t, victim)) > 0 {
		require.True(t, time.Now().Before(deadline), "the killed member's XDP program is still attached")
		time.Sleep(10 * time.Millisecond)
	}
	survivors := ps[:victim]
	_, view := r.waitView(ctx, survivors)
	require.NotContains(t, view, r.ids[victim])
	for _, p := range survivors {
		r.waitFor(ctx, p, "every message delivered", func(st *netnsState) bool { return st.done })
	}
	res := r.finish(ctx, survivors)
	for k := range senders {
		r.requireExact(res, k, n, false)
	}
	requireXDPUsed(t, res, func(int) bool { return true })
	requireRepaired(t, res, dropped())
}
