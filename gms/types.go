package gms

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nakcast/nakcast/digest"
)

// Peer is a member together with its unicast address. Addr is opaque to gms
// (for example "10.0.0.1:7800"): the driver maps it to a transport address.
type Peer struct {
	Member digest.Member
	Addr   string
}

// IsZero reports whether p is the zero Peer, which as an Outgoing destination
// means multicast to the group.
func (p Peer) IsZero() bool { return p.Member.IsZero() && p.Addr == "" }

// String formats p as "member@addr".
func (p Peer) String() string { return p.Member.String() + "@" + p.Addr }

// View is a group view: its id and its members in order, the coordinator
// first. Views are immutable once built: never modify Members in place.
type View struct {
	ID      digest.ViewID
	Members []Peer
}

// IsZero reports whether v is the zero View (no view).
func (v View) IsZero() bool { return v.ID.IsZero() && len(v.Members) == 0 }

// Coord returns the coordinator (the first member), or the zero Peer.
func (v View) Coord() Peer {
	if len(v.Members) == 0 {
		return Peer{}
	}
	return v.Members[0]
}

// Index returns m's position in the view, or -1.
func (v View) Index(m digest.Member) int {
	for i, p := range v.Members {
		if p.Member == m {
			return i
		}
	}
	return -1
}

// Contains reports whether m is a member of v.
func (v View) Contains(m digest.Member) bool { return v.Index(m) >= 0 }

// Peer returns the peer for m and whether m is a member of v.
func (v View) Peer(m digest.Member) (Peer, bool) {
	if i := v.Index(m); i >= 0 {
		return v.Members[i], true
	}
	return Peer{}, false
}

// IDs returns a new slice of v's members' ids in view order.
func (v View) IDs() []digest.Member {
	ms := make([]digest.Member, len(v.Members))
	for i, p := range v.Members {
		ms[i] = p.Member
	}
	return ms
}

// Equal reports whether v and o have the same id and the same members in the
// same order.
func (v View) Equal(o View) bool { return v.ID == o.ID && slices.Equal(v.Members, o.Members) }

// String formats v as "coord#n[a.1 b.1]".
func (v View) String() string {
	var b strings.Builder
	b.WriteString(v.ID.String())
	b.WriteByte('[')
	for i, p := range v.Members {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(p.Member.String())
	}
	b.WriteByte(']')
	return b.String()
}

// MaxViewCounter is the largest view counter a member accepts: a
// membership datagram naming a higher one is malformed. A coordinator
// numbers its next view one above the highest counter it has seen, so an
// unbounded counter from a datagram (2^64-1) would make that 0, a view
// every other member refuses as stale. Counters grow by one a view, so a
// group never reaches 2^62 by itself.
const MaxViewCounter = 1 << 62

// validate checks that v is well formed: a non-zero id whose coordinator is
// the first member, no zero and no repeated member.
func (v View) validate() error {
	if v.ID.IsZero() || len(v.Members) == 0 {
		return errors.New("empty view")
	}
	if v.Members[0].Member != v.ID.Coord {
		return errors.New("view coordinator is not its first member")
	}
	for i, p := range v.Members {
		if p.Member.IsZero() {
			return errors.New("zero member in view")
		}
		for _, q := range v.Members[:i] {
			if q.Member == p.Member {
				return errors.New("member listed twice in view")
			}
		}
	}
	return nil
}

// Range is digest.Range: an inclusive range of seqnos.
type Range = digest.Range

// Protocol is what gms needs from the reliable-multicast layer (nakack). gms
// calls it from the goroutine that drives gms, never concurrently.
type Protocol interface {
	// InstallView installs v. joinDigest is the JoinRsp digest when this
	// member joins with v, the zero Digest otherwise: members new in v get
	// windows from it, or at 0 for brand-new joiners when it is zero. A
	// sender that left v keeps its window until CloseWindow.
	InstallView(v View, joinDigest digest.Digest, now time.Duration)
	// Digest returns the live digest.
	Digest() digest.Digest
	// CaptureDigest returns the digest at this point and suspends stability
	// at it (the member advertises the captured delivered values) until the
	// capture id is released. Captures nest: stability stays suspended at
	// the oldest capture held.
	CaptureDigest(now time.Duration) (id uint64, d digest.Digest)
	// CaptureMergeDigest is CaptureDigest for a merge: stability is
	// suspended at the captured Low values (the other partition fetches
	// everything above them).
	CaptureMergeDigest(now time.Duration) (id uint64, d digest.Digest)
	// ReleaseCapture ends the capture id.
	ReleaseCapture(id uint64, now time.Duration)
	// InstallMergeView installs a merge view v together with its digest d
	// (covering v) in one step: windows of members new to this member
	// resume where their windows were closed after a cut (or start at d's
	// Low, as a joiner's, for a sender never seen), windows behind d are
	// raised (never our own), and what the holder purged (at or below d's
	// Low) and we got neither delivered nor before our window's start is
	// reported lost; the rest is fetched.
	InstallMergeView(v View, d digest.Digest, now time.Duration)
	// CheckOverwrite reports whether OverwriteDigest(d) can be applied
	// (every window to be re-delivered still retains what it needs). It
	// changes nothing.
	CheckOverwrite(d digest.Digest) error
	// OverwriteDigest installs a state transfer digest (seed 003): own send
	// seqno kept, every window set to the digest's delivered value. On
	// error nothing changed (the transfer must be abandoned).
	OverwriteDigest(d digest.Digest, now time.Duration) error
	// SenderState reports this member's window for sender: highest
	// delivered, highest received and the missing ranges in (delivered,
	// received], appended to gaps. ok is false if there is no window.
	SenderState(sender digest.Member, gaps []Range) (delivered, received uint64, gapsOut []Range, ok bool)
	// Unheld appends to dst the ranges at or below delivered of sender's
	// window that this member does not hold, which it therefore cannot
	// repair: at or below the window's start (purged, or sent before this
	// member joined) and those delivered as lost.
	Unheld(sender digest.Member, dst []Range) []Range
	// ClosedWindow reports the delivered point at which this member closed
	// sender's window after a cut, if it did and holds no window of it now.
	ClosedWindow(sender digest.Member) (delivered uint64, ok bool)
	// CompleteCut fixes a departed sender's last seqno: the protocol fetches
	// what it lacks up to cut from its peers and reports the ranges in lost
	// as lost (they will never come).
	CompleteCut(sender digest.Member, cut uint64, lost []Range, now time.Duration)
	// PurgeCut releases what a departed sender's window holds up to
	// stable, the cut's stable point (what every survivor that reported a
	// window had delivered): a departed sender gets no stability, and its
	// window must make room for the rest up to the cut.
	PurgeCut(sender digest.Member, stable uint64, now time.Duration)
	// CloseWindow drops a departed sender's window once every survivor has
	// acknowledged its cut.
	CloseWindow(sender digest.Member, now time.Duration)
}

// StateApp is the application side of state transfer. gms calls State and,
// right after it, Protocol.CaptureDigest with nothing delivered in between,
// so the state and the digest describe the same point.
type StateApp interface {
	// State returns a snapshot of the application state.
	State() ([]byte, error)
	// SetState replaces the application state.
	SetState(state []byte) error
}

// Listener receives gms events. Every method is called from the goroutine
// that drives gms, during the entry point that caused the event.
type Listener interface {
	// ViewInstalled is called after this member installed v (and the
	// protocol did).
	ViewInstalled(v View)
	// Left is called when this member is no longer in the group: err is nil
	// after a graceful leave, ErrExcluded when the group excluded it,
	// ErrJoinFailed when a join gave up.
	Left(err error)
	// StateInstalled is called after a state transfer installed the state
	// and the digest, or with an error when RequestState gave up.
	StateInstalled(err error)
	// Suspected is called once when this member starts suspecting m, a
	// member of its installed view (silent for Config.SuspectTimeout, then
	// Config.ProbeAttempts probes, Config.ProbeTimeout apart, all
	// unanswered and nothing else heard from it; Stats.Suspicions
	// counts these calls), before gms acts on it: a view that excludes m
	// may be installed later in the same entry point. Suspicions reported
	// by other members are not this member's and are not passed on. A
	// suspicion ends when a view without m is installed, when this member
	// leaves the group, or when it is withdrawn (Unsuspected).
	Suspected(m digest.Member)
	// Unsuspected is called once when this member withdraws its suspicion
	// of m: m is still a member of the installed view and this member has
	// heard from it again (any membership datagram: heartbeat, probe
	// answer, ...), which gms notices at its next failure-detection check
	// (within min(HeartbeatInterval, ProbeTimeout/2, ViewAckTimeout)),
	// from Tick. This member stops reporting m and watches it again: a new
	// silence makes a new Suspected call. Every Unsuspected follows a
	// Suspected for the same m. A suspicion whose exclusion this member has
	// already queued as coordinator is not withdrawn (the exclusion goes
	// ahead), and another member's report may still have m excluded after
	// this call: a view without m then follows.
	Unsuspected(m digest.Member)
}

// Errors callers branch on.
var (
	// ErrJoinFailed: Config.MaxJoinAttempts join attempts got no valid
	// JoinRsp.
	ErrJoinFailed = errors.New("gms: join failed")
	// ErrExcluded: a view that excludes this member was installed by its
	// coordinator (a false suspicion or a partition).
	ErrExcluded = errors.New("gms: excluded from the group")
	// ErrNotMember: the operation needs this member to be in a view.
	ErrNotMember = errors.New("gms: not a member")
	// ErrBusy: a join, leave or state transfer is already under way.
	ErrBusy = errors.New("gms: operation already in progress")
	// ErrStateFailed: no provider completed a state transfer.
	ErrStateFailed = errors.New("gms: state transfer failed")
	// ErrNoState: no StateApp is configured.
	ErrNoState = errors.New("gms: no state application")
)

// Config configures a GMS. Zero durations and counts take the defaults
// documented on each field.
type Config struct {
	// Group is the group id every datagram carries.
	Group uint32
	// ID is this process's random member id (non-zero). The incarnation is
	// chosen by gms: new on every JOIN_REQ.
	ID uint64
	// Addr is this member's unicast address, opaque to gms.
	Addr string
	// Seed seeds gms's randomness (backoff jitter, ids of transfers).
	Seed uint64
	// NewProtocol returns the protocol instance for one incarnation of this
	// member; it is called when a join succeeds or a group is founded. Each
	// incarnation gets a fresh protocol: its own seqnos restart at 1.
	NewProtocol func(self digest.Member, now time.Duration) (Protocol, error)
	// App is the application for state transfer (optional).
	App StateApp
	// Listener receives events (optional).
	Listener Listener
	// Logger logs membership changes (optional; slog.Default if nil).
	Logger *slog.Logger

	// InitialHosts, if set, replaces multicast discovery: Discovery is
	// unicast to these addresses.
	InitialHosts []string
	// CreateGroup founds a singleton group when discovery finds nobody
	// for DiscoveryRounds rounds in a row.
	CreateGroup bool
	// DiscoveryTimeout is how long one discovery round collects answers
	// (default 50ms).
	DiscoveryTimeout time.Duration
	// DiscoveryRounds is how many discovery rounds in a row must go
	// unanswered before a CreateGroup member founds a group (default 3).
	// Each round multicasts a new request; an answer accepted in any round
	// ends discovery, so an answer slower than one DiscoveryTimeout (but
	// faster than DiscoveryRounds of them) leads to a join, not to a second
	// group merged later.
	DiscoveryRounds int
	// JoinTimeout is the wait for a JoinRsp after the first JOIN_REQ
	// (default 100ms); it doubles per attempt up to JoinBackoffMax
	// (default 2s), with up to 25% random jitter.
	JoinTimeout    time.Duration
	JoinBackoffMax time.Duration
	// MaxJoinAttempts bounds JOIN_REQ attempts (0 = unbounded).
	MaxJoinAttempts int
	// DigestRetries bounds how many times the coordinator retries a join
	// digest that has an unset entry before dropping the join (default 3),
	// DigestRetryInterval apart (default 10ms).
	DigestRetries       int
	DigestRetryInterval time.Duration
	// ViewAckTimeout is when a view (or JoinRsp, cut, merge view) is resent
	// to members that have not acknowledged it (default 50ms);
	// ViewChangeTimeout ends the wait for acknowledgements (default 2s).
	ViewAckTimeout    time.Duration
	ViewChangeTimeout time.Duration
	// HeartbeatInterval (default 100ms), SuspectTimeout: silence before a
	// probe (default 500ms), ProbeTimeout: wait for a probe's answer
	// (default 150ms), ProbeAttempts: probes sent, each ProbeTimeout after
	// the previous one, before a member that stays silent is suspected
	// (default 3, at least 1; like JGroups VERIFY_SUSPECT num_msgs). Any
	// datagram from the member ends the probing, so one lost probe or
	// answer does not make a suspicion. A crashed member is suspected
	// about SuspectTimeout + ProbeAttempts×ProbeTimeout after it was last
	// heard from (1s with the defaults; each step is noticed at the next
	// failure-detection check, at most min(HeartbeatInterval,
	// ProbeTimeout/2, ViewAckTimeout) late).
	HeartbeatInterval time.Duration
	SuspectTimeout    time.Duration
	ProbeTimeout      time.Duration
	ProbeAttempts     int
	// LeaveTimeout bounds a graceful leave (default 2s).
	LeaveTimeout time.Duration
	// MergeTimeout bounds a merge (default 2s).
	MergeTimeout time.Duration
	// StateChunk is the size of a state chunk (default 8 KiB), StateWindow
	// how many unacknowledged chunks may be in flight (default 8),
	// StateTimeout how long a requester waits for a transfer to complete
	// (default 2s), StateAttempts how many providers it tries (default 3).
	StateChunk    int
	StateWindow   int
	StateTimeout  time.Duration
	StateAttempts int

	// LagLimit, LagTimeout and LagExclude handle slow members (laggards.go).
	// The coordinator measures every member's lag behind the group (the
	// Protocol's LagSource: for nakack, seqnos of the group's traffic
	// that the member has not delivered while another member has) once
	// per HeartbeatInterval. A member whose lag stays above LagLimit for
	// LagTimeout (default 5s: longer than the digest captures of joins,
	// merges and state transfers, which hold a member's reports back) is
	// a laggard: the coordinator names it with its lag in its heartbeats
	// until its lag is LagLimit/2 or less, and every member reports it
	// once per episode (LagListener; Stats.LagReports). Then, by
	// default, the group keeps waiting for it (flow control bounds what
	// the senders hold); with LagExclude the coordinator suspects it and
	// excludes it like a failed member (not itself), and it may join
	// again as a new incarnation. LagLimit 0 (the default) finds no
	// laggard.
	LagLimit   uint64
	LagTimeout time.Duration
	LagExclude bool
}

func (c *Config) defaults() error {
	if c.ID == 0 {
		return errors.New("gms: Config.ID must be non-zero")
	}
	if c.NewProtocol == nil {
		return errors.New("gms: Config.NewProtocol is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.DiscoveryTimeout, 50*time.Millisecond)
	def(&c.JoinTimeout, 100*time.Millisecond)
	def(&c.JoinBackoffMax, 2*time.Second)
	def(&c.DigestRetryInterval, 10*time.Millisecond)
	def(&c.ViewAckTimeout, 50*time.Millisecond)
	def(&c.ViewChangeTimeout, 2*time.Second)
	def(&c.HeartbeatInterval, 100*time.Millisecond)
	def(&c.SuspectTimeout, 500*time.Millisecond)
	def(&c.ProbeTimeout, 150*time.Millisecond)
	def(&c.LeaveTimeout, 2*time.Second)
	def(&c.MergeTimeout, 2*time.Second)
	def(&c.StateTimeout, 2*time.Second)
	def(&c.LagTimeout, 5*time.Second)
	if c.ProbeAttempts < 0 {
		return fmt.Errorf("gms: Config.ProbeAttempts %d: want at least 1 (0 for the default 3)", c.ProbeAttempts)
	}
	if c.ProbeAttempts == 0 {
		c.ProbeAttempts = 3
	}
	if c.DigestRetries <= 0 {
		c.DigestRetries = 3
	}
	if c.DiscoveryRounds <= 0 {
		c.DiscoveryRounds = 3
	}
	if c.StateChunk <= 0 {
		c.StateChunk = 8 << 10
	}
	if c.StateChunk > maxChunk {
		c.StateChunk = maxChunk
	}
	if c.StateWindow <= 0 {
		c.StateWindow = 8
	}
	if c.StateAttempts <= 0 {
		c.StateAttempts = 3
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Outgoing is one datagram for the driver to send: a multicast when To is
// the zero Peer, otherwise a unicast to To.Addr (To.Member may be zero for
// an InitialHosts address).
type Outgoing struct {
	To   Peer
	Data []byte
}

// Status is where a member stands.
type Status uint8

// Statuses.
const (
	StatusIdle    Status = iota // not joined (before Join, after Left)
	StatusJoining               // discovering or waiting for a JoinRsp
	StatusMember                // in a view
	StatusLeaving               // LEAVE sent, waiting for LeaveRsp
)

var statusNames = [...]string{"idle", "joining", "member", "leaving"}

// String returns the status name.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "status?"
}
