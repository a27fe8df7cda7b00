package prom

import (
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine"
	"github.com/nakcast/nakcast/engine/auth"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/wire"
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
		gauges := map[string]float64{}
		reasons := map[string]bool{}
		for _, mf := range mfs {
			for _, mt := range mf.GetMetric() {
				if c := mt.GetCounter(); c != nil {
					byName[mf.GetName()] += c.GetValue()
				}
				for _, l := range mt.GetLabel() {
					if mf.GetName() == "nakcast_drops_total" && l.GetName() == "reason" {
						reasons[l.GetValue()] = true
					}
				}
				if g := mt.GetGauge(); g != nil {
					gauges[mf.GetName()] = g.GetValue()
				}
			}
		}
		require.Contains(t, byName, "nakcast_drops_total")
		for _, r := range []string{"wrong_source", "not_member", "unverified", "stranger", "malformed"} {
			require.True(t, reasons[r], "drop reason %q", r)
		}
		require.Contains(t, byName, "nakcast_repair_bytes_total")
		require.Contains(t, byName, "nakcast_challenges_sent_total")
		require.Contains(t, byName, "nakcast_suspicions_total")
		require.Contains(t, byName, "nakcast_unsuspicions_total")
		require.Equal(t, float64(len(m.Stats().Members)), gauges["nakcast_view_members"])
		require.Contains(t, gauges, "nakcast_view_counter")
		// Loopback's 64 KB datagrams: GSO is on, GRO is not (MaxDatagram
		// above 16 KB).
		require.Equal(t, 1.0, gauges["nakcast_gso_enabled"])
		require.Equal(t, 0.0, gauges["nakcast_gro_enabled"])
		require.Contains(t, byName, "nakcast_gso_sends_total")
		require.Contains(t, byName, "nakcast_socket_send_waits_total")
		if byName["nakcast_messages_sent_total"] == 10 && byName["nakcast_messages_delivered_total"] == 10 {
			break
		}
		require.True(t, time.Now().Before(deadline), "counters %v", byName)
		time.Sleep(time.Millisecond) // polling the agent's progress, bounded
	}
}

// TestCollectorRepairAndLag: the repair latency histogram and the peer lag
// gauges are exported (a static view of two, the collector on the
// coordinator, which sends).
func TestCollectorRepairAndLag(t *testing.T) {
	g := netip.AddrPortFrom(netip.AddrFrom4([4]byte{239, 79, byte(rand.IntN(256)), 2}), uint16(20000+rand.IntN(40000)))
	base := rand.Uint64() &^ 0xff
	ids := []digest.Member{{ID: base + 1, Inc: 1}, {ID: base + 2, Inc: 1}}
	nop := engine.HandlerFunc(func(digest.Member, uint64, []byte) {})
	var ms []*engine.Member
	for _, id := range ids {
		m, err := engine.Open(context.Background(), engine.Config{Group: g, Self: id, Handler: nop, Membership: engine.MembershipConfig{Members: ids}})
		require.NoError(t, err)
		ms = append(ms, m)
	}
	defer func() {
		// Both at once: a static member's Close drains until the other's
		// deliveries are stable.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		errs := make(chan error, len(ms))
		for _, m := range ms {
			go func() { errs <- m.Close(ctx) }()
		}
		for range ms {
			require.NoError(t, <-errs)
		}
	}()
	for range 10 {
		require.NoError(t, ms[0].Send(context.Background(), []byte("x")))
	}
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(New(ms[0], nil)))
	peer := ids[1].String()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		var hist bool
		lag, age := -1.0, -1.0
		for _, mf := range mfs {
			for _, mt := range mf.GetMetric() {
				switch mf.GetName() {
				case "nakcast_repair_latency_seconds":
					h := mt.GetHistogram()
					require.NotNil(t, h)
					require.Len(t, h.GetBucket(), nakack.RepairBuckets-1)
					require.InDelta(t, 0.001, h.GetBucket()[0].GetUpperBound(), 1e-12)
					hist = true
				case "nakcast_peer_lag_messages", "nakcast_peer_lag_age_seconds":
					require.Len(t, mt.GetLabel(), 2) // member, peer
					for _, lp := range mt.GetLabel() {
						if lp.GetName() == "peer" {
							require.Equal(t, peer, lp.GetValue())
						}
					}
					if mf.GetName() == "nakcast_peer_lag_messages" {
						lag = mt.GetGauge().GetValue()
					} else {
						age = mt.GetGauge().GetValue()
					}
				}
			}
		}
		require.True(t, hist, "repair latency histogram")
		if lag == 0 && age >= 0 {
			break // the peer reported delivering all 10
		}
		require.True(t, time.Now().Before(deadline), "peer lag %v, age %v", lag, age)
		time.Sleep(time.Millisecond) // polling the agents' progress, bounded
	}
}

// TestCollectorAuthDrops: datagrams refused by authentication are exported
// by reason: a keyed member counts an unauthenticated heartbeat as
// auth_no_trailer.
func TestCollectorAuthDrops(t *testing.T) {
	g := netip.AddrPortFrom(netip.AddrFrom4([4]byte{239, 79, byte(rand.IntN(256)), 2}), uint16(20000+rand.IntN(40000)))
	key, err := auth.GenerateKey(1)
	require.NoError(t, err)
	const group = 0x70726f6d
	m, err := engine.Open(context.Background(), engine.Config{
		Group:   g,
		Keys:    []engine.Key{key},
		Handler: engine.HandlerFunc(func(digest.Member, uint64, []byte) {}),
		Network: engine.NetworkConfig{GroupID: group},
	})
	require.NoError(t, err)
	defer m.Close(context.Background())
	hb, err := wire.EncodeHeartbeat(make([]byte, 128), wire.Header{Group: group, Sender: digest.Member{ID: 99, Inc: 1}},
		wire.Heartbeat{View: digest.ViewID{Coord: digest.Member{ID: 99, Inc: 1}, Counter: 1}})
	require.NoError(t, err)
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(m.LocalAddr()))
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write(hb)
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(New(m, nil)))
	deadline := time.Now().Add(5 * time.Second)
	for {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		got := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "nakcast_drops_total" {
				continue
			}
			for _, mt := range mf.GetMetric() {
				for _, l := range mt.GetLabel() {
					got[l.GetValue()] = mt.GetCounter().GetValue()
				}
			}
		}
		for _, r := range []string{"auth_no_trailer", "auth_unknown_key", "auth_replay", "auth_too_old", "auth_throttled", "auth_bad_tag", "auth_no_key"} {
			require.Contains(t, got, r)
		}
		if got["auth_no_trailer"] == 1 {
			return
		}
		require.True(t, time.Now().Before(deadline), "drops %v", got)
		time.Sleep(time.Millisecond) // polling the agent's progress, bounded
	}
}
