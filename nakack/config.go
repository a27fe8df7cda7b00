package nakack

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

// Sentinel errors callers branch on.
var (
	// ErrBackPressure: the own retention window (or the buffer pool) has no
	// room; nothing was claimed. Retry after stability purges.
	ErrBackPressure = errors.New("nakack: back-pressure")
	// ErrTooLarge: the payload exceeds Config.MaxMessage.
	ErrTooLarge = errors.New("nakack: message too large")
	// ErrNoView: the call needs an installed view.
	ErrNoView = errors.New("nakack: no view installed")
	// ErrUnknownMember: the member has no window.
	ErrUnknownMember = errors.New("nakack: unknown member")
	// ErrLive: the operation is for a departed sender and the member is
	// in the view.
	ErrLive = errors.New("nakack: member is in the view")
	// ErrBadConfig wraps every Config validation error.
	ErrBadConfig = errors.New("nakack: bad config")
)

// NoDeadline is what NextDeadline returns when no timer is armed.
const NoDeadline = time.Duration(1<<63 - 1)

// Config configures a Protocol. Zero fields take the documented defaults
// (for NakDelay, NakJitter and RepairLinger a negative value means none);
// Self and Pool are required.
type Config struct {
	// Self is this member (one incarnation). Required.
	Self digest.Member
	// Group is the group id written into and checked on every datagram.
	Group uint32
	// Pool supplies datagram buffers (bundles, repairs, control). Required;
	// MaxDatagram must not exceed Pool.MaxDatagram().
	Pool *wire.Pool
	// MaxDatagram is the largest datagram built (bundle size). Default:
	// Pool.MaxDatagram().
	MaxDatagram int
	// MaxBundle bounds the messages per bundle (and the run a received
	// bundle may insert at once). Default 1024.
	MaxBundle int
	// SendWindow is the own retention capacity in messages (power of two):
	// Send back-pressures when this many are unpurged. Default 4096.
	SendWindow int
	// RecvWindow is the capacity of each per-sender receive window (power of
	// two, >= SendWindow). It should be the same at every member: a sender
	// sends nothing beyond RecvWindow above the lowest point any member's
	// window for it starts at (SendLimit), so that a member that purges
	// late, its STABILITY lost, discards nothing; at 2x SendWindow that
	// bound waits only for a member that missed two STABILITYs in a row,
	// at SendWindow for every member's next report after each purge. See
	// the package doc, "Windows, capacity and late stability". Default 2x
	// SendWindow.
	RecvWindow int
	// MaxMessage is the largest message Send accepts (fragmented above one
	// bundle). Default 1 MiB or what a quarter of SendWindow holds in
	// fragments, whichever is less; must fit in SendWindow fragments.
	MaxMessage int

	// NakDelay is the wait after a gap is seen before the first request,
	// letting reordering settle. Default 2ms.
	NakDelay time.Duration
	// NakJitter is the spread of the random backoff added to every request
	// timer (truncated exponential over [0, NakJitter), skewed late so that
	// few of many receivers fire first). Should be several network latencies
	// for suppression to work in large groups. Default 4ms. It is scaled
	// to the view (see NakJitterPeers): the spread actually used is
	// NakJitter * min(1, (n-2)/NakJitterPeers) in a view of n members, and
	// beyond 16 receivers (n-1) NakJitter * (ln(n-1)+1)/(ln 16+1) (2.1x at
	// 1,000), which keeps the requests per loss about constant as the
	// view grows.
	NakJitter time.Duration
	// NakJitterPeers is the number of other receivers (view size - 2: all
	// but the sender and this member) from which the whole NakJitter
	// applies. The jitter only exists so that one receiver's request
	// suppresses the others' (SRM, Aeron's group-size-dependent NAK delay):
	// with fewer peers there are fewer requests to save, and with a single
	// receiver (a view of two) none, so the jitter shrinks in proportion and
	// a lone receiver requests right after NakDelay. Default 2: no jitter
	// in a view of 2, half of it in a view of 3, all of it from 4 members
	// on (gms's 4-member scenarios keep their timing: with 8, their faster
	// repairs left no seed exercising the lost-range path of a crashed
	// sender's cut). Negative: always the whole NakJitter.
	NakJitterPeers int
	// NakInterval is the first retry interval after a request (or after
	// seeing another member's request); it doubles while the gap stays open.
	// Should exceed a round trip. Default 20ms. Scaled to the view like
	// NakJitter, but never below a quarter of it: NakInterval/4 in a view of
	// two, NakInterval/2 in a view of three (with NakJitterPeers 2), the
	// whole from four members on.
	NakInterval time.Duration
	// NakMaxInterval caps the retry interval. Default 1s.
	NakMaxInterval time.Duration
	// MaxNakRanges bounds the ranges requested per sender per round.
	// Default 1024.
	MaxNakRanges int
	// DiscardOwn: Poll does not deliver this member's own messages (nor
	// count them in Stats.Delivered); it consumes them at once, so they
	// count as delivered here for stability, and they stay retained for
	// repairs until stable as usual (JGroups' discard_own_messages).
	DiscardOwn bool
	// UnicastNaks sends requests to the original sender instead of
	// multicasting them (no suppression; for small groups).
	UnicastNaks bool

	// RepairLinger: a repeat request for a seqno repaired within it is
	// ignored (several receivers asked for the same loss, or the network
	// duplicated a request). Default 5ms. Scaled to the view like
	// NakJitter, but in a view of two, where a repeat is either the lone
	// receiver's retry of a lost repair or a network copy of its request,
	// half the retry interval (at most RepairLinger): the retry is
	// answered, the copy is not.
	RepairLinger time.Duration
	// RepairBudget is how many messages may be repaired per RepairInterval
	// (excess counted and left to the next request). Default 65536.
	RepairBudget int
	// RepairInterval is the repair budget period. Default 10ms.
	RepairInterval time.Duration
	// RepairRatio and RepairBurst bound what one requester can make this
	// member repair: over any interval, the repair datagrams sent in
	// answer to requester r total at most RepairRatio times the bytes of
	// the XMIT_REQ datagrams received from r, plus RepairBurst (see
	// credit.go). Defaults: MaxDatagram/8 (every range a request names
	// can be answered with two maximum-size datagrams) but at least 64,
	// and 64 maximum-size datagrams.
	RepairRatio int
	RepairBurst int
	// RepairJitter spreads the repairs of a departed sender's messages:
	// every member holding them may answer, so each waits a random delay
	// over [0, RepairJitter) (truncated exponential, like NakJitter) and
	// drops what another member repaired meanwhile (SRM-style suppression).
	// Should be several network latencies and well below NakInterval.
	// Default NakJitter; negative: repair at once.
	RepairJitter time.Duration

	// InFlightBytes is flow control: the most payload bytes of this
	// member's own messages that may be in flight, sent but not yet read
	// by every member of the view (GroupReceived: their STABLE reports,
	// folded into STABILITY). Send and SendBatch hold further messages
	// back (ErrFlowControl) until a STABILITY shows the members read more;
	// the first message always goes when nothing is in flight. Default 0:
	// none (SendLimit still bounds what is unstable).
	InFlightBytes int
	// RateLimit caps the payload bytes a second this member sends (a
	// token bucket on the protocol's clock with a burst of MaxDatagram
	// bytes, or of one larger message; ErrRateLimit). Default 0: none.
	RateLimit int64
	// LagInterval is how often the delivery backlog is measured (Backlog:
	// the most messages of one other sender received and not delivered);
	// above LagThreshold the member is lagging (Lagging, one
	// Stats.LaggingEpisodes and one WARN per episode) until the backlog
	// falls below half of it. The application is not consuming, and
	// stability, so every sender, will soon wait for it. LagInterval 0
	// (the default) measures nothing; LagThreshold defaults to
	// SendWindow/2.
	LagInterval  time.Duration
	LagThreshold int

	// StableInterval is the period of STABLE digests. Default 200ms.
	StableInterval time.Duration
	// StableBytes sends a STABLE early once this many data bytes were
	// received since the last one, counting a second time the messages a
	// datagram filling a gap releases for delivery (such a STABLE waits
	// for their delivery: see the package doc, "Stability"). Default 4 MiB.
	StableBytes int64

	// HighestInterval is how long a sender stays idle before announcing its
	// highest seqno; the announcement repeats with doubling intervals up to
	// HighestMaxInterval. Default 20ms and 2s.
	HighestInterval    time.Duration
	HighestMaxInterval time.Duration

	// Authenticated says the driver authenticates every datagram (a group
	// key): a MSG_NOT_FOUND from the original sender is then acted on at
	// once. Without it (open mode, the default), a receiver acts on one
	// only once the sender confirmed it: a CHALLENGE with a fresh nonce
	// sent to the sender, which echoes it only if it really holds none of
	// the seqnos (challenge.go). Source addresses can be spoofed, and
	// MSG_NOT_FOUND is the one message that makes a member skip data.
	Authenticated bool
	// Nonce returns the challenges' nonces: it must be unpredictable to
	// anyone outside the group (default: a ChaCha8 generator seeded from
	// crypto/rand). Tests and the simulator pass a seeded one so that a
	// run replays.
	Nonce func() uint64
	// ChallengeTimeout is how long a receiver waits for the echo of a
	// CHALLENGE before sending it again, ChallengeAttempts how many it
	// sends before it gives the MSG_NOT_FOUND up (a later one starts
	// again). Defaults NakInterval and 3.
	ChallengeTimeout  time.Duration
	ChallengeAttempts int

	// PendingMax bounds the datagrams held from senders without a window.
	// Default 64; negative: none are held.
	PendingMax int
	// HistorySize is the number of digest records kept. Default 32.
	HistorySize int
	// Seed seeds the random backoff (math/rand/v2 PCG, mixed with Self).
	Seed uint64
	// Logger receives the MSG_NOT_FOUND warning. Default: discard.
	Logger *slog.Logger
	// OnLost, if set, is told of every lost range Poll reports, just
	// before the handler's Lost and on Poll's goroutine: a driver that
	// records lost ranges whatever handler it gives Poll passes the
	// application's handler to Poll as it is, with no wrapper between
	// the protocol and each Deliver.
	OnLost func(sender digest.Member, from, to uint64)
}

func (c *Config) setDefaults() error {
	bad := func(field string, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadConfig, field, fmt.Sprintf(format, args...))
	}
	if c.Self.IsZero() {
		return bad("Self", "must not be the zero member")
	}
	if c.Pool == nil {
		return bad("Pool", "required")
	}
	if c.MaxDatagram == 0 {
		c.MaxDatagram = c.Pool.MaxDatagram()
	}
	if c.MaxDatagram < 512 || c.MaxDatagram > c.Pool.MaxDatagram() {
		return bad("MaxDatagram", "%d not in [512, %d]", c.MaxDatagram, c.Pool.MaxDatagram())
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxBundle, 1024)
	def(&c.SendWindow, 4096)
	def(&c.RecvWindow, 2*c.SendWindow)
	def(&c.MaxMessage, min(1<<20, max(1, c.SendWindow/4)*wire.MaxFragPayload(c.MaxDatagram)))
	def(&c.MaxNakRanges, 1024)
	def(&c.RepairBudget, 65536)
	def(&c.PendingMax, 64)
	def(&c.HistorySize, 32)
	def(&c.NakJitterPeers, 2)
	defd(&c.NakDelay, 2*time.Millisecond)
	defd(&c.NakJitter, 4*time.Millisecond)
	defd(&c.NakInterval, 20*time.Millisecond)
	defd(&c.NakMaxInterval, time.Second)
	defd(&c.RepairLinger, 5*time.Millisecond)
	defd(&c.RepairInterval, 10*time.Millisecond)
	defd(&c.RepairJitter, c.NakJitter)
	defd(&c.StableInterval, 200*time.Millisecond)
	defd(&c.HighestInterval, 20*time.Millisecond)
	defd(&c.HighestMaxInterval, 2*time.Second)
	def(&c.LagThreshold, c.SendWindow/2)
	for _, v := range []*time.Duration{&c.NakDelay, &c.NakJitter, &c.RepairLinger, &c.RepairJitter} {
		*v = max(*v, 0) // negative: explicitly none
	}
	if c.StableBytes == 0 {
		c.StableBytes = 4 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if err := c.check(); err != nil {
		return err
	}
	if err := c.securityDefaults(); err != nil {
		return err
	}
	fragPayload := wire.MaxFragPayload(c.MaxDatagram)
	if c.MaxMessage < 1 || int64(c.MaxMessage) > 1<<31 {
		return bad("MaxMessage", "%d not in [1, 2^31]", c.MaxMessage)
	}
	if nfrag := (c.MaxMessage + fragPayload - 1) / fragPayload; nfrag > c.SendWindow {
		return bad("MaxMessage", "%d needs %d fragments of %d bytes, more than SendWindow %d",
			c.MaxMessage, nfrag, fragPayload, c.SendWindow)
	}
	return nil
}

// check validates the sizes and intervals once their defaults are set.
func (c *Config) check() error {
	bad := func(field string, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadConfig, field, fmt.Sprintf(format, args...))
	}
	pow2 := func(v int) bool { return v > 0 && v&(v-1) == 0 }
	switch {
	case c.MaxBundle < 1 || c.MaxBundle > 1<<16:
		return bad("MaxBundle", "%d not in [1, 65536]", c.MaxBundle)
	case !pow2(c.SendWindow):
		return bad("SendWindow", "%d is not a positive power of two", c.SendWindow)
	case !pow2(c.RecvWindow) || c.RecvWindow < c.SendWindow:
		return bad("RecvWindow", "%d must be a power of two >= SendWindow %d", c.RecvWindow, c.SendWindow)
	case c.MaxNakRanges < 1:
		return bad("MaxNakRanges", "%d < 1", c.MaxNakRanges)
	case c.RepairBudget < 1:
		return bad("RepairBudget", "%d < 1", c.RepairBudget)
	case c.NakInterval <= 0 || c.NakMaxInterval < c.NakInterval:
		return bad("NakInterval/NakMaxInterval", "need 0 < interval <= max interval")
	case c.RepairInterval <= 0 || c.StableInterval <= 0:
		return bad("RepairInterval/StableInterval", "must be positive")
	case c.HighestInterval <= 0 || c.HighestMaxInterval < c.HighestInterval:
		return bad("HighestInterval/HighestMaxInterval", "need 0 < interval <= max")
	case c.InFlightBytes < 0 || c.RateLimit < 0 || c.LagInterval < 0 || c.LagThreshold < 1:
		return bad("InFlightBytes/RateLimit/LagInterval/LagThreshold", "need InFlightBytes, RateLimit, LagInterval >= 0, LagThreshold >= 1")
	}
	return nil
}

// securityDefaults fills in and checks the repair credit and the
// challenge settings (after MaxDatagram and NakInterval are set).
func (c *Config) securityDefaults() error {
	if c.RepairRatio == 0 {
		c.RepairRatio = max(64, 2*c.MaxDatagram/wire.RangeLen)
	}
	if c.RepairBurst == 0 {
		c.RepairBurst = 64 * c.MaxDatagram
	}
	if c.ChallengeAttempts == 0 {
		c.ChallengeAttempts = 3
	}
	if c.ChallengeTimeout == 0 {
		c.ChallengeTimeout = c.NakInterval
	}
	if c.Nonce == nil {
		c.Nonce = randomNonces()
	}
	switch {
	case c.RepairRatio < 1 || c.RepairBurst < c.MaxDatagram:
		return fmt.Errorf("%w: RepairRatio/RepairBurst: need ratio >= 1 and burst >= MaxDatagram %d", ErrBadConfig, c.MaxDatagram)
	case c.ChallengeTimeout <= 0 || c.ChallengeAttempts < 1:
		return fmt.Errorf("%w: ChallengeTimeout/ChallengeAttempts: need a positive timeout and at least 1 attempt", ErrBadConfig)
	}
	return nil
}

// View is digest.View: a view's id and its members in view order, the
// coordinator first.
type View = digest.View

// Handler receives deliveries from Poll. Neither method may call back into
// the Protocol. payload is valid only during the call.
type Handler interface {
	// Deliver hands over one message of sender with seqno seq (for a
	// fragmented message, the seqno of its first fragment).
	Deliver(sender digest.Member, seq uint64, payload []byte)
	// Lost reports that sender's seqnos from..to will never be delivered
	// (reported once, in order with the deliveries).
	Lost(sender digest.Member, from, to uint64)
}

// BatchHandler is a Handler that also takes runs of whole messages at once:
// Poll hands every run of consecutive whole (unfragmented) messages of one
// sender that it consumes in one step to DeliverBatch instead of calling
// Deliver per message (fragmented messages and lost runs still go to
// Deliver and Lost, in order with the batches). A limit may end a batch
// early.
type BatchHandler interface {
	Handler
	// DeliverBatch hands over len(payloads) consecutive messages of sender,
	// seqnos first, first+1, ... . The payload slices are valid during the
	// call only, and payloads itself is reused by the next call.
	DeliverBatch(sender digest.Member, first uint64, payloads [][]byte)
}

// Outgoing is one datagram to send: To is the zero Member for multicast, or
// the destination member of a unicast. The driver owns one reference to Buf
// and must Release it after sending.
type Outgoing struct {
	To  digest.Member
	Buf *wire.Buffer
}

// Drops counts dropped datagrams (or messages, where noted) by reason.
type Drops struct {
	Malformed  uint64 // undecodable datagrams (including foreign group, version)
	Self       uint64 // own datagrams looped back
	NotMember  uint64 // datagrams from senders without a window, dropped by a view or the queue bound
	Full       uint64 // messages beyond a receive window's capacity
	NoBuffer   uint64 // datagrams not built because the pool refused a buffer
	WrongView  uint64 // control messages for another view or coordinator
	Reassembly uint64 // fragments dropped by the reassembly bound
	// Departed counts messages of a departed sender (left the view, window
	// held open for its cut) refused so that every survivor ends with the
	// same prefix: sent by that sender itself before its cut is fixed, and
	// once it is, beyond the cut or in a range marked lost (declared lost).
	Departed uint64
	// Stranger counts control datagrams from a member that may not send
	// them here: an XMIT_REQ, CHALLENGE or HIGHEST from outside the view,
	// an ECHO nobody asked for (see Stats.EchoesIgnored).
	Stranger uint64
}

// Stats are a Protocol's counters (monotonic).
type Stats struct {
	Sent                uint64 // messages sent (seqnos claimed)
	Delivered           uint64 // messages delivered by Poll (own included, unless DiscardOwn)
	OwnDiscarded        uint64 // own messages consumed without delivery (DiscardOwn)
	Bundles             uint64 // data datagrams emitted (bundles and fragments)
	Received            uint64 // messages inserted into windows
	RepairsReceived     uint64 // of which carried by repair datagrams (FlagRepair): losses this member got back
	Retransmitted       uint64 // messages sent as repairs
	RepairsSkipped      uint64 // repair messages skipped: repaired within the linger
	RepairsOverBudget   uint64 // repair messages not sent: budget exhausted
	RepairsOverCredit   uint64 // repair messages not sent (or not queued): the requester's credit is spent (RepairRatio)
	NakBytes            uint64 // bytes of the XMIT_REQ datagrams received from members (what earns repair credit)
	RepairBytes         uint64 // bytes of the repair datagrams sent
	RepairsSuppressed   uint64 // departed sender's messages not repaired: another member repaired them during our delay
	NakSent             uint64 // XMIT_REQ datagrams sent
	NakRangesSent       uint64 // ranges in them
	NakReceived         uint64 // XMIT_REQ datagrams received
	Suppressed          uint64 // own request rounds suppressed by another member's request
	StaleRequests       uint64 // request ranges (or their lower parts) at or below the requester's delivered or the view's own stable point
	MsgNotFoundSent     uint64
	NotFoundOtherView   uint64 // MSG_NOT_FOUND not sent: the request was for another view (repair)
	MsgNotFoundReceived uint64
	MsgNotFoundIgnored  uint64 // not from the original sender, other view, not for us, moving nothing, or a challenge for it pending
	ChallengesSent      uint64 // CHALLENGEs sent to confirm a MSG_NOT_FOUND (resends included)
	ChallengesExpired   uint64 // MSG_NOT_FOUNDs given up: no echo after ChallengeAttempts
	NotFoundConfirmed   uint64 // MSG_NOT_FOUNDs acted on (confirmed by an echo, or authenticated)
	ChallengesAnswered  uint64 // CHALLENGEs of others echoed: we hold none of the seqnos
	ChallengesRefused   uint64 // CHALLENGEs of others not echoed: we hold some of the seqnos, or another view
	EchoesIgnored       uint64 // ECHOs that match no pending challenge (wrong nonce, ranges, view or sender)
	Duplicates          uint64 // messages already held
	Old                 uint64 // messages at or below delivered (or lost)
	Pending             uint64 // datagrams queued from senders without a window
	PendingInserted     uint64 // of which later inserted
	BackPressure        uint64 // Send calls refused: SendLimit or no buffer
	FlowControlWaits    uint64 // times flow control began holding messages back (InFlightBytes)
	LaggingEpisodes     uint64 // times the delivery backlog rose above LagThreshold
	LostRanges          uint64 // lost-range events reported
	LostMessages        uint64 // seqnos in them
	StableSent          uint64
	StabilitySent       uint64
	StabilityReceived   uint64
	StabilitySettled    uint64 // STABILITY rounds made (coordinator) or received that were settled (wire.FlagSettled)
	StableChased        uint64 // coordinator: reports asked for again (STABILITY with FlagReport) because a round lacked them
	Purged              uint64 // messages released by stability (or forced) purges
	HighestSent         uint64
	Drops               Drops
	Repair              RepairStats // repair latency (stats.go)
}
