package engine

import (
	"time"

	"github.com/nakcast/nakcast/engine/transport"
)

// settingsTable is every numeric setting of Config: name, default, bounds
// and what it is, resolved in this order (a default or bound may read the
// rows above it). The table of settings in docs/config.md is rendered from it
// (TestDocsSettings).
var settingsTable = []setting{
	{name: "Network.TTL", field: func(c *Config) ref { return refOf(&c.Network.TTL) },
		hiFn: maxTTL, hi: 255, doc: "multicast TTL or hop limit (above 1 with Network.AllowNonLoopback)"},
	{name: "Tuning.RingCapacity", field: func(c *Config) ref { return refOf(&c.Tuning.RingCapacity) },
		def: DefaultRingCapacity, lo: 2, hi: MaxRingCapacity, pow2: true, doc: "messages of up to 64 B the log buffer of datagram-sized terms holds"},
	{name: "Tuning.InlineSize", field: func(c *Config) ref { return refOf(&c.Tuning.InlineSize) },
		def: DefaultInlineSize, lo: 1, hi: MaxInlineSize, doc: "largest payload written in place in the log buffer; larger ones go out of line"},
	{name: "Tuning.MaxDatagram", field: func(c *Config) ref { return refOf(&c.Tuning.MaxDatagram) },
		defFn: func(_ *Config, e *env) int64 { return int64(e.maxDatagram) }, defDoc: "interface MTU less IP and UDP headers",
		lo: MinDatagram, hiFn: func(_ *Config, e *env) int64 { return int64(e.maxDatagram) }, hi: MaxDatagramIPv6,
		doc: "largest datagram sent"},
	{name: "Tuning.BundleBytes", field: func(c *Config) ref { return refOf(&c.Tuning.BundleBytes) },
		defFn: func(c *Config, _ *env) int64 { return int64(c.Tuning.MaxDatagram) }, defDoc: "Tuning.MaxDatagram",
		lo: MinDatagram, hiFn: func(c *Config, _ *env) int64 { return int64(c.Tuning.MaxDatagram) }, hi: MaxDatagramIPv6,
		doc: "bundle of small messages"},
	{name: "Tuning.BundleDelay", field: func(c *Config) ref { return refOf(&c.Tuning.BundleDelay) },
		hi: int64(time.Second), doc: "longest a message waits in an open bundle while more come"},
	{name: "Tuning.Window", field: func(c *Config) ref { return refOf(&c.Tuning.Window) },
		def: DefaultWindow, lo: 64, hi: MaxWindow, pow2: true, doc: "retransmission store in messages; senders back-pressure when full"},
	{name: "Tuning.MaxMessage", field: func(c *Config) ref { return refOf(&c.Tuning.MaxMessage) },
		defFn: defaultMaxMessage, defDoc: "16 MiB, or what fits in half the window",
		lo: 1, hi: MaxMessageLimit, check: checkFragments, doc: "largest message Send accepts"},
	{name: "Tuning.NakDelay", field: func(c *Config) ref { return refOf(&c.Tuning.NakDelay) },
		def: int64(DefaultNakDelay), lo: int64(time.Microsecond), hi: int64(10 * time.Second), doc: "wait before the first retransmission request for a gap"},
	{name: "Tuning.NakInterval", field: func(c *Config) ref { return refOf(&c.Tuning.NakInterval) },
		def: int64(DefaultNakInterval), lo: int64(time.Microsecond), hi: int64(10 * time.Second), doc: "first retransmission backoff"},
	{name: "Tuning.NakMaxInterval", field: func(c *Config) ref { return refOf(&c.Tuning.NakMaxInterval) },
		def: int64(DefaultNakMaxInterval), lo: int64(time.Microsecond), hi: int64(time.Minute), check: checkNakMax,
		doc: "retransmission backoff cap (at least Tuning.NakInterval)"},
	{name: "Tuning.StableInterval", field: func(c *Config) ref { return refOf(&c.Tuning.StableInterval) },
		def: int64(DefaultStableInterval), lo: int64(time.Millisecond), hi: int64(time.Minute), doc: "how often members report what they delivered"},
	{name: "Tuning.StableBytes", field: func(c *Config) ref { return refOf(&c.Tuning.StableBytes) },
		def: DefaultStableBytes, lo: 1, hi: 1 << 30, doc: "bytes received that also trigger a report"},
	{name: "Tuning.DrainTimeout", field: func(c *Config) ref { return refOf(&c.Tuning.DrainTimeout) },
		def: int64(DefaultDrainTimeout), lo: int64(time.Millisecond), hi: int64(10 * time.Minute), doc: "bound of Close's wait for stability before it leaves"},
	{name: "Membership.HeartbeatInterval", field: func(c *Config) ref { return refOf(&c.Membership.HeartbeatInterval) },
		def: int64(DefaultHeartbeat), lo: int64(time.Millisecond), hi: int64(time.Minute), doc: "heartbeat period (dynamic membership)"},
	{name: "Membership.SuspectTimeout", field: func(c *Config) ref { return refOf(&c.Membership.SuspectTimeout) },
		def: int64(DefaultSuspectTimeout), lo: int64(time.Millisecond), hi: int64(10 * time.Minute), check: checkSuspect,
		doc: "silence before a member is probed (more than Membership.HeartbeatInterval)"},
	{name: "Membership.ProbeTimeout", field: func(c *Config) ref { return refOf(&c.Membership.ProbeTimeout) },
		def: int64(DefaultProbeTimeout), lo: int64(time.Millisecond), hi: int64(time.Minute), doc: "wait for a probe's answer"},
	{name: "Membership.ProbeAttempts", field: func(c *Config) ref { return refOf(&c.Membership.ProbeAttempts) },
		def: DefaultProbeAttempts, lo: 1, hi: 100, doc: "unanswered probes before a member is suspected"},
	{name: "Membership.LeaveTimeout", field: func(c *Config) ref { return refOf(&c.Membership.LeaveTimeout) },
		def: int64(DefaultLeaveTimeout), lo: int64(time.Millisecond), hi: int64(10 * time.Minute), doc: "bound of Close's graceful leave"},
	{name: "Membership.LagLimit", field: func(c *Config) ref { return refOf(&c.Membership.LagLimit) },
		defFn: func(c *Config, _ *env) int64 { return int64(c.Tuning.Window / 2) }, defDoc: "Tuning.Window/2",
		lo: 1, hi: unbounded, doc: "messages a member may lag behind the group (EventPeerLagging)"},
	{name: "Membership.LagTimeout", field: func(c *Config) ref { return refOf(&c.Membership.LagTimeout) },
		def: int64(DefaultLagTimeout), lo: int64(time.Millisecond), hi: int64(10 * time.Minute),
		doc: "how long a member lags above Membership.LagLimit before it is reported"},
	{name: "Membership.DiscoveryTimeout", field: func(c *Config) ref { return refOf(&c.Membership.DiscoveryTimeout) },
		def: int64(DefaultDiscoveryTimeout), lo: int64(time.Millisecond), hi: int64(10 * time.Second), doc: "one discovery round of a joiner"},
	{name: "Membership.DiscoveryRounds", field: func(c *Config) ref { return refOf(&c.Membership.DiscoveryRounds) },
		def: DefaultDiscoveryRounds, lo: 1, hi: 100, doc: "unanswered discovery rounds before a joiner founds a group"},
	{name: "Membership.JoinAttempts", field: func(c *Config) ref { return refOf(&c.Membership.JoinAttempts) },
		hi: unbounded, doc: "JOIN_REQs without an answer before Open fails (0: until Open's context ends)"},
	{name: "Transport.RecvBuffer", field: func(c *Config) ref { return refOf(&c.Transport.RecvBuffer) },
		def: DefaultSocketBuffer, lo: 4096, hi: MaxSocketBuffer, doc: "SO_RCVBUF"},
	{name: "Transport.SendBuffer", field: func(c *Config) ref { return refOf(&c.Transport.SendBuffer) },
		def: DefaultSocketBuffer, lo: 4096, hi: MaxSocketBuffer, doc: "SO_SNDBUF"},
	{name: "Transport.BatchSize", field: func(c *Config) ref { return refOf(&c.Transport.BatchSize) },
		def: DefaultBatchSize, lo: 1, hi: MaxBatchSize, doc: "datagrams per recvmmsg/sendmmsg"},
	{name: "Agent.DeliverBatch", field: func(c *Config) ref { return refOf(&c.Agent.DeliverBatch) },
		def: DefaultDeliverBatch, lo: 1, hi: MaxDeliverBatch, doc: "messages delivered per agent iteration (push mode)"},
	{name: "Tuning.PoolBytes", field: func(c *Config) ref { return refOf(&c.Tuning.PoolBytes) },
		def: DefaultPoolBytes, loFn: func(c *Config) int64 { return int64(4 * c.Transport.BatchSize * c.Tuning.MaxDatagram) },
		hi: 1 << 40, doc: "bytes of datagram buffers outstanding (at least 4 batches of Tuning.MaxDatagram)"},
	{name: "Tuning.InFlightBytes", field: func(c *Config) ref { return refOf(&c.Tuning.InFlightBytes) },
		defFn: defaultInFlight, defDoc: "6 MiB; 2 MiB with datagrams up to 16 KB and the offloads on",
		lo: -1, hi: unbounded, check: checkInFlight, doc: "payload bytes a sender may have in flight (-1: only Tuning.Window limits)"},
	{name: "Tuning.RateLimit", field: func(c *Config) ref { return refOf(&c.Tuning.RateLimit) },
		hi: unbounded, check: checkRate, doc: "payload bytes per second a member sends (0: unlimited; else at least Tuning.BundleBytes)"},
}

// defaultMaxMessage is whatever fits, fragmented, in half the window, up
// to DefaultMaxMessage.
func defaultMaxMessage(c *Config, _ *env) int64 {
	return int64(min(DefaultMaxMessage, c.Tuning.Window/2*(c.Tuning.BundleBytes-128)))
}

// checkFragments: a whole maximum-size message, fragmented, must fit in
// half the window.
func checkFragments(c *Config, _ int64) error {
	t := &c.Tuning
	if frags := (t.MaxMessage + t.BundleBytes - 129) / (t.BundleBytes - 128); frags > t.Window/2 {
		return invalid("Tuning.MaxMessage %d: needs about %d fragments of Tuning.BundleBytes %d, want at most Tuning.Window/2 = %d (raise Window or BundleBytes, or lower MaxMessage)",
			t.MaxMessage, frags, t.BundleBytes, t.Window/2)
	}
	return nil
}

func checkNakMax(c *Config, _ int64) error {
	if t := &c.Tuning; t.NakMaxInterval < t.NakInterval {
		return invalid("Tuning.NakMaxInterval %v: want at least Tuning.NakInterval %v", t.NakMaxInterval, t.NakInterval)
	}
	return nil
}

func checkSuspect(c *Config, _ int64) error {
	if ms := &c.Membership; ms.SuspectTimeout <= ms.HeartbeatInterval {
		return invalid("Membership.SuspectTimeout %v: want more than Membership.HeartbeatInterval %v", ms.SuspectTimeout, ms.HeartbeatInterval)
	}
	return nil
}

// defaultInFlight is smaller with datagrams the receive offload reads in
// runs (TuningConfig.InFlightBytes says why).
func defaultInFlight(c *Config, _ *env) int64 {
	if c.Tuning.MaxDatagram <= transport.GROMaxDatagram && !c.Transport.NoGSO {
		return DefaultInFlightBytesSmall
	}
	return DefaultInFlightBytes
}

func checkInFlight(_ *Config, v int64) error {
	if v != -1 && v < MinDatagram {
		return invalid("Tuning.InFlightBytes %d: want -1 (no limit), 0 (default %d) or at least %d", v, DefaultInFlightBytes, MinDatagram)
	}
	return nil
}

func checkRate(c *Config, v int64) error {
	if v > 0 && v < int64(c.Tuning.BundleBytes) {
		return invalid("Tuning.RateLimit %d: want 0 or at least Tuning.BundleBytes %d bytes/s", v, c.Tuning.BundleBytes)
	}
	return nil
}
