package engine

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/ebpf"
	"github.com/stretchr/testify/require"
)

func TestConfigDefaults(t *testing.T) {
	c, err := Config{}.resolve()
	require.NoError(t, err)
	require.Equal(t, DefaultGroup, c.Group)
	require.Equal(t, "lo", c.Interface)
	require.Zero(t, c.TTL)
	require.Equal(t, netip.MustParseAddrPort("127.0.0.1:0"), c.Unicast)
	require.Equal(t, TransportUDP, c.Backend)
	require.Equal(t, MaxDatagramIPv4, c.MaxDatagram, "64 KB datagrams on loopback")
	require.Equal(t, c.MaxDatagram, c.BundleBytes)
	require.Equal(t, DefaultSocketBuffer, c.RecvBuffer)
	require.Equal(t, DefaultSocketBuffer, c.SendBuffer)
	require.Equal(t, IdleBlock, c.Idle)
	require.Nil(t, c.Open)
	require.Nil(t, c.Wrap)
	require.False(t, c.Self.IsZero())
	require.Nil(t, c.Members, "dynamic membership (gms) by default")
	require.NotZero(t, c.GroupID)
	require.NotNil(t, c.Logger)

	c6, err := Config{Group: netip.MustParseAddrPort("[ff12::77]:4000")}.resolve()
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
		{"Network.TTL", func(c *Config) { c.Network.TTL = 2 }},
		{"Network.TTL", func(c *Config) { c.Network.TTL = -1 }},
		{"Network.Unicast", func(c *Config) { c.Network.Unicast = netip.MustParseAddrPort("10.1.2.3:0") }},
		{"Network.Unicast", func(c *Config) { c.Network.Unicast = netip.MustParseAddrPort("[::1]:0") }},
		{"Transport.Backend", func(c *Config) { c.Transport.Backend = "tcp" }},
		{"Transport.XDP", func(c *Config) { c.Transport.Backend, c.Transport.XDP.Frames = TransportXDP, 100 }},
		{"Self", func(c *Config) { c.Self = digest.Member{Inc: 3} }},
		{"Membership.Members", func(c *Config) { c.Membership.Members = []digest.Member{other} }},
		{"Membership.Members[1]", func(c *Config) { c.Membership.Members = []digest.Member{self, self} }},
		{"Membership.Members[1]", func(c *Config) { c.Membership.Members = []digest.Member{self, {}} }},
		{"Membership.Members", func(c *Config) { c.Membership.Members = []digest.Member{} }},
		{"Membership.FetchState", func(c *Config) { c.Membership.FetchState = true }},
		{"Membership.FetchState", func(c *Config) {
			c.Membership.Members = []digest.Member{self}
			c.Membership.FetchState = true
			c.Membership.SetState = func(io.Reader) error { return nil }
		}},
		{"Membership.InitialHosts", func(c *Config) {
			c.Membership.Members = []digest.Member{self}
			c.Membership.InitialHosts = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:5000")}
		}},
		{"Membership.InitialHosts[0]", func(c *Config) {
			c.Membership.InitialHosts = []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:5000")}
		}},
		{"Membership.InitialHosts[0]", func(c *Config) { c.Membership.InitialHosts = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")} }},
		{"Membership.JoinAttempts", func(c *Config) { c.Membership.JoinAttempts = -1 }},
		{"Membership.DiscoveryRounds", func(c *Config) { c.Membership.DiscoveryRounds = -1 }},
		{"Membership.DiscoveryRounds", func(c *Config) { c.Membership.DiscoveryRounds = 101 }},
		{"Membership.ProbeTimeout", func(c *Config) { c.Membership.ProbeTimeout = -1 }},
		{"Membership.ProbeAttempts", func(c *Config) { c.Membership.ProbeAttempts = -1 }},
		{"Membership.ProbeAttempts", func(c *Config) { c.Membership.ProbeAttempts = 101 }},
		{"Membership.LeaveTimeout", func(c *Config) { c.Membership.LeaveTimeout = time.Hour }},
		{"Membership.DiscoveryTimeout", func(c *Config) { c.Membership.DiscoveryTimeout = time.Minute }},
		{"Tuning.RingCapacity", func(c *Config) { c.Tuning.RingCapacity = 1000 }},
		{"Tuning.RingCapacity", func(c *Config) { c.Tuning.RingCapacity = -4 }},
		{"Tuning.RingCapacity", func(c *Config) { c.Tuning.RingCapacity = 1 << 30 }},
		{"Tuning.InlineSize", func(c *Config) { c.Tuning.InlineSize = -1 }},
		{"Tuning.InlineSize", func(c *Config) { c.Tuning.InlineSize = 1 << 20 }},
		{"Tuning.MaxMessage", func(c *Config) { c.Tuning.MaxMessage = -1 }},
		{"Tuning.MaxMessage", func(c *Config) { c.Tuning.MaxMessage = 1 << 31 }},
		{"Tuning.MaxMessage", func(c *Config) { c.Tuning.MaxMessage = 64 << 20; c.Tuning.Window = 64 }},
		{"Tuning.MaxDatagram", func(c *Config) { c.Tuning.MaxDatagram = 100 }},
		{"Tuning.MaxDatagram", func(c *Config) { c.Tuning.MaxDatagram = 70000 }},
		{"Tuning.BundleBytes", func(c *Config) { c.Tuning.MaxDatagram = 1500; c.Tuning.BundleBytes = 9000 }},
		{"Tuning.BundleDelay", func(c *Config) { c.Tuning.BundleDelay = -time.Millisecond }},
		{"Tuning.BundleDelay", func(c *Config) { c.Tuning.BundleDelay = time.Hour }},
		{"Tuning.Window", func(c *Config) { c.Tuning.Window = 100 }},
		{"Tuning.Window", func(c *Config) { c.Tuning.Window = 32 }},
		{"Tuning.NakDelay", func(c *Config) { c.Tuning.NakDelay = -1 }},
		{"Tuning.NakInterval", func(c *Config) { c.Tuning.NakInterval = time.Hour }},
		{"Tuning.NakMaxInterval", func(c *Config) { c.Tuning.NakInterval = time.Second; c.Tuning.NakMaxInterval = time.Millisecond }},
		{"Tuning.StableInterval", func(c *Config) { c.Tuning.StableInterval = time.Microsecond }},
		{"Tuning.StableBytes", func(c *Config) { c.Tuning.StableBytes = -5 }},
		{"Membership.HeartbeatInterval", func(c *Config) { c.Membership.HeartbeatInterval = -time.Second }},
		{"Membership.SuspectTimeout", func(c *Config) {
			c.Membership.HeartbeatInterval = time.Second
			c.Membership.SuspectTimeout = time.Second
		}},
		{"Transport.RecvBuffer", func(c *Config) { c.Transport.RecvBuffer = 100 }},
		{"Transport.SendBuffer", func(c *Config) { c.Transport.SendBuffer = 2 << 30 }},
		{"Transport.BatchSize", func(c *Config) { c.Transport.BatchSize = 5000 }},
		{"Agent.DeliverBatch", func(c *Config) { c.Agent.DeliverBatch = -1 }},
		{"Tuning.PoolBytes", func(c *Config) { c.Tuning.PoolBytes = 1000 }},
		{"Agent.Idle", func(c *Config) { c.Agent.Idle = 9 }},
		{"Agent.Threading", func(c *Config) { c.Agent.Threading = 7 }},
		{"Tuning.RateLimit", func(c *Config) { c.Tuning.RateLimit = -1 }},
		{"Tuning.InFlightBytes", func(c *Config) { c.Tuning.InFlightBytes = 100 }},
		{"Tuning.InFlightBytes", func(c *Config) { c.Tuning.InFlightBytes = -2 }},
		{"Tuning.RateLimit", func(c *Config) { c.Tuning.RateLimit = 100 }},
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
	c := Config{Group: testGroup(), Logger: slog.New(slog.NewTextHandler(&log, nil)), Network: NetworkConfig{TTL: 1}, Membership: MembershipConfig{Members: testMembers(1)}, Transport: TransportConfig{Backend: TransportAuto}}
	c.Self = c.Membership.Members[0]
	m, err := Open(context.Background(), c)
	require.NoError(t, err)
	defer m.Close(context.Background())
	require.Equal(t, TransportUDP, m.Config().Transport.Backend)
	require.Equal(t, 1, strings.Count(log.String(), "AF_XDP transport not used"), "%s", log.String())
	require.Contains(t, log.String(), "loopback")
	c.Transport.Backend = TransportXDP
	_, err = Open(context.Background(), c)
	require.ErrorIs(t, err, ebpf.ErrUnavailable)
	require.ErrorContains(t, err, "loopback")
}

func TestConfigNonLoopbackNeedsOptIn(t *testing.T) {
	c := Config{Insecure: true, Network: NetworkConfig{Unicast: netip.MustParseAddrPort("10.1.2.3:0"), AllowNonLoopback: true}}
	require.NoError(t, c.Validate())
	c = Config{Network: NetworkConfig{TTL: 8, AllowNonLoopback: true}}
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
