package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine"
	"github.com/stretchr/testify/require"
)

// TestStoresConverge runs three stores on loopback, each writing the same
// keys concurrently with receive loss injected, and checks that all end
// with the same map.
func TestStoresConverge(t *testing.T) {
	g := netip.AddrPortFrom(netip.AddrFrom4([4]byte{239, 78, byte(rand.IntN(256)), 1}), uint16(20000+rand.IntN(40000)))
	ids := []digest.Member{{ID: 1, Inc: 1}, {ID: 2, Inc: 1}, {ID: 3, Inc: 1}}
	stores := make([]*Store, len(ids))
	ms := make([]*engine.Member, len(ids))
	for i := range ids {
		stores[i] = NewStore(ids[i].ID)
		m, err := engine.Open(context.Background(), engine.Config{Group: g, Self: ids[i], Members: ids,
			Handler: stores[i], LossRate: 0.05, LossSeed: uint64(i + 1)})
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
