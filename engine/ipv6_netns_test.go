//go:build linux

package engine

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nakcast/nakcast/engine/transport/memtransport"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestIPv6GroupInNetns: IPv6 groups end to end. The loopback interface of
// this VM has no IPv6 multicast route (transport's TestIPv6OnLoopback
// skips), so the test makes a network namespace of its own with a veth
// pair (both ends inside it, nothing leaves it), gives one end a private
// address (fd00:77::1) and opens three members there on a link-local
// group (ff12::/16), the sockets created on a thread moved into the
// namespace. Multicast loopback delivers each member's datagrams to the
// others. With 5% receive loss, every member delivers every message of
// every sender exactly once, in order, as over IPv4.
func TestIPv6GroupInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) to make a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip")
	}
	ns := fmt.Sprintf("nakcast-v6-%d", os.Getpid())
	ip := func(args ...string) {
		t.Helper()
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
	}
	ip("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ip("-n", ns, "link", "set", "lo", "up")
	ip("-n", ns, "link", "add", "va", "type", "veth", "peer", "name", "vb")
	ip("-n", ns, "link", "set", "va", "up")
	ip("-n", ns, "link", "set", "vb", "up")
	ip("-n", ns, "-6", "addr", "add", "fd00:77::1/64", "dev", "va", "nodad")

	const n, senders, perSender = 3, 2, 3000
	group := netip.MustParseAddrPort("[ff12::77:1]:45677")
	ids := testMembers(n)
	recs := make([]*recorder, n)
	ms := make([]*Member, n)
	faults := make([]*faultCounter, n)
	for i := range ms {
		recs[i] = newRecorder(-1)
		c := Config{
			Group:      group,
			Interface:  "va",
			Insecure:   true,
			Self:       ids[i],
			Handler:    recs[i],
			Logger:     quietLogger(),
			Network:    NetworkConfig{AllowNonLoopback: true, Unicast: netip.MustParseAddrPort("[fd00:77::1]:0")},
			Membership: MembershipConfig{Members: ids},
		}
		faults[i] = wrapFaults(&c, memtransport.Faults{Loss: 0.05, Seed: uint64(i + 1)}) // over UDP: the namespace is the point
		m, err := openInNetns(ns, c)
		require.NoError(t, err, "member %d", i)
		ms[i] = m
	}
	t.Cleanup(func() {
		for i, err := range closeAll(t, ms, 10*time.Second) {
			if err != nil {
				t.Errorf("close member %d: %v", i, err)
			}
		}
	})
	require.True(t, ms[0].Config().Group.Addr().Is6())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sendAll(t, ctx, ms, recs, senders, perSender, false)
	var injected uint64
	for i, m := range ms {
		st := m.Stats()
		injected += faults[i].counts().Dropped
		require.NotZero(t, st.DatagramsIn, "member %d read datagrams", i)
		require.Equal(t, netip.MustParseAddr("fd00:77::1"), m.LocalAddr().Addr(), "member %d", i)
	}
	require.NotZero(t, injected, "loss was injected")
}

// openInNetns opens a member whose sockets belong to the network namespace
// ns: Open runs on a goroutine locked to a thread that joined ns. The
// goroutine exits still locked, so the runtime discards that thread
// instead of reusing it outside its namespace; the sockets keep the
// namespace they were made in.
func openInNetns(ns string, c Config) (*Member, error) {
	type result struct {
		m   *Member
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread dies with the goroutine
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		m, err := Open(context.Background(), c)
		done <- result{m, err}
	}()
	r := <-done
	return r.m, r.err
}
