package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine"
	"github.com/nakcast/nakcast/engine/transport/memtransport"
	"github.com/stretchr/testify/require"
)

// TestStoresConverge runs three stores on an in-memory network, each
// writing the same keys concurrently with receive loss injected, and
// checks that all end with the same map.
func TestStoresConverge(t *testing.T) {
	net := memtransport.NewNetwork()
	g := netip.AddrPortFrom(netip.AddrFrom4([4]byte{239, 78, byte(rand.IntN(256)), 1}), uint16(20000+rand.IntN(40000)))
	ids := []digest.Member{{ID: 1, Inc: 1}, {ID: 2, Inc: 1}, {ID: 3, Inc: 1}}
	stores := make([]*Store, len(ids))
	ms := make([]*engine.Member, len(ids))
	for i := range ids {
		stores[i] = NewStore(ids[i].ID)
		m, err := engine.Open(context.Background(), engine.Config{
			Group:      g,
			Self:       ids[i],
			Handler:    stores[i],
			Transport:  engine.TransportConfig{Open: net.Open, Wrap: memtransport.Faults{Loss: 0.05, Seed: uint64(i + 1)}.WrapTransport},
			Membership: engine.MembershipConfig{Members: ids},
		})
		require.NoError(t, err)
		ms[i] = m
	}
	const writes = 300
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range writes {
				k := fmt.Sprintf("k%d", w%17)
				msg := stores[i].Encode(k, fmt.Sprintf("v%d-%d", i, w), w%5 == 4)
				if err := m.Send(context.Background(), msg); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for {
		done := true
		for _, m := range ms {
			if m.Stats().Delivered < uint64(writes*len(ms)) {
				done = false
			}
		}
		if done {
			break
		}
		require.True(t, time.Now().Before(deadline), "writes not delivered everywhere")
		time.Sleep(5 * time.Millisecond) // polling delivery counts, bounded
	}
	for i := 1; i < len(stores); i++ {
		require.Equal(t, stores[0].Dump(), stores[i].Dump(), "store %d", i)
	}
	require.NotEmpty(t, stores[0].Dump())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cw sync.WaitGroup
	for _, m := range ms {
		cw.Add(1)
		go func() { defer cw.Done(); require.NoError(t, m.Close(ctx)) }()
	}
	cw.Wait()
}

// TestLateJoinerGetsMap: two stores join a dynamic group and write; a third
// joins later, while writes keep coming, and gets the map by state
// transfer: all three end with the same map, including the writes made
// before it joined, which it never received as messages.
func TestLateJoinerGetsMap(t *testing.T) {
	g := netip.AddrPortFrom(netip.AddrFrom4([4]byte{239, 78, byte(rand.IntN(256)), 2}), uint16(20000+rand.IntN(40000)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := engine.Config{Group: g, Logger: slog.New(slog.DiscardHandler), Membership: engine.MembershipConfig{DiscoveryTimeout: 200 * time.Millisecond}}
	var ms []*engine.Member
	var stores []*Store
	defer func() {
		for i := len(ms) - 1; i >= 0; i-- {
			require.NoError(t, ms[i].Close(ctx))
		}
	}()
	for range 2 {
		m, st, err := open(ctx, cfg)
		require.NoError(t, err)
		ms, stores = append(ms, m), append(stores, st)
	}
	const writes = 400
	write := func(i, w int) {
		k := fmt.Sprintf("k%d", w%23)
		require.NoError(t, ms[i].Send(ctx, stores[i].Encode(k, fmt.Sprintf("v%d-%d", i, w), w%7 == 6)))
	}
	for w := range writes / 2 {
		write(w%2, w)
	}
	m, st, err := open(ctx, cfg) // joins and fetches the map
	require.NoError(t, err)
	ms, stores = append(ms, m), append(stores, st)
	require.NotEmpty(t, st.Dump(), "the joiner starts with the map")
	for w := writes / 2; w < writes; w++ {
		write(w%3, w)
	}
	// Every member has delivered every write sent after the join: each
	// sender's own count is what it sent, so wait until all agree.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		d0 := stores[0].Dump()
		if slices.Equal(d0, stores[1].Dump()) && slices.Equal(d0, stores[2].Dump()) && allStable(ms) {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("stores differ:\n%v\n%v\n%v", stores[0].Dump(), stores[1].Dump(), stores[2].Dump())
		}
	}
}

// allStable reports whether every member has delivered everything every
// member sent.
func allStable(ms []*engine.Member) bool {
	sent := map[digest.Member]uint64{}
	for _, m := range ms {
		sent[m.Self()] = m.Stats().Sent
	}
	for _, m := range ms {
		got := map[digest.Member]uint64{}
		for _, w := range m.Stats().Senders {
			got[w.Member] = w.Delivered
		}
		for s, n := range sent {
			if got[s] < n {
				return false
			}
		}
	}
	return true
}
