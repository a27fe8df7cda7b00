package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nakcast/nakcast/engine"
)

// TestNetnsAttack is issue 14's attacker test: three member processes
// (static membership, each knowing the others' addresses), member 0 sending
// for 8 s, 30% of its datagrams dropped at each receiver by nftables; a
// fourth namespace on the same bridge runs the attacker process
// (attacker_test.go), which is not a member and has no key: it reads the
// multicast and, while the run lasts, sends forged MSG_NOT_FOUND (from its
// own address and, through a raw socket, with the sender's), forged headers
// of every member (the coordinator's included) and random sender ids,
// XMIT_REQ floods for the whole window (also with the receivers' addresses
// spoofed), replays of captured data (also spoofed) and at least 10^6
// garbage datagrams. In open mode (no key) and with a group key: delivery is
// exact and complete, nothing is ever reported lost, delivery never stops
// for long, no MSG_NOT_FOUND is acted on (open mode: the spoofed ones are
// challenged and the sender refuses; key mode: their tags fail), the
// sender's repairs stay within the per-requester credit bound, and every
// datagram of the attacker that reached a member is counted as a drop by
// its reason.
func TestNetnsAttack(t *testing.T) {
	needNetns(t)
	if err := CheckNft(); err != nil {
		t.Skipf("skipping: %v (.ci/run installs it)", err)
	}
	for _, mode := range []string{"open", "key"} {
		t.Run(mode, func(t *testing.T) { attackRun(t, mode == "key") })
	}
}

// lossyGroup sets up n network namespaces (veth MTU 1500) in which 30% of
// member 0's datagrams are dropped at members 1 and 2 (nftables), and
// returns them with the test binary's path; the caller closes them.
func lossyGroup(ctx context.Context, t *testing.T, n int) (*Netns, string) {
	exe, err := os.Executable()
	require.NoError(t, err)
	ns, err := SetupNetns(ctx, n, 1500)
	require.NoError(t, err)
	for i := 1; i <= 2; i++ {
		if err := ns.InjectLoss(ctx, i, ns.Addrs[0], 30); err != nil {
			ns.Close()
			t.Fatal(err)
		}
	}
	return ns, exe
}

// runLossyGroup runs three member processes of the test binary exe in the
// first three namespaces of ns, member 0 sending 200-byte messages for d;
// RunNetns generates a group key unless insecure (open mode).
func runLossyGroup(ctx context.Context, t *testing.T, ns *Netns, exe string, d time.Duration, insecure bool) ([]MemberResult, error) {
	return RunNetns(ctx, NetnsRunConfig{
		Member:   MemberConfig{Members: 3, MsgSize: 200, Duration: d, Timeout: 2 * time.Minute, Config: engine.Config{Insecure: insecure}},
		Netns:    ns,
		Exe:      []string{exe},
		Env:      []string{memberEnv + "=1"},
		Progress: func(s string) { t.Log(s) },
	})
}

func attackRun(t *testing.T, keyed bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns, exe := lossyGroup(ctx, t, 4)
	defer ns.Close()
	att := startAttacker(t, ns, exe)
	defer att.kill()
	start := time.Now()
	rs, runErr := runLossyGroup(ctx, t, ns, exe, 8*time.Second, !keyed)
	elapsed := time.Since(start)
	rep := att.stop(t)
	require.NoError(t, runErr)
	require.Empty(t, Verify(rs), "delivery exact and complete")
	t.Logf("run: %v, %d messages; attacker sent %d datagrams (%d garbage, %d through the raw socket with a spoofed source)",
		elapsed.Round(time.Millisecond), rs[0].Sent, rep.Sent+rep.Spoofed, rep.Random, rep.Spoofed)
	require.GreaterOrEqual(t, rep.Random, uint64(1_000_000))
	require.GreaterOrEqual(t, len(rep.Learned), 3, "the attacker knew the group: %v", rep.Learned)

	checkAttackOutcome(t, rs, keyed)
	checkSenderCredit(t, rs, keyed)
	for i, r := range rs {
		in, rcvbuf, noports, err := ns.udpCounters(i)
		require.NoError(t, err)
		pm := rep.PerMember[netip.AddrPortFrom(ns.Addrs[i], NetnsUnicastPort).String()]
		t.Logf("member %d: drops %+v; kernel: %d UDP datagrams in, %d dropped for a full buffer or a closed port; attacker sent it %+v",
			i, r.Stats.Drops, in, rcvbuf+noports, pm)
		checkDropsCounted(t, r, pm, rcvbuf+noports, keyed)
	}
}

// attacker is a running attacker process.
type attacker struct {
	cmd    *exec.Cmd
	stdin  interface{ Close() error }
	stderr bytes.Buffer
	out    string
	done   chan error
}

func startAttacker(t *testing.T, ns *Netns, exe string) *attacker {
	a := &attacker{out: filepath.Join(t.TempDir(), "attack.json"), done: make(chan error, 1)}
	// The attack lasts as long as the sender sends: the members' drain at
	// the end (Close waits until everything is stable) is not part of it.
	a.cmd = ns.Command(3, exe, "-local", ns.Addrs[3].String(), "-out", a.out, "-for", "8s")
	a.cmd.Env = append(os.Environ(), attackerEnv+"=1")
	a.cmd.Stderr = &a.stderr
	stdin, err := a.cmd.StdinPipe()
	require.NoError(t, err)
	a.stdin = stdin
	require.NoError(t, a.cmd.Start())
	go func() { a.done <- a.cmd.Wait() }()
	return a
}

// stop closes the attacker's stdin, waits for it to exit and returns its
// report.
func (a *attacker) stop(t *testing.T) attackReport {
	_ = a.stdin.Close()
	select {
	case err := <-a.done:
		a.done <- err
		require.NoError(t, err, "attacker: %s", a.stderr.String())
	case <-time.After(time.Minute):
		t.Fatalf("attacker did not stop: %s", a.stderr.String())
	}
	b, err := os.ReadFile(a.out)
	require.NoError(t, err, a.stderr.String())
	var rep attackReport
	require.NoError(t, json.Unmarshal(b, &rep))
	return rep
}

func (a *attacker) kill() {
	select {
	case err := <-a.done:
		a.done <- err
	default:
		_ = a.cmd.Process.Kill()
		<-a.done
	}
}

// checkAttackOutcome: nothing lost, no MSG_NOT_FOUND acted on (open mode:
// the spoofed ones challenged and refused), and delivery never stalled.
func checkAttackOutcome(t *testing.T, rs []MemberResult, keyed bool) {
	t.Helper()
	var challenged, refused uint64
	for _, r := range rs {
		require.True(t, r.Complete, "member %d", r.Index)
		require.Empty(t, r.Senders[0].Lost, "member %d", r.Index)
		require.Zero(t, r.Stats.LostRanges, "member %d", r.Index)
		require.Zero(t, r.Stats.Protocol.NotFoundConfirmed, "member %d", r.Index)
		challenged += r.Stats.Protocol.ChallengesSent
		refused += r.Stats.Protocol.ChallengesRefused
		require.Less(t, longestStall(r), 10*time.Second, "member %d: delivery stopped", r.Index)
	}
	if keyed {
		require.Zero(t, challenged, "with a key nothing is challenged: forged claims fail their tag")
		return
	}
	require.Positive(t, challenged, "the spoofed MSG_NOT_FOUNDs were challenged")
	require.Positive(t, refused, "and the sender refused to confirm them")
}

// longestStall is the longest time member r delivered nothing from the
// other senders while it was still waiting for them (from its timeline).
func longestStall(r MemberResult) time.Duration {
	var worst time.Duration
	tl := r.Timeline
	for i, j := 0, 0; i < len(tl); i = j {
		for j = i + 1; j < len(tl) && tl[j].Delivered == tl[i].Delivered; j++ {
		}
		if j < len(tl) { // a last sample unchanged is the end of the run
			worst = max(worst, time.Duration(tl[j-1].Ns-tl[i].Ns))
		}
	}
	return worst
}

// checkSenderCredit: the sender's repairs are within RepairRatio times the
// request bytes it took plus a RepairBurst per requester: nakack's default
// ratio for the datagrams the protocol builds on the veth (1472 bytes, less
// the trailer with a key), the engine's burst (InFlightBytes, 2 MiB for
// datagrams this small).
func checkSenderCredit(t *testing.T, rs []MemberResult, keyed bool) {
	t.Helper()
	datagram := uint64(1500 - 28)
	if keyed {
		datagram -= 28 // wire.TrailerLen
	}
	ratio, burst := 2*datagram/16, max(uint64(engine.DefaultInFlightBytesSmall), 64*datagram)
	p := rs[0].Stats.Protocol
	bound := ratio*p.NakBytes + uint64(len(rs)-1)*burst
	t.Logf("sender: %d XMIT_REQ (%d bytes) taken, %d repair bytes sent (bound %d: ratio %d, burst %d per requester), %d repairs held back by credit",
		p.NakReceived, p.NakBytes, p.RepairBytes, bound, ratio, burst, p.RepairsOverCredit)
	require.LessOrEqual(t, p.RepairBytes, bound)
}

// checkDropsCounted: every attacker datagram that reached member r (all
// were sent to its unicast address, so none was lost on the way but to
// the kernel's full socket buffer or, once the member exited, its closed
// port: slack) is counted under its reason. Open mode: garbage as
// Malformed or ForeignGroup, claims of members (forged or replayed) from
// the attacker's address as WrongSource, random ids as NotMember. With a
// key the garbage is the same, and everything else is an authentication
// drop (no trailer; a replay), a WrongSource (a replay of data this member
// had lost, so its tag is new here) or, for the spoofed replays, genuine
// data taken.
func checkDropsCounted(t *testing.T, r MemberResult, pm *perMember, slack uint64, keyed bool) {
	t.Helper()
	require.NotNil(t, pm, "member %d got nothing from the attacker", r.Index)
	d := r.Stats.Drops
	// uncertain is what may legitimately be missing from a row: the
	// datagrams spoofed with the sender's address meet the nftables loss
	// rule at the receivers, and a spoofed replay of data a member had
	// lost is the genuine datagram, taken. Every drop of a row is the
	// attacker's: with a key the replay windows drop none of the group's
	// own datagrams, whatever the loss (TestNetnsKeyedLossRefusesNothing),
	// so a replay or a too old counter is a replayed capture.
	type row struct {
		reason               string
		got, sent, uncertain uint64
	}
	rows := []row{
		{"malformed", d.Malformed, pm.Malformed, 0},
		{"foreign group", d.ForeignGroup, pm.ForeignGroup, 0},
	}
	if keyed {
		noTrailer := pm.Forged + pm.Stranger + pm.SpoofedMNF + pm.SpoofedXmit
		rows = append(rows,
			row{"no trailer", d.Auth.NoTrailer, noTrailer, pm.SpoofedMNF},
			row{"replay, too old or wrong source", d.Auth.Replay + d.Auth.TooOld + d.WrongSource,
				pm.Replayed + pm.SpoofedData, pm.SpoofedData})
		require.Zero(t, d.NotMember, "member %d: nothing unauthenticated gets as far as the view check", r.Index)
	} else {
		rows = append(rows,
			row{"wrong source", d.WrongSource, pm.Forged + pm.Replayed, 0},
			row{"not member", d.NotMember, pm.Stranger, 0})
	}
	for _, c := range rows {
		require.Positive(t, c.sent, "member %d: the attacker sent nothing %s", r.Index, c.reason)
		require.LessOrEqual(t, c.got, c.sent, "member %d: more %s drops than the attacker sent", r.Index, c.reason)
		lower := c.sent - min(c.sent, slack+c.uncertain)
		require.GreaterOrEqual(t, c.got, lower, "member %d: %s: %d counted of %d sent (slack %d, uncertain %d)",
			r.Index, c.reason, c.got, c.sent, slack, c.uncertain)
	}
}

// udpCounters reads the kernel's UDP counters in member i's namespace:
// datagrams in, dropped for a full socket buffer, and to a closed port.
func (ns *Netns) udpCounters(i int) (in, rcvbuf, noports uint64, err error) {
	out, err := ns.Command(i, "cat", "/proc/net/snmp").Output()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("member %d: /proc/net/snmp: %w", i, err)
	}
	v, err := snmpFields(string(out), "Udp:", "InDatagrams", "RcvbufErrors", "NoPorts")
	if err != nil {
		return 0, 0, 0, err
	}
	return v[0], v[1], v[2], nil
}

// snmpFields returns the named fields of /proc/net/snmp's prefix lines (a
// header line of names, then one of values).
func snmpFields(snmp, prefix string, names ...string) ([]uint64, error) {
	var head []string
	for _, l := range strings.Split(snmp, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != prefix {
			continue
		}
		if head == nil {
			head = f
			continue
		}
		out := make([]uint64, len(names))
		for k, name := range names {
			j := slices.Index(head, name)
			if j < 0 || j >= len(f) {
				return nil, fmt.Errorf("bench: /proc/net/snmp: no %s %s", prefix, name)
			}
			v, err := strconv.ParseUint(f[j], 10, 64)
			if err != nil {
				return nil, err
			}
			out[k] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("bench: /proc/net/snmp: no %s lines", prefix)
}
