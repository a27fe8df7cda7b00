package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runRawMembers runs a raw sender and n receivers as goroutines on
// loopback, started together like the member processes of RunNetnsRaw.
func runRawMembers(t *testing.T, rc RawConfig, n int) []RawMemberResult {
	t.Helper()
	rs := make([]RawMemberResult, n+1)
	errs := make([]error, n+1)
	start := make(chan struct{})
	var ready, wg sync.WaitGroup
	for i := range rs {
		ready.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			opened := false
			rs[i], errs[i] = RunRawMember(context.Background(), RawMemberConfig{Raw: rc, Index: i, Send: i == 0,
				Ready: func() { opened = true; ready.Done() }, Start: start})
			if !opened {
				ready.Done()
			}
		}()
	}
	ready.Wait()
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "raw member %d", i)
	}
	return rs
}

func TestRawMembersLoopback(t *testing.T) {
	// 3000 KiB messages are 48 datagrams, far less than the receive
	// buffer: nothing can be lost.
	const count = 3000
	g := testGroup(20)
	g = netip.AddrPortFrom(g.Addr(), uint16(40000+os.Getpid()%20000))
	rs := runRawMembers(t, RawConfig{Group: g, MsgSize: 1024, Count: count, Batch: 4, Drain: 100 * time.Millisecond}, 2)
	res, err := CombineRaw(rs)
	require.NoError(t, err)
	require.Equal(t, int64(count), res.SentMsgs)
	require.Equal(t, int64(48), res.SentDatagrams)
	require.Equal(t, int64(count), res.Msgs)
	require.Zero(t, res.LossPct)
	require.Positive(t, res.MsgsPerSec)
	require.Equal(t, uint64(2*count*(count-1)/2), res.Checksum, "both receivers read every message once")
	for _, r := range rs[1:] {
		require.Equal(t, "receive", r.Role)
		require.Greater(t, r.LastNs, rs[0].SendStartNs)
	}
}

func TestCombineRawNeedsBothRoles(t *testing.T) {
	_, err := CombineRaw([]RawMemberResult{{Schema: RawMemberSchema, Role: "receive"}})
	require.ErrorContains(t, err, "no sender")
	_, err = CombineRaw([]RawMemberResult{{Schema: RawMemberSchema, Role: "send"}})
	require.ErrorContains(t, err, "no receiver")
}

func TestRawMemberMainBadFlags(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no role", []string{"-group", "239.77.60.21:5000"}, "-role"},
		{"no group", []string{"-role", "send"}, "-group"},
		{"group not multicast", []string{"-role", "send", "-group", "10.1.2.3:5000"}, "Group"},
		{"no port", []string{"-role", "send", "-group", "239.77.60.21:0"}, "port"},
		{"size", []string{"-role", "send", "-group", "239.77.60.21:5000", "-size", "70000"}, "MsgSize"},
		{"unknown", []string{"-bogus"}, "bogus"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := RawMemberMain(context.Background(), tt.args, nil, &out, &errOut)
			require.True(t, errors.Is(err, ErrUsage), "%v", err)
			require.Contains(t, err.Error()+errOut.String(), tt.want)
		})
	}
}

func TestRawMemberMainWritesResult(t *testing.T) {
	out := filepath.Join(t.TempDir(), "raw.json")
	var stdout, stderr bytes.Buffer
	err := RawMemberMain(context.Background(), []string{"-role", "send", "-group", "239.77.60.22:45999", "-count", "100", "-out", out}, nil, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	var r RawMemberResult
	require.NoError(t, json.Unmarshal(b, &r))
	require.Equal(t, RawMemberSchema, r.Schema)
	require.Equal(t, int64(100), r.SentMsgs)
}
