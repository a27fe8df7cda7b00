package examples_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/ebpf"
	"github.com/nakcast/nakcast/engine"
	"github.com/nakcast/nakcast/engine/auth"
	"github.com/nakcast/nakcast/engine/prom"
)

// docs/xdp.md: a member on the AF_XDP backend. It needs root and an
// Ethernet interface, so the example is compiled, not run.
func Example_xdp() {
	ctx := context.Background()
	key, err := auth.GenerateKey(1) // every member needs the same keys: auth.ParseKeys reads a key file
	if err != nil {
		log.Fatal(err)
	}
	m, err := engine.Open(ctx, engine.Config{
		Group:     netip.MustParseAddrPort("239.77.1.1:45600"),
		Interface: "eth0",
		Keys:      []engine.Key{key},
		Network: engine.NetworkConfig{
			Unicast:          netip.MustParseAddrPort("10.199.0.1:0"), // an address of eth0
			TTL:              1,
			AllowNonLoopback: true,
		},
		Transport: engine.TransportConfig{
			Backend: engine.TransportXDP, // or TransportAuto
			XDP:     ebpf.Options{},      // Mode "native"/"generic", ring sizes, BusyPoll: defaults
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(ctx)
}

// docs/operations.md: a member's statistics as Prometheus metrics.
func Example_prometheus() {
	ctx := context.Background()
	m, err := engine.Open(ctx, engine.Config{
		Group:   netip.MustParseAddrPort("239.255.0.10:45610"),
		Handler: engine.HandlerFunc(func(digest.Member, uint64, []byte) {}),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(ctx)
	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer, served by promhttp
	reg.MustRegister(prom.New(m, prometheus.Labels{"service": "quotes"}))
	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "nakcast_view_members" {
			fmt.Println(f.GetName(), f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	// Output: nakcast_view_members 1
}
