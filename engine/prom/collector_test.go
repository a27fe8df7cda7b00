package prom

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestCollector(t *testing.T) {
	g := netip.AddrPortFrom(netip.AddrFrom4([4]byte{239, 79, byte(rand.IntN(256)), 1}), uint16(20000+rand.IntN(40000)))
	m, err := engine.Open(context.Background(), engine.Config{Group: g, Handler: engine.HandlerFunc(func(digest.Member, uint64, []byte) {})})
	require.NoError(t, err)
	defer m.Close(context.Background())
	for range 10 {
		require.NoError(t, m.Send(context.Background(), []byte("x")))
	}
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(New(m, prometheus.Labels{"service": "test"})))
	deadline := time.Now().Add(5 * time.Second)
	for {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		byName := map[string]float64{}
		for _, mf := range mfs {
			for _, mt := range mf.GetMetric() {
				if c := mt.GetCounter(); c != nil {
					byName[mf.GetName()] += c.GetValue()
				}
			}
		}
		require.Contains(t, byName, "nakcast_drops_total")
		if byName["nakcast_messages_sent_total"] == 10 && byName["nakcast_messages_delivered_total"] == 10 {
			break
		}
		require.True(t, time.Now().Before(deadline), "counters %v", byName)
		time.Sleep(time.Millisecond) // polling the agent's progress, bounded
	}
}
