package engine

import (
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"math/bits"
	"net"
	"net/netip"
	"time"

	"github.com/nakcast/nakcast/digest"
)

// Defaults of Config's numeric settings (the table below applies them).
const (
	DefaultRingCapacity = 4096
	DefaultInlineSize   = 1024
	DefaultMaxMessage   = 16 << 20
	// DefaultWindow is 128Ki messages: with 64 B messages that is 8 MiB
	// of payload, more than DefaultInFlightBytes, so byte flow control
	// holds a small-message sender before the count does: with half of
	// it a 64 B stream on loopback keeps waiting on the full window while
	// the STABLEs that free it are on their way (docs/performance.md).
	// Its cost: twice Window slots of 24 B for each sender heard (made on
	// its first message).
	DefaultWindow         = 1 << 17
	DefaultBatchSize      = 64
	DefaultSocketBuffer   = 4 << 20
	DefaultNakDelay       = 2 * time.Millisecond
	DefaultNakInterval    = 10 * time.Millisecond
	DefaultNakMaxInterval = 500 * time.Millisecond
	DefaultStableInterval = 10 * time.Millisecond
	DefaultStableBytes    = 1 << 20
	DefaultDrainTimeout   = 5 * time.Second
	DefaultHeartbeat      = 500 * time.Millisecond
	DefaultSuspectTimeout = 5 * time.Second
	// DefaultProbeTimeout, DefaultProbeAttempts, DefaultLeaveTimeout, DefaultLagTimeout,
	// DefaultDiscoveryTimeout and DefaultDiscoveryRounds are dynamic membership's.
	DefaultProbeTimeout     = 150 * time.Millisecond
	DefaultProbeAttempts    = 3
	DefaultLeaveTimeout     = 2 * time.Second
	DefaultLagTimeout       = 5 * time.Second
	DefaultDiscoveryTimeout = 100 * time.Millisecond
	DefaultDiscoveryRounds  = 3
	DefaultDeliverBatch     = 1024
	DefaultPoolBytes        = 256 << 20
	DefaultInFlightBytes    = 6 << 20
	// DefaultInFlightBytesSmall is InFlightBytes' default with datagrams
	// of 16 KB or less and the segmentation offloads on (see
	// TuningConfig.InFlightBytes).
	DefaultInFlightBytesSmall = 2 << 20
)

// Bounds of Config's numeric settings.
const (
	MaxRingCapacity = 1 << 24
	MaxInlineSize   = 64 << 10
	MaxMessageLimit = 1 << 30
	MaxWindow       = 1 << 26
	MaxBatchSize    = 1024
	MaxSocketBuffer = 1 << 30
	MinDatagram     = 512
	MaxDatagramIPv4 = 65507
	MaxDatagramIPv6 = 65527
	MaxDeliverBatch = 1 << 20
)

// settings is a Config resolved: every default applied, every value
// checked, the groups flattened so that the agent reads m.cfg.Window. It
// is what Open builds once (quic-go's populateConfig) and what the member
// and the agent read; Member.Config turns it back into a Config.
type settings struct {
	Group      netip.AddrPort
	Interface  string
	Self       digest.Member
	Handler    Handler
	DiscardOwn bool
	Keys       []Key
	Encrypt    bool
	Insecure   bool
	Logger     *slog.Logger
	MembershipConfig
	NetworkConfig
	TransportConfig
	TuningConfig
	AgentConfig
}

// config returns s as a Config.
func (s *settings) config() Config {
	return Config{
		Group:      s.Group,
		Interface:  s.Interface,
		Self:       s.Self,
		Handler:    s.Handler,
		DiscardOwn: s.DiscardOwn,
		Keys:       s.Keys,
		Encrypt:    s.Encrypt,
		Insecure:   s.Insecure,
		Logger:     s.Logger,
		Membership: s.MembershipConfig,
		Network:    s.NetworkConfig,
		Tuning:     s.TuningConfig,
		Agent:      s.AgentConfig,
		Transport:  s.TransportConfig,
	}
}

// Validate reports whether Open would accept c, without opening anything.
// The error wraps ErrInvalidConfig and names the field.
func (c Config) Validate() error {
	_, err := c.resolve()
	return err
}

// resolve returns c's settings: defaults applied and every value checked,
// or the first error, which wraps ErrInvalidConfig and names the field.
func (c Config) resolve() (settings, error) {
	c.Membership.Members = cloneNil(c.Membership.Members)
	c.Membership.MemberAddrs = cloneNil(c.Membership.MemberAddrs)
	e, err := c.resolveNetwork()
	if err != nil {
		return settings{}, err
	}
	if err := c.resolveTransport(); err != nil {
		return settings{}, err
	}
	if err := c.resolveMembership(e.group); err != nil {
		return settings{}, err
	}
	for _, s := range settingsTable {
		if err := s.resolve(&c, &e); err != nil {
			return settings{}, err
		}
	}
	if c.Agent.Threading > ThreadingInvoked {
		return settings{}, invalid("Agent.Threading %v: want ThreadingShared, ThreadingDedicated or ThreadingInvoked", c.Agent.Threading)
	}
	if c.Agent.Idle > IdleSpin {
		return settings{}, invalid("Agent.Idle %v: want IdleBlock, IdleYield or IdleSpin", c.Agent.Idle)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return settings{Group: c.Group, Interface: c.Interface, Self: c.Self, Handler: c.Handler, DiscardOwn: c.DiscardOwn,
		Keys: c.Keys, Encrypt: c.Encrypt, Insecure: c.Insecure, Logger: c.Logger,
		MembershipConfig: c.Membership, NetworkConfig: c.Network, TransportConfig: c.Transport, TuningConfig: c.Tuning, AgentConfig: c.Agent}, nil
}

// env is what the table's dependent defaults and bounds read besides the
// Config: the group's family and the datagram size the interface allows.
type env struct {
	group       netip.Addr
	maxDatagram int
}

// resolveNetwork checks and completes Group, Interface, the Network group
// and the authentication fields.
func (c *Config) resolveNetwork() (env, error) {
	if !c.Group.IsValid() {
		c.Group = DefaultGroup
	}
	g := c.Group.Addr()
	if g.Is4In6() {
		g = g.Unmap()
		c.Group = netip.AddrPortFrom(g, c.Group.Port())
	}
	switch {
	case !g.IsMulticast():
		return env{}, invalid("Group %v: want a multicast group in 239.0.0.0/8 (IPv4) or ff01::/16, ff02::/16, ff11::/16, ff12::/16 (IPv6)", c.Group)
	case g.Is4() && !adminScoped.Contains(g):
		return env{}, invalid("Group %v: IPv4 groups must be in 239.0.0.0/8", c.Group)
	case g.Is6() && !linkScoped(g):
		return env{}, invalid("Group %v: IPv6 groups must be in ff01::/16, ff02::/16, ff11::/16 or ff12::/16", c.Group)
	case c.Group.Port() == 0:
		return env{}, invalid("Group %v: port 0: want 1..65535 (all members must use the same port)", c.Group)
	}
	n := &c.Network
	if n.GroupID == 0 {
		h := fnv.New32a()
		b, _ := c.Group.MarshalBinary()
		h.Write(b)
		n.GroupID = h.Sum32() | 1
	}
	if c.Interface == "" {
		c.Interface = DefaultInterface
	}
	ifi, err := net.InterfaceByName(c.Interface)
	if err != nil {
		return env{}, invalid("Interface %q: %v", c.Interface, err)
	}
	if ifi.Flags&net.FlagLoopback == 0 && !n.AllowNonLoopback {
		return env{}, invalid("Interface %q: not a loopback interface (set Network.AllowNonLoopback for namespace tests)", c.Interface)
	}
	if err := c.staticAddrs(g); err != nil {
		return env{}, err
	}
	if !n.Unicast.IsValid() {
		n.Unicast = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 0)
		if g.Is6() {
			n.Unicast = netip.AddrPortFrom(netip.IPv6Loopback(), 0)
		}
	}
	if u := n.Unicast.Addr(); u.Is4() != g.Is4() || u.IsMulticast() || (!u.IsLoopback() && !n.AllowNonLoopback) {
		return env{}, invalid("Network.Unicast %v: want a loopback unicast address of the group's family (any unicast address with Network.AllowNonLoopback)", n.Unicast)
	}
	if err := c.checkKeys(ifi.Flags&net.FlagLoopback == 0 || !n.Unicast.Addr().IsLoopback()); err != nil {
		return env{}, err
	}
	e := env{group: g, maxDatagram: maxDatagram(ifi.MTU, g)}
	if e.maxDatagram < MinDatagram {
		return env{}, invalid("Interface %q: MTU %d leaves %d bytes per datagram, want at least %d", c.Interface, ifi.MTU, e.maxDatagram, MinDatagram)
	}
	return e, nil
}

// maxDatagram is the largest UDP payload of one datagram on an interface
// of that MTU for the group's family (the MTU less the IP and UDP headers).
func maxDatagram(mtu int, g netip.Addr) int {
	maxDG, hdr := MaxDatagramIPv4, 28
	if g.Is6() {
		maxDG, hdr = MaxDatagramIPv6, 48
	}
	if mtu > 0 && mtu-hdr < maxDG {
		maxDG = mtu - hdr
	}
	return maxDG
}

// resolveTransport checks the backend's name and options.
func (c *Config) resolveTransport() error {
	t := &c.Transport
	switch t.Backend {
	case "":
		t.Backend = TransportUDP
	case TransportUDP, TransportXDP, TransportAuto:
	default:
		return invalid("Transport.Backend %q: want %q, %q or %q", t.Backend, TransportUDP, TransportXDP, TransportAuto)
	}
	if err := t.XDP.Validate(); err != nil && t.Backend != TransportUDP && t.Open == nil {
		return invalid("Transport.XDP options: %v", err)
	}
	return nil
}

// resolveMembership checks Self and the Membership group's lists and
// switches for the membership chosen (static with Members set, else
// dynamic); g is the group address.
func (c *Config) resolveMembership(g netip.Addr) error {
	if c.Self.IsZero() {
		c.Self = randomMember()
	}
	if c.Self.ID == 0 {
		return invalid("Self %v: ID must not be 0", c.Self)
	}
	ms := &c.Membership
	if ms.Members == nil {
		for i, h := range ms.InitialHosts {
			if !h.IsValid() || h.Port() == 0 || h.Addr().IsMulticast() || h.Addr().Is4() != g.Is4() ||
				(!h.Addr().IsLoopback() && !c.Network.AllowNonLoopback) {
				return invalid("Membership.InitialHosts[%d] %v: want a unicast address and port of the group's family (loopback unless Network.AllowNonLoopback)", i, h)
			}
		}
		if ms.FetchState && ms.SetState == nil {
			return invalid("Membership.FetchState true: needs Membership.SetState")
		}
		return nil
	}
	switch {
	case len(ms.Members) == 0:
		return invalid("Membership.Members []: want nil (dynamic membership) or the static view")
	case ms.FetchState:
		return invalid("Membership.FetchState true: needs dynamic membership (Membership.Members nil)")
	case len(ms.InitialHosts) > 0:
		return invalid("Membership.InitialHosts %v: need dynamic membership (Membership.Members nil)", ms.InitialHosts)
	}
	seen := make(map[digest.Member]bool, len(ms.Members))
	for i, m := range ms.Members {
		if m.IsZero() || m.ID == 0 {
			return invalid("Membership.Members[%d] %v: want a member with a non-zero ID", i, m)
		}
		if seen[m] {
			return invalid("Membership.Members[%d] %v: listed twice", i, m)
		}
		seen[m] = true
	}
	if !seen[c.Self] {
		return invalid("Membership.Members %v: does not contain Self %v", ms.Members, c.Self)
	}
	return nil
}

// staticAddrs checks MemberAddrs against Members and the group g's
// family, and takes Network.Unicast from this member's entry when it is
// unset.
func (c *Config) staticAddrs(g netip.Addr) error {
	ms, n := &c.Membership, &c.Network
	if ms.MemberAddrs == nil {
		return nil
	}
	if len(ms.MemberAddrs) != len(ms.Members) {
		return invalid("Membership.MemberAddrs: %d addresses for %d Members (want one per member, in the same order)", len(ms.MemberAddrs), len(ms.Members))
	}
	for i, a := range ms.MemberAddrs {
		ad := a.Addr()
		if !a.IsValid() || a.Port() == 0 || ad.IsMulticast() || ad.IsUnspecified() || ad.Is4() != g.Is4() ||
			(!ad.IsLoopback() && !n.AllowNonLoopback) {
			return invalid("Membership.MemberAddrs[%d] %v: want a unicast address and port of the group's family (loopback unless Network.AllowNonLoopback)", i, a)
		}
		if ms.Members[i] != c.Self {
			continue
		}
		if !n.Unicast.IsValid() {
			n.Unicast = a
		} else if n.Unicast != a {
			return invalid("Membership.MemberAddrs[%d] %v: this member's entry must be its Network.Unicast %v", i, a, n.Unicast)
		}
	}
	return nil
}

// invalid is a validation error: it wraps ErrInvalidConfig.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}

// cloneNil copies s, keeping nil nil (nil Members means dynamic).
func cloneNil[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append([]T{}, s...)
}

var adminScoped = netip.MustParsePrefix("239.0.0.0/8")

func linkScoped(g netip.Addr) bool {
	b := g.As16()
	flags, scope := b[1]>>4, b[1]&0x0f
	return flags <= 1 && (scope == 1 || scope == 2)
}

// unbounded is a setting's upper bound when it has none.
const unbounded = math.MaxInt64

// numeric is an int, int64 or time.Duration field of Config.
type numeric interface{ ~int | ~int64 }

// ref is a numeric field of a Config, read and written as an int64.
type ref struct {
	get func() int64
	set func(int64)
	dur bool // a time.Duration: errors print durations
}

func refOf[T numeric](p *T) ref {
	_, dur := any(*p).(time.Duration)
	return ref{get: func() int64 { return int64(*p) }, set: func(v int64) { *p = T(v) }, dur: dur}
}

// setting is one row of the table: a numeric field of Config as users
// name it, its default (0 in the field selects it), its bounds, and what
// it is. Rows resolve in order: a row's default and bounds may read the
// rows above it (defFn, loFn, hiFn), and check tests what bounds cannot.
type setting struct {
	name  string
	field func(c *Config) ref
	def   int64
	defFn func(c *Config, e *env) int64
	// defDoc says what defFn picks, for the table in docs/config.md.
	defDoc string
	lo     int64
	loFn   func(c *Config) int64
	hi     int64
	hiFn   func(c *Config, e *env) int64
	pow2   bool
	check  func(c *Config, v int64) error
	doc    string
}

// resolve applies s's default to c and checks its bounds.
func (s *setting) resolve(c *Config, e *env) error {
	f := s.field(c)
	def, lo, hi := s.def, s.lo, s.hi
	if s.defFn != nil {
		def = s.defFn(c, e)
	}
	if s.loFn != nil {
		lo = s.loFn(c)
	}
	if s.hiFn != nil {
		hi = s.hiFn(c, e)
	}
	if f.get() == 0 {
		f.set(def)
	}
	v := f.get()
	if v < lo || v > hi || (s.pow2 && bits.OnesCount64(uint64(v)) != 1) {
		return invalid("%s %s: want %s (0 for the default %s)", s.name, s.format(f, v), s.bounds(f, lo, hi), s.format(f, def))
	}
	if s.check != nil {
		return s.check(c, v)
	}
	return nil
}

func (s *setting) format(f ref, v int64) string {
	if f.dur {
		return time.Duration(v).String()
	}
	return fmt.Sprint(v)
}

// bounds says what s accepts, for errors and the table in docs/config.md.
func (s *setting) bounds(f ref, lo, hi int64) string {
	var b string
	switch {
	case hi == unbounded:
		b = "at least " + s.format(f, lo)
	default:
		b = s.format(f, lo) + ".." + s.format(f, hi)
	}
	if s.pow2 {
		b = "a power of two in " + b
	}
	return b
}

// maxTTL is Network.TTL's upper bound.
func maxTTL(c *Config, _ *env) int64 {
	if c.Network.AllowNonLoopback {
		return 255
	}
	return 1
}
