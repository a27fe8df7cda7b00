package engine

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/ebpf"
	"github.com/stretchr/testify/require"
)

func TestConfigDefaults(t *testing.T) {
	c, err := Config{}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, DefaultGroup, c.Group)
	require.Equal(t, "lo", c.Interface)
	require.Zero(t, c.TTL)
	require.Equal(t, netip.MustParseAddrPort("127.0.0.1:0"), c.Unicast)
	require.Equal(t, TransportUDP, c.Transport)
	require.Equal(t, MaxDatagramIPv4, c.MaxDatagram, "64 KB datagrams on loopback")
	require.Equal(t, c.MaxDatagram, c.BundleBytes)
	require.Equal(t, DefaultSocketBuffer, c.RecvBuffer)
	require.Equal(t, DefaultSocketBuffer, c.SendBuffer)
	require.Equal(t, IdleBlock, c.Idle)
	require.Zero(t, c.LossRate)
	require.False(t, c.Self.IsZero())
	require.Nil(t, c.Members, "dynamic membership (gms) by default")
	require.NotZero(t, c.GroupID)
	require.NotNil(t, c.Logger)

	c6, err := Config{Group: netip.MustParseAddrPort("[ff12::77]:4000")}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, netip.MustParseAddrPort("[::1]:0"), c6.Unicast)
	require.Equal(t, 65536-48, c6.MaxDatagram, "lo MTU less IPv6 and UDP headers")
}

// TestConfigErrors checks that every bad value is refused with an error
// wrapping ErrInvalidConfig that names the field.
func TestConfigErrors(t *testing.T) {
	self := digest.Member{ID: 7, Inc: 1}
	other := digest.Member{ID: 8, Inc: 1}
	cases := []struct {
		field string
		mod   func(c *Config)
	}{
		{"Group", func(c *Config) { c.Group = netip.MustParseAddrPort("224.0.0.1:5000") }},
		{"Group", func(c *Config) { c.Group = netip.MustParseAddrPort("10.0.0.1:5000") }},
		{"Group", func(c *Config) { c.Group = netip.MustParseAddrPort("[ff05::1]:5000") }},
		{"Group", func(c *Config) { c.Group = netip.MustParseAddrPort("239.1.1.1:0") }},
		{"Interface", func(c *Config) { c.Interface = "no-such-if0" }},
		{"TTL", func(c *Config) { c.TTL = 2 }},
		{"TTL", func(c *Config) { c.TTL = -1 }},
		{"Unicast", func(c *Config) { c.Unicast = netip.MustParseAddrPort("10.1.2.3:0") }},
		{"Unicast", func(c *Config) { c.Unicast = netip.MustParseAddrPort("[::1]:0") }},
		{"Transport", func(c *Config) { c.Transport = "tcp" }},
		{"XDP", func(c *Config) { c.Transport, c.XDP.Frames = TransportXDP, 100 }},
		{"Self", func(c *Config) { c.Self = digest.Member{Inc: 3} }},
		{"Members", func(c *Config) { c.Members = []digest.Member{other} }},
		{"Members[1]", func(c *Config) { c.Members = []digest.Member{self, self} }},
		{"Members[1]", func(c *Config) { c.Members = []digest.Member{self, {}} }},
		{"Members", func(c *Config) { c.Members = []digest.Member{} }},
		{"FetchState", func(c *Config) { c.FetchState = true }},
		{"FetchState", func(c *Config) {
			c.Members = []digest.Member{self}
			c.FetchState = true
			c.SetState = func(io.Reader) error { return nil }
		}},
		{"InitialHosts", func(c *Config) {
			c.Members = []digest.Member{self}
			c.InitialHosts = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:5000")}
		}},
		{"InitialHosts[0]", func(c *Config) { c.InitialHosts = []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:5000")} }},
		{"InitialHosts[0]", func(c *Config) { c.InitialHosts = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")} }},
		{"JoinAttempts", func(c *Config) { c.JoinAttempts = -1 }},
		{"DiscoveryRounds", func(c *Config) { c.DiscoveryRounds = -1 }},
		{"DiscoveryRounds", func(c *Config) { c.DiscoveryRounds = 101 }},
		{"ProbeTimeout", func(c *Config) { c.ProbeTimeout = -1 }},
		{"ProbeAttempts", func(c *Config) { c.ProbeAttempts = -1 }},
		{"ProbeAttempts", func(c *Config) { c.ProbeAttempts = 101 }},
		{"LeaveTimeout", func(c *Config) { c.LeaveTimeout = time.Hour }},
		{"DiscoveryTimeout", func(c *Config) { c.DiscoveryTimeout = time.Minute }},
		{"RingCapacity", func(c *Config) { c.RingCapacity = 1000 }},
		{"RingCapacity", func(c *Config) { c.RingCapacity = -4 }},
		{"RingCapacity", func(c *Config) { c.RingCapacity = 1 << 30 }},
		{"InlineSize", func(c *Config) { c.InlineSize = -1 }},
		{"InlineSize", func(c *Config) { c.InlineSize = 1 << 20 }},
		{"MaxMessage", func(c *Config) { c.MaxMessage = -1 }},
		{"MaxMessage", func(c *Config) { c.MaxMessage = 1 << 31 }},
		{"MaxMessage", func(c *Config) { c.MaxMessage = 64 << 20; c.Window = 64 }},
		{"MaxDatagram", func(c *Config) { c.MaxDatagram = 100 }},
		{"MaxDatagram", func(c *Config) { c.MaxDatagram = 70000 }},
		{"BundleBytes", func(c *Config) { c.MaxDatagram = 1500; c.BundleBytes = 9000 }},
		{"BundleDelay", func(c *Config) { c.BundleDelay = -time.Millisecond }},
		{"BundleDelay", func(c *Config) { c.BundleDelay = time.Hour }},
		{"Window", func(c *Config) { c.Window = 100 }},
		{"Window", func(c *Config) { c.Window = 32 }},
		{"NakDelay", func(c *Config) { c.NakDelay = -1 }},
		{"NakInterval", func(c *Config) { c.NakInterval = time.Hour }},
		{"NakMaxInterval", func(c *Config) { c.NakInterval = time.Second; c.NakMaxInterval = time.Millisecond }},
		{"StableInterval", func(c *Config) { c.StableInterval = time.Microsecond }},
		{"StableBytes", func(c *Config) { c.StableBytes = -5 }},
		{"HeartbeatInterval", func(c *Config) { c.HeartbeatInterval = -time.Second }},
		{"SuspectTimeout", func(c *Config) { c.HeartbeatInterval = time.Second; c.SuspectTimeout = time.Second }},
		{"RecvBuffer", func(c *Config) { c.RecvBuffer = 100 }},
		{"SendBuffer", func(c *Config) { c.SendBuffer = 2 << 30 }},
		{"BatchSize", func(c *Config) { c.BatchSize = 5000 }},
		{"DeliverBatch", func(c *Config) { c.DeliverBatch = -1 }},
		{"PoolBytes", func(c *Config) { c.PoolBytes = 1000 }},
		{"Idle", func(c *Config) { c.Idle = 9 }},
		{"Threading", func(c *Config) { c.Threading = 7 }},
		{"RateLimit", func(c *Config) { c.RateLimit = -1 }},
		{"InFlightBytes", func(c *Config) { c.InFlightBytes = 100 }},
		{"InFlightBytes", func(c *Config) { c.InFlightBytes = -2 }},
		{"RateLimit", func(c *Config) { c.RateLimit = 100 }},
		{"LossRate", func(c *Config) { c.LossRate = 1 }},
		{"LossRate", func(c *Config) { c.LossRate = -0.1 }},
		{"LossRate", func(c *Config) { c.LossRate = math.NaN() }},
	}
	for _, tc := range cases {
		c := Config{Self: self}
		tc.mod(&c)
		t.Run(tc.field, func(t *testing.T) {
			err := c.Validate()
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.Contains(t, err.Error(), tc.field+" ")
			_, err = Open(context.Background(), c)
			require.ErrorIs(t, err, ErrInvalidConfig, "Open refuses it too")
		})
	}
}

// TestConfigTransportAuto: "auto" where AF_XDP cannot run (the loopback
// interface) opens UDP and says why in one log line; "xdp" there is
// refused with the same reason.
func TestConfigTransportAuto(t *testing.T) {
	var log bytes.Buffer
	c := Config{Group: testGroup(), TTL: 1, Transport: TransportAuto, Members: testMembers(1), Logger: slog.New(slog.NewTextHandler(&log, nil))}
	c.Self = c.Members[0]
	m, err := Open(context.Background(), c)
	require.NoError(t, err)
	defer m.Close(context.Background())
	require.Equal(t, TransportUDP, m.Config().Transport)
	require.Equal(t, 1, strings.Count(log.String(), "AF_XDP transport not used"), "%s", log.String())
	require.Contains(t, log.String(), "loopback")
	c.Transport = TransportXDP
	_, err = Open(context.Background(), c)
	require.ErrorIs(t, err, ebpf.ErrUnavailable)
	require.ErrorContains(t, err, "loopback")
}

func TestConfigNonLoopbackNeedsOptIn(t *testing.T) {
	c := Config{Unicast: netip.MustParseAddrPort("10.1.2.3:0"), AllowNonLoopback: true, Insecure: true}
	require.NoError(t, c.Validate())
	c = Config{TTL: 8, AllowNonLoopback: true}
	require.NoError(t, c.Validate())
}

func TestParseIdleAndThreading(t *testing.T) {
	for _, v := range []IdleStrategy{IdleBlock, IdleYield, IdleSpin} {
		got, err := ParseIdleStrategy(v.String())
		require.NoError(t, err)
		require.Equal(t, v, got)
	}
	for _, v := range []Threading{ThreadingShared, ThreadingDedicated, ThreadingInvoked} {
		got, err := ParseThreading(v.String())
		require.NoError(t, err)
		require.Equal(t, v, got)
	}
	_, err := ParseIdleStrategy("busy")
	require.ErrorContains(t, err, "want block, yield or spin")
	_, err = ParseThreading("both")
	require.ErrorContains(t, err, "want shared, dedicated or invoked")
}
