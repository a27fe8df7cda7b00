package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/nakcast/nakcast/engine/transport/memtransport"
	"github.com/stretchr/testify/require"
)

// TestIPv6Group runs two members on an IPv6 link-local-scope group over
// ::1 (skipped when the host has no IPv6 loopback).
func TestIPv6Group(t *testing.T) {
	g := netip.AddrPortFrom(netip.MustParseAddr(fmt.Sprintf("ff12::77:%x", 1+rand.IntN(0xfffe))), uint16(20000+rand.IntN(40000)))
	ids := testMembers(2)
	recs := []*recorder{newRecorder(200), newRecorder(200)}
	var ms []*Member
	for i := range ids {
		m, err := Open(context.Background(), Config{Group: g, Self: ids[i], Handler: recs[i], Logger: quietLogger(), Membership: MembershipConfig{Members: ids}})
		if err != nil {
			t.Skipf("no IPv6 multicast on loopback here: %v", err)
		}
		ms = append(ms, m)
	}
	closeWait := 5 * time.Second
	defer func() { closeAll(t, ms, closeWait) }()
	// Probe: many hosts have no IPv6 multicast route on lo (ENETUNREACH).
	require.NoError(t, ms[0].Send(context.Background(), payloadOf(0, 0, 100)))
	for s := ms[0].Stats(); s.DatagramsOut == 0; s = ms[0].Stats() {
		if s.SocketErrors > 0 {
			closeWait = 10 * time.Millisecond // nothing can become stable
			t.Skip("IPv6 multicast on loopback is unreachable on this host (no ff00::/8 route on lo)")
		}
		runtime.Gosched()
	}
	for i := range 100 {
		if i == 0 {
			require.NoError(t, ms[1].Send(context.Background(), payloadOf(1, 0, 100)))
			continue
		}
		for k, m := range ms {
			require.NoError(t, m.Send(context.Background(), payloadOf(k, i, 100)))
		}
	}
	for i, r := range recs {
		select {
		case <-r.cond:
		case <-time.After(10 * time.Second):
			t.Fatalf("member %d delivered %d of 200: %+v", i, r.total, ms[i].Stats())
		}
		require.Empty(t, r.errs)
	}
}

// TestRateLimit checks that RateLimit bounds the sending rate: 400 KB at
// 2 MB/s takes at least about 150 ms (one bundle of burst allowed).
func TestRateLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("timing")
	}
	const total, rate = 400_000, 2_000_000
	rec := newRecorder(total / 1000)
	ms := openGroup(t, 1, func(_ int, c *Config) {
		c.Handler = rec
		c.Tuning.RateLimit = rate
		c.Tuning.BundleBytes = 8192
	})
	start := time.Now()
	buf := make([]byte, 1000)
	for range total / 1000 {
		require.NoError(t, ms[0].Send(context.Background(), buf))
	}
	<-rec.cond
	el := time.Since(start)
	want := time.Duration(float64(total-8192) / rate * float64(time.Second))
	require.GreaterOrEqual(t, el, want*9/10, "sent %d bytes in %v at a %d B/s limit", total, el, rate)
	require.Less(t, el, 5*want, "the limit must not throttle far below the rate")
}

// TestLargeMessages sends messages up to several MiB (fragmented, each
// fragment its own seqno) with loss injected and checks they arrive whole.
func TestLargeMessages(t *testing.T) {
	sizes := []int{70_000, 1 << 20, 4<<20 + 3}
	recs := []*recorder{newRecorder(len(sizes)), newRecorder(len(sizes))}
	ms := openGroup(t, 2, func(i int, c *Config) {
		c.Handler = recs[i]
		overMem(c, memtransport.Faults{Loss: 0.05, Seed: uint64(i + 100)})
	})
	for i, n := range sizes {
		require.NoError(t, ms[0].Send(context.Background(), payloadOf(0, i, n)))
	}
	h := expectedHash(len(sizes), func(i int) []byte { return payloadOf(0, i, sizes[i]) })
	for i, r := range recs {
		select {
		case <-r.cond:
		case <-time.After(20 * time.Second):
			t.Fatalf("member %d delivered %d of %d", i, r.total, len(sizes))
		}
		r.mu.Lock()
		require.Empty(t, r.errs)
		require.Equal(t, h, r.hash[ms[0].Self()], "member %d", i)
		r.mu.Unlock()
	}
}
