package nakack

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
	"unsafe"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/ring"
	"github.com/nakcast/nakcast/wire"
)

// msg is one stored message (or fragment): a reference into a refcounted
// datagram buffer. The window holding it owns one buffer reference.
type msg struct {
	ref *dref // the datagram holding it (one buffer reference per datagram)
	off uint32
	n   uint32
	// fc is the fragment count (0: a whole message), fi the fragment index.
	fi, fc uint32
}

// payload returns the message's bytes in its datagram, capped at its end:
// a handler that appends to a payload gets a copy instead of overwriting
// the next message of the retained datagram (which repairs resend).
func (m msg) payload() []byte { return m.ref.buf.B[m.off : m.off+m.n : m.off+m.n] }

// offsetIn returns where p starts inside buf.B.
func offsetIn(buf *wire.Buffer, p []byte) uint32 {
	if len(p) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(p))) - uintptr(unsafe.Pointer(unsafe.SliceData(buf.B))))
}

type senderState uint8

const (
	live     senderState = iota
	departed             // left the view: kept open until gms closes it
)

// stamp records when a seqno was last repaired (linger).
type stamp struct {
	seq uint64
	at  time.Duration
}

// sender is the state kept per sender: its window and NAK timer. The window
// itself is created lazily on first use (start holds its initial seqno), so
// a large view of mostly silent members costs little memory.
type sender struct {
	m     digest.Member
	win   *ring.Window[msg]
	start uint64
	cap   int
	own   bool
	state senderState
	pos   int // index in Protocol.order

	highest uint64 // highest seqno known to exist
	contig  uint64 // every seqno in (delivered, contig] is held or lost
	floor   uint64 // never request at or below (the sender's reported low)
	// lostTo: every seqno at or below it that is not held is lost (a
	// MSG_NOT_FOUND's or merge digest's Low). MarkLost stops at the
	// window's capacity; roomMade marks the rest as purges make room.
	lostTo uint64
	cut    uint64 // departed: deliver and fetch only up to cut
	hasCut bool
	// cutLost: the ranges DeclareLost marked while departed (no survivor
	// held them). If a view brings the sender back before its window
	// closes, what Poll has not reported of them is fetched instead
	// (dropCut).
	cutLost []wire.Range
	// cutStable: departed, what every survivor of the cut that reported a
	// window had delivered (PurgeCut): nobody asks for it again.
	cutStable uint64
	// bounds: the cuts this member had fixed for the sender when a view
	// brought it back (dropCut), ascending, above what Poll has reported.
	// A lost event never spans one: survivors that reported before the
	// sender came back ended their event at the cut (emitLost).
	bounds []uint64

	// NAK timer: one per window, two deadlines. Gaps at or below reqTo
	// (already requested, by us or by another member whose request
	// suppressed ours) are retried at oldAt with exponential backoff that
	// restarts when the oldest gap changes; gaps above reqTo (new) are
	// requested at newAt, after the reorder delay plus jitter. nakAt is the
	// earlier of the two.
	armed   bool
	armIdx  int
	nakAt   time.Duration
	oldAt   time.Duration
	newAt   time.Duration
	backoff time.Duration
	reqTo   uint64
	oldest  uint64 // oldest gap when the backoff last grew
	lastReq time.Duration
	// last request seen from another member covering our oldest gap: its
	// highest To and when.
	otherTo uint64
	otherAt time.Duration

	inReady bool
	stamps  []stamp // repair linger (own and departed windows)
	reasm   reassembly

	// pend is a lost event that reaches the window's capacity and whose
	// end is not decided yet (pendingLost): the window consumes its seqnos
	// silently, the application is told once its end is known.
	pend pendingLost
	// discarded is the highest seqno a Skip threw away: the window cannot
	// be rewound below it (OverwriteDigest checks it).
	discarded uint64

	// Departed sender: requested ranges this member will repair after its
	// random delay (rqAt), unless another member's repair arrives first
	// (stamped in stamps after rqSince).
	// refs are the datagrams this window holds, by maxSeq from refHead on
	// (refs.go).
	refs    []*dref
	refHead int

	// chal is the MSG_NOT_FOUND of this sender waiting for its echo
	// (challenge.go).
	chal notFoundChallenge

	rq      []wire.Range
	rqAt    time.Duration
	rqSince time.Duration
	inRQ    bool

	st senderStats // repair latency and peer lag bookkeeping (stats.go)
}

func (s *sender) low() uint64 {
	if s.win == nil {
		return s.start
	}
	return s.win.Low()
}

func (s *sender) delivered() uint64 {
	if s.win == nil {
		return s.start
	}
	return s.win.Delivered()
}

func (s *sender) received() uint64 {
	if s.win == nil {
		return s.start
	}
	return s.win.Received()
}

// window returns the window, creating it on first use.
func (s *sender) window() *ring.Window[msg] {
	if s.win == nil {
		w, err := ring.NewWindow[msg](s.cap, s.start)
		if err != nil {
			panic(err) // capacity validated in New
		}
		// A freed slot's entry points at a dref, which releaseRefs
		// pools: leaving it there pins nothing the free list does not.
		w.KeepFreed()
		s.win = w
	}
	return s.win
}

// target is the highest seqno this member wants: what exists, limited to
// the cut for a departed sender.
func (s *sender) target() uint64 {
	h := max(s.highest, s.received())
	if s.state == departed {
		if !s.hasCut {
			return s.received()
		}
		h = min(h, s.cut)
	}
	return h
}

// advance moves contig over held and lost seqnos.
func (s *sender) advance() {
	c := max(s.contig, s.delivered(), s.floor)
	if s.win == nil {
		s.contig = c
		return
	}
	if g, ok := s.win.NextGap(c); ok {
		s.contig = g.From - 1
	} else {
		s.contig = max(c, s.win.Received())
	}
}

// hasGaps reports whether something wanted is missing.
func (s *sender) hasGaps() bool {
	return !s.own && max(s.contig, s.delivered(), s.floor) < s.target()
}

func (s *sender) String() string {
	return fmt.Sprintf("%v low=%d delivered=%d received=%d highest=%d contig=%d floor=%d",
		s.m, s.low(), s.delivered(), s.received(), s.highest, s.contig, s.floor)
}

// pendingDgram is a datagram held from a sender without a window.
type pendingDgram struct {
	buf    *wire.Buffer
	origin digest.Member
}

// capture is a digest captured for gms.
type capture struct {
	id     CaptureID
	d      digest.Digest
	reason string
	atLow  bool // a merge capture: advertise the captured Low, not Delivered
}

// CaptureID names a digest capture (CaptureDigest / ReleaseCapture).
type CaptureID uint64

// Protocol is one member's NAKACK state machine. Not safe for concurrent
// use: one goroutine drives it (see the package doc).
type Protocol struct {
	cfg  Config
	self digest.Member
	rng  *rand.Rand
	hdr  wire.Header

	view     View
	hasView  bool
	coord    digest.Member
	viewPos  map[digest.Member]int
	lambda   float64 // truncated-exponential backoff shape for the view size
	expm1Lam float64
	// nakJitter is NakJitter scaled to the view size (NakJitterPeers);
	// nakInterval and repairLinger are NakInterval and RepairLinger
	// scaled alike (scaledRetry).
	nakJitter    time.Duration
	nakInterval  time.Duration
	repairLinger time.Duration

	senders map[digest.Member]*sender
	order   []*sender // deterministic iteration: own first
	own     *sender
	nextSeq uint64

	// open bundle; ownPend[:ownN] are its messages not yet in the own
	// window (publishOwn)
	bundle    *wire.Buffer
	bundleRef *dref
	ownPend   []msg
	ownN      int
	// bundleOffs is SendBatch's scratch: where wire.DataWriter.AppendRun
	// put each payload.
	bundleOffs []uint32
	// filledBundle: SendBatch emitted a bundle because it was full and no
	// idle Flush came since, so the next bundle opens at MaxDatagram
	// rather than at its first run's size (bundleSize), which the next
	// run would outgrow at once (growBundle copies it).
	filledBundle bool
	bw           wire.DataWriter
	fragP        int // largest fragment payload
	maxMsg       int // largest bundled message

	out []Outgoing

	armed   []*sender
	ready   []*sender
	repairQ []*sender // departed senders with delayed repairs
	// closed remembers, for windows closed after a cut, the delivered point
	// (a merge resumes there); closedOrder bounds it (oldest first).
	closed      map[digest.Member]uint64
	closedOrder []digest.Member

	stableAt    time.Duration
	stableBytes int64
	// A STABLE due while released messages are being delivered waits
	// (re-checked every stableNudge, up to stableWaitUntil) until
	// stableWait's delivered reaches stableTarget: creditStable.
	stableWait      *sender
	stableTarget    uint64
	stableWaitUntil time.Duration
	highestAt       time.Duration
	highestIval     time.Duration
	lastData        time.Duration
	budget          int
	budgetAt        time.Duration
	// credits is each requester's repair credit (credit.go), challenged
	// the senders whose MSG_NOT_FOUND awaits its echo (challenge.go).
	credits    map[digest.Member]*repairCredit
	challenged []*sender

	round stableRound
	// lastStab is the last STABILITY this coordinator emitted (repeated to
	// a member that missed it, and with chases); chaseAt is when the
	// round's missing reports are asked for next, chaseIval the delay
	// after that (chase).
	lastStab  []digest.Entry
	chaseAt   time.Duration
	chaseIval time.Duration
	// lastSettled: lastStab's round was settled (wire.FlagSettled on its
	// STABILITY and its repeats).
	lastSettled bool
	// groupRecv: the Received of the own entry in the last STABILITY of
	// the current view (every member read up to it); see GroupReceived.
	groupRecv uint64
	// groupLow: the highest Low of the own entry in a STABILITY (every
	// member's window starts at or above it); see SendLimit.
	groupLow uint64
	// stablePoint: the highest own seqno a STABILITY of the current view
	// made stable: every member of this view delivered it, so a request of
	// this view for it crossed its requester's own STABLE (stale).
	stablePoint uint64
	captures    []capture
	capSeq      uint64
	history     *digest.History
	pending     []pendingDgram

	scratch []msg
	// offs receives a DATA datagram's message offsets as onData decodes
	// it (wire.DecodeDataOffsets), for insertData: the lengths are walked
	// once. It grows to the largest datagram's count and stays.
	offs    []uint32
	ranges  []wire.Range
	entries []digest.Entry
	// unused datagram references (refs.go)
	freeRefs []*dref
	growth   uint64   // allocations that grew the refs (GrowthAllocs)
	pscr     [][]byte // payloads for BatchHandler.DeliverBatch

	fl  flow      // flow control and rate limit (flow.go)
	one [1][]byte // Send's payload as a run, for admit
	// dgramPls holds SendDatagram's payloads as a run (MaxBundle entries).
	dgramPls [][]byte
	lag      lagState // delivery backlog (lag.go)
	// mlag: the members' lag behind the group, on the coordinator
	// (peerlag.go).
	mlag memberLags

	stats Stats
	// clock is the latest now seen by Receive or Tick, for the entry points
	// that take none (ForcePurge).
	clock time.Duration
}

// New returns a Protocol for cfg (validated; zero fields take defaults).
func New(cfg Config) (*Protocol, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	p := &Protocol{
		cfg:          cfg,
		self:         cfg.Self,
		rng:          rand.New(rand.NewPCG(cfg.Seed, cfg.Self.ID^uint64(cfg.Self.Inc)<<32)),
		hdr:          wire.Header{Group: cfg.Group, Sender: cfg.Self},
		senders:      make(map[digest.Member]*sender),
		viewPos:      make(map[digest.Member]int),
		closed:       make(map[digest.Member]uint64),
		credits:      make(map[digest.Member]*repairCredit),
		nextSeq:      1,
		fragP:        wire.MaxFragPayload(cfg.MaxDatagram),
		maxMsg:       wire.MaxBundledMessageLen(cfg.MaxDatagram),
		history:      digest.NewHistory(cfg.HistorySize),
		scratch:      make([]msg, max(cfg.MaxBundle, 1024)),
		ranges:       make([]wire.Range, 0, cfg.MaxNakRanges),
		budget:       cfg.RepairBudget,
		nakJitter:    cfg.NakJitter,
		nakInterval:  cfg.NakInterval,
		repairLinger: cfg.RepairLinger,
		stableAt:     NoDeadline,
		highestAt:    NoDeadline,
		chaseAt:      NoDeadline,
	}
	p.ownPend = make([]msg, cfg.MaxBundle)
	p.bundleOffs = make([]uint32, cfg.MaxBundle)
	p.dgramPls = make([][]byte, cfg.MaxBundle)
	p.pscr = make([][]byte, 0, deliverRunMax)
	p.own = p.addSender(cfg.Self, 0, cfg.SendWindow)
	p.own.own = true
	p.own.window()
	p.own.stamps = make([]stamp, cfg.SendWindow)
	p.fl.init(&p.cfg)
	if cfg.LagInterval == 0 {
		p.lag.at = NoDeadline
	}
	return p, nil
}

func (p *Protocol) addSender(m digest.Member, start uint64, capacity int) *sender {
	s := &sender{m: m, start: start, cap: capacity, pos: len(p.order), armIdx: -1,
		highest: start, contig: start, floor: 0}
	p.senders[m] = s
	p.order = append(p.order, s)
	return s
}

func (p *Protocol) removeSender(s *sender) {
	p.dropChallenge(s)
	p.releaseRefs(s, ^uint64(0))
	p.disarm(s)
	p.dequeueRepair(s)
	if s.inReady {
		for i, r := range p.ready {
			if r == s {
				p.ready = append(p.ready[:i], p.ready[i+1:]...)
				break
			}
		}
		s.inReady = false
	}
	s.reasm.reset()
	delete(p.senders, s.m)
	p.order = append(p.order[:s.pos], p.order[s.pos+1:]...)
	for i := s.pos; i < len(p.order); i++ {
		p.order[i].pos = i
	}
}

// Self returns this member.
func (p *Protocol) Self() digest.Member { return p.self }

// Config returns the configuration with every default filled in.
func (p *Protocol) Config() Config { return p.cfg }

// View returns the installed view (Members must not be modified).
func (p *Protocol) View() View { return p.view }

// NextSeq returns the seqno the next Send will claim.
func (p *Protocol) NextSeq() uint64 { return p.nextSeq }

// Stats returns a copy of the counters.
func (p *Protocol) Stats() Stats { return p.stats }

// Bundles returns Stats().Bundles, the data datagrams emitted so far,
// without copying the counters.
func (p *Protocol) Bundles() uint64 { return p.stats.Bundles }

// History returns the digest history (for diagnostics).
func (p *Protocol) History() *digest.History { return p.history }

// Outbox returns the datagrams to send, in order. See Outgoing for
// ownership; call ClearOutbox once they are handed off.
func (p *Protocol) Outbox() []Outgoing { return p.out }

// ClearOutbox empties the outbox (the driver has taken every reference).
func (p *Protocol) ClearOutbox() {
	clear(p.out)
	p.out = p.out[:0]
}

func (p *Protocol) emit(to digest.Member, buf *wire.Buffer, n int) {
	buf.N = n
	p.out = append(p.out, Outgoing{To: to, Buf: buf})
}

// getBuf returns a pool buffer of size bytes or nil (counted).
func (p *Protocol) getBuf(size int) *wire.Buffer {
	b := p.cfg.Pool.Get(size)
	if b == nil {
		p.stats.Drops.NoBuffer++
	}
	return b
}

func (p *Protocol) markReady(s *sender) {
	if !s.inReady {
		s.inReady = true
		p.ready = append(p.ready, s)
	}
}

// jitter returns a random backoff in [0, nakJitter): truncated exponential
// skewed towards the end of the interval (Nonnenmacher & Biersack), so that
// in a group of n receivers with the same gap only a few fire before the
// first request reaches the others. nakJitter is NakJitter scaled to the
// view (scaledJitter): zero with a single receiver.
func (p *Protocol) jitter() time.Duration { return p.spread(p.nakJitter) }

// scaledRetry returns NakInterval and RepairLinger for a view of n
// members, scaled like the jitter (peerShare): the whole of them from
// NakJitterPeers other receivers on; below, RepairLinger in proportion
// and NakInterval in proportion but at least a quarter of it (a view of
// two retries a lost repair after NakInterval/4: 2.5ms with the engine's
// default 10ms, instead of a full NakInterval during which the sender's
// retention window fills).
//
// In a view of two no other receiver asks for the same loss, but the
// network may still duplicate or delay a copy of the lone receiver's
// request, and answering that copy repairs again what was just repaired.
// The receiver's own retry comes a whole retry interval after its
// request, so there the linger is half that interval (at most
// RepairLinger): a repeat sooner than that is a copy, and the margin for
// delay variation is the same either way.
func scaledRetry(c *Config, n int) (interval, linger time.Duration) {
	num, den := peerShare(c, n)
	interval = max(c.NakInterval*time.Duration(num)/time.Duration(den), c.NakInterval/4)
	linger = c.RepairLinger * time.Duration(num) / time.Duration(den)
	if num == 0 {
		linger = min(c.RepairLinger, interval/2)
	}
	return interval, linger
}

// peerShare is the fraction num/den of the whole NakJitter (and the
// scaled retry timing) that applies in a view of n members.
func peerShare(c *Config, n int) (num, den int) {
	peers := n - 2
	switch {
	case c.NakJitterPeers <= 0 || peers >= c.NakJitterPeers:
		return 1, 1
	case peers <= 0:
		return 0, 1
	}
	return peers, c.NakJitterPeers
}

// jitterViewBase is the number of receivers up to which the whole
// NakJitter applies; beyond it the jitter grows with the view
// (scaledJitter).
const jitterViewBase = 16

// scaledJitter returns NakJitter for a view of n members: the whole of it
// from NakJitterPeers other receivers (n-2) on, proportionally less below,
// none for n <= 2 (nobody to suppress); and beyond jitterViewBase
// receivers (n-1) more, in proportion to ln(receivers)+1, the shape (λ) of
// the truncated exponential (spread). With that shape the requests sent
// before the first one reaches the others number about 1 + λδ/(eT) for a
// network delay δ and a jitter T (Nonnenmacher and Biersack), so T grows
// with λ to keep them constant: at 1,000 receivers 2.1 NakJitter, where a
// lost request otherwise let tens of receivers fire before the next one
// arrived. NakJitterPeers < 0: always the whole NakJitter.
func scaledJitter(c *Config, n int) time.Duration {
	peers := n - 2
	switch {
	case c.NakJitterPeers < 0:
		return c.NakJitter
	case peers >= c.NakJitterPeers:
		if r := n - 1; r > jitterViewBase {
			grow := (math.Log(float64(r)) + 1) / (math.Log(jitterViewBase) + 1)
			return time.Duration(float64(c.NakJitter) * grow)
		}
		return c.NakJitter
	case peers <= 0:
		return 0
	}
	return c.NakJitter * time.Duration(peers) / time.Duration(c.NakJitterPeers)
}

// spread returns a random delay in [0, j), distributed like jitter.
func (p *Protocol) spread(j time.Duration) time.Duration {
	if j <= 0 {
		return 0
	}
	u := p.rng.Float64()
	if p.lambda <= 0 {
		return time.Duration(u * float64(j))
	}
	return time.Duration(float64(j) * math.Log1p(u*p.expm1Lam) / p.lambda)
}

// oldestGap returns the first seqno s lacks and wants.
func (s *sender) oldestGap() uint64 { return max(s.contig, s.delivered(), s.floor) + 1 }

// firstGapAbove returns the first seqno above x that s lacks and wants.
func (s *sender) firstGapAbove(x uint64) (uint64, bool) {
	t := s.target()
	x = max(x, s.oldestGap()-1)
	if x >= t {
		return 0, false
	}
	if s.win != nil {
		if g, ok := s.win.NextGap(x); ok && g.From <= t {
			return g.From, true
		}
	}
	if r := max(s.received(), x); t > r {
		return r + 1, true
	}
	return 0, false
}

// hasGapAbove reports whether s lacks and wants a seqno above x.
func (s *sender) hasGapAbove(x uint64) bool {
	_, ok := s.firstGapAbove(x)
	return ok
}

// arm starts s's NAK timer for a fresh gap episode.
func (p *Protocol) arm(s *sender, now time.Duration) {
	s.gapOpened(now)
	s.armed = true
	s.armIdx = len(p.armed)
	p.armed = append(p.armed, s)
	s.backoff = 0
	s.oldAt, s.newAt = NoDeadline, NoDeadline
	s.oldest = 0
}

func (p *Protocol) disarm(s *sender) {
	if !s.armed {
		return
	}
	last := p.armed[len(p.armed)-1]
	p.armed[s.armIdx] = last
	last.armIdx = s.armIdx
	p.armed[len(p.armed)-1] = nil
	p.armed = p.armed[:len(p.armed)-1]
	s.armed = false
	s.armIdx = -1
}

// markLost marks as lost what s lacks in (delivered, to] (to: a holder's
// low, so nothing there can come), as far as the window's capacity allows;
// the rest is remembered in lostTo and marked by roomMade after purges.
// It returns how many seqnos were newly marked.
func (p *Protocol) markLost(s *sender, to uint64) int {
	s.lostTo = max(s.lostTo, to)
	w := s.window()
	n := w.MarkLost(w.Delivered()+1, to)
	if n > 0 {
		s.advance()
		if s.contig > s.delivered() {
			p.markReady(s)
		}
	}
	return n
}

// roomMade runs after s's window low rose (a purge, a skip): what lay
// beyond the window's capacity may fit now. Pending lost marks (lostTo, a
// cut's declared ranges) are applied
// and the gaps re-checked, so seqnos dropped as Full (the sender ran ahead
// of a member that purged late) are requested now rather than never.
func (p *Protocol) roomMade(s *sender, now time.Duration) {
	if s.own || s.win == nil {
		return
	}
	if s.lostTo > s.win.Received() {
		p.markLost(s, s.lostTo)
	}
	if s.hasCut {
		p.markCutLost(s)
	}
	p.checkGaps(s, now)
}

// checkGaps (re)computes s's NAK deadlines after its state changed.
func (p *Protocol) checkGaps(s *sender, now time.Duration) {
	if !s.hasGaps() {
		p.gapClosed(s, now)
		p.disarm(s)
		return
	}
	if !s.armed {
		p.arm(s, now)
	}
	g := s.oldestGap()
	if g <= s.reqTo {
		if s.oldest != 0 && g != s.oldest && s.backoff > p.nakInterval {
			// Progress: the backoff grew for a gap now filled; the new
			// oldest gap was requested at lastReq and is retried one
			// interval after it.
			s.backoff = p.nakInterval
			s.oldAt = min(s.oldAt, s.lastReq+s.backoff+p.jitter())
		}
		if s.oldAt == NoDeadline {
			s.oldAt = s.lastReq + p.nextBackoff(s.backoff)
		}
	}
	if s.newAt == NoDeadline && s.hasGapAbove(s.reqTo) {
		if s.otherTo >= max(g, s.reqTo+1) && now-s.otherAt < p.nakInterval {
			// Another member asked for it an instant ago: as if we had.
			s.reqTo = max(s.reqTo, s.otherTo)
			s.lastReq = s.otherAt
			s.oldAt = min(s.oldAt, s.otherAt+p.nakInterval+p.jitter())
			p.stats.Suppressed++
		} else {
			s.newAt = now + p.cfg.NakDelay + p.jitter()
		}
	}
	s.nakAt = min(s.oldAt, s.newAt)
	if s.nakAt == NoDeadline { // nothing schedulable (cannot happen with gaps)
		s.nakAt = now + p.nakInterval
	}
}

func (p *Protocol) nextBackoff(b time.Duration) time.Duration {
	if b == 0 {
		return p.nakInterval
	}
	return min(2*b, p.cfg.NakMaxInterval)
}

// Tick fires every timer due at now: NAK rounds, STABLE, the idle Highest
// announcement, the lag measurement.
func (p *Protocol) Tick(now time.Duration) {
	p.clock = max(p.clock, now)
	p.publishOwn()
	for i := 0; i < len(p.armed); {
		s := p.armed[i]
		if s.nakAt > now {
			i++
			continue
		}
		p.nakRound(s, now)
		if s.armed && s.nakAt <= now { // never leave a deadline that does not advance
			s.nakAt = now + p.nakInterval
		}
		if i < len(p.armed) && p.armed[i] == s {
			i++
		}
	}
	for i := 0; i < len(p.repairQ); {
		if s := p.repairQ[i]; s.rqAt <= now {
			p.delayedRepair(s, now) // removes s from repairQ
			continue
		}
		i++
	}
	if p.hasView && now >= p.stableAt {
		if w := p.stableWait; w != nil && p.senders[w.m] == w && w.delivered() < p.stableTarget && now < p.stableWaitUntil {
			p.stableAt = now + stableNudge // delivery of what a repair released is under way
		} else {
			p.sendStable(now)
		}
	}
	if now >= p.chaseAt {
		p.chase(now)
	}
	if now >= p.highestAt {
		p.announceHighest(now)
	}
	p.tickChallenges(now)
	if p.hasView && now >= p.lag.at {
		p.checkLag(now)
	}
}

// NextDeadline returns when Tick must next be called (NoDeadline if no timer
// is armed).
func (p *Protocol) NextDeadline() time.Duration {
	d := min(p.stableAt, p.highestAt, p.chaseAt, p.lag.at)
	if !p.hasView {
		d = p.highestAt
	}
	for _, s := range p.armed {
		d = min(d, s.nakAt)
	}
	for _, s := range p.repairQ {
		d = min(d, s.rqAt)
	}
	for _, s := range p.challenged {
		d = min(d, s.chal.at)
	}
	return d
}
