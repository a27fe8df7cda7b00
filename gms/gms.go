package gms

import (
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/nakcast/nakcast/digest"
)

// Never is NextDeadline's answer when no timer is pending.
const Never time.Duration = 1<<63 - 1

// Stats counts what a GMS did. Every field only grows.
type Stats struct {
	Malformed        uint64 // datagrams that failed to decode
	Refused          uint64 // views, JoinRsps, suspicions, state requests, leaves and merge requests from a member not entitled to send them
	ViewsInstalled   uint64 // views this member installed
	JoinRspRejected  uint64 // JoinRsps the joiner refused (view/digest mismatch, not for us)
	JoinRspSent      uint64 // JoinRsps sent (resends included)
	JoinDigestRetry  uint64 // join digests that had an unset entry (seed 002)
	JoinsDropped     uint64 // joins given up after DigestRetries (no JoinRsp sent)
	JoinAttempts     uint64 // JOIN_REQs sent
	JoinReqStale     uint64 // JOIN_REQs ignored: a late retry of a join already admitted (coordinator)
	ViewChangeAborts uint64 // view changes that timed out waiting for acks
	Suspicions       uint64 // members this member suspected
	Unsuspicions     uint64 // suspicions withdrawn: the suspect was heard from again (Listener.Unsuspected)
	CutsClosed       uint64 // departed senders' cuts closed (coordinator)
	CutsResumed      uint64 // cuts left open by an earlier coordinator, resumed (coordinator)
	LeaversTimedOut  uint64 // graceful leavers' cuts fixed again once the leave had timed out: the leaver repairs nothing more (coordinator)
	CutReqsEarly     uint64 // cut requests ignored: the sender was still in this member's view (survivor)
	ViewsResent      uint64 // views resent to a member whose heartbeat named an older view of ours (coordinator)
	BehindExcluded   uint64 // members excluded because no view could bring them forward (coordinator, memberBehind)
	StateDeferred    uint64 // state requests left unanswered while a departed sender's window was open or this member fetched a state (provider)
	StateRetried     uint64 // complete transfers refetched because digest and view (or open windows) did not match (requester)
	Merges           uint64 // merge views installed by this member as leader
	MergeLeftOut     uint64 // members left out of a merge view (no digest entry)
	StateInstalled   uint64 // state transfers completed as requester
	StateAborted     uint64 // state transfers aborted (requester timeouts, digests or states that could not be installed)
	StateServed      uint64 // state transfers completed as provider
	LeaveTimeouts    uint64 // graceful leaves given up after LeaveTimeout without a LeaveRsp (leaver)
	LeftTogether     uint64 // graceful leaves ended at once: every other member of the view was leaving too (leaver)
	Laggards         uint64 // lagging episodes opened (coordinator: Config.LagLimit)
	LaggardsExcluded uint64 // laggards suspected and excluded (coordinator, Config.LagExclude)
	LagReports       uint64 // lagging episodes reported to the listener (every member)
}

// leaveMark is what a LEAVE announced: the leaver's highest seqno and its
// own purge point.
type leaveMark struct{ highest, low uint64 }

// GMS is one member's group membership state machine. It is not safe for
// concurrent use: one goroutine calls every method.
type GMS struct {
	cfg    Config
	log    *slog.Logger
	rng    *rand.Rand
	status Status
	inc    uint32 // last incarnation used
	self   Peer   // current incarnation and address
	proto  Protocol
	view   View
	// maxCounter is the highest view counter this member has seen; a view it
	// installs as coordinator takes maxCounter+1.
	maxCounter uint64
	out        []Outgoing
	stats      Stats
	gaps       []Range // scratch for SenderState

	join  joinState
	coord coordState
	fd    fdState
	leave leaveState
	cuts  map[digest.Member]*cutState  // coordinator side
	mcuts map[digest.Member]*memberCut // member side
	// fixes numbers this member's cut fixes as coordinator (cutState.fix),
	// never reused, so that an acknowledgement names the fix it is for.
	fixes uint64
	// open: departed senders whose window this member has not closed yet
	// (every view change that drops a member adds it): a coordinator that
	// takes over resumes their cuts (finishViewChange).
	open map[digest.Member]*openWin
	// leavers: members of the view that announced a graceful leave, with
	// their highest seqno and purge point: the view that drops them opens
	// their window as a graceful departure, so that a coordinator taking
	// over resumes their cut as one (onLeave); a member whose coordinator
	// leaves takes over if every member before it is leaving
	// (takeOverFromLeavers); a leaver whose every other member is leaving
	// ends its leave (leaveWithTheRest).
	leavers map[digest.Member]leaveMark
	merge   *mergeState          // as merge leader
	hold    *mergeHold           // as another coordinator of a merge
	xfer    *xferReq             // as state requester
	prov    map[uint64]*xferProv // as state provider
	done    xferDone             // last completed transfer, to re-acknowledge
	lag     laggards             // slow members (laggard.go)
	// mergeQuiet: no merge request is answered before it; mergeBackoff
	// is the last quiet period (endHold).
	mergeQuiet, mergeBackoff time.Duration

	// hist: the last views this member installed (at most maxViewHist),
	// oldest first; viewAt: when the current one was (memberBehind).
	hist   []viewRecord
	viewAt time.Duration
}

// New returns a GMS in StatusIdle. Call Join to enter a group.
func New(cfg Config) (*GMS, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	g := &GMS{
		cfg:     cfg,
		log:     cfg.Logger,
		rng:     rand.New(rand.NewPCG(cfg.Seed, cfg.ID)),
		cuts:    make(map[digest.Member]*cutState),
		mcuts:   make(map[digest.Member]*memberCut),
		open:    make(map[digest.Member]*openWin),
		leavers: make(map[digest.Member]leaveMark),
		prov:    make(map[uint64]*xferProv),
	}
	g.self = Peer{Member: digest.Member{ID: cfg.ID}, Addr: cfg.Addr}
	g.fd.init(g.cfg.SuspectTimeout / 2)
	return g, nil
}

// Status returns where this member stands.
func (g *GMS) Status() Status { return g.status }

// Self returns this member's current incarnation and address.
func (g *GMS) Self() Peer { return g.self }

// View returns the installed view (the zero View when not a member).
func (g *GMS) View() View { return g.view }

// Protocol returns the protocol of the current incarnation, or nil when not
// a member. The driver hands it every non-membership datagram.
func (g *GMS) Protocol() Protocol { return g.proto }

// IsCoordinator reports whether this member coordinates its view.
func (g *GMS) IsCoordinator() bool {
	return g.status == StatusMember && (g.view.Coord().Member == g.self.Member || g.coord.takeover)
}

// Stats returns the counters.
func (g *GMS) Stats() Stats { return g.stats }

// Outbox returns the datagrams produced since the last ClearOutbox. The
// slices stay valid until ClearOutbox.
func (g *GMS) Outbox() []Outgoing { return g.out }

// ClearOutbox forgets the outbox once the driver has sent it.
func (g *GMS) ClearOutbox() {
	clear(g.out)
	g.out = g.out[:0]
}

// send encodes m from this member's current identity and queues it.
func (g *GMS) send(to Peer, m *msg) {
	b, err := m.encode(g.cfg.Group, g.self.Member)
	if err != nil {
		g.log.Error("gms: encode", "type", m.typ, "err", err)
		return
	}
	g.out = append(g.out, Outgoing{To: to, Data: b})
}

func (g *GMS) multicast(m *msg) { g.send(Peer{}, m) }

func (g *GMS) sendRaw(to Peer, b []byte) { g.out = append(g.out, Outgoing{To: to, Data: b}) }

// Receive handles one membership datagram (IsMembership of its type).
func (g *GMS) Receive(b []byte, now time.Duration) error {
	m, err := decode(b, g.cfg.Group)
	if err != nil {
		g.stats.Malformed++
		return err
	}
	if m.sender == g.self.Member {
		return nil // our own multicast looped back
	}
	g.fd.heard(m.sender, now)
	switch m.typ {
	case typeDiscovery:
		g.onDiscovery(m, now)
	case typeJoinReq:
		g.onJoinReq(m, now)
	case typeJoinRsp:
		g.onJoinRsp(m, now)
	case typeView:
		g.onView(m, now)
	case typeViewAck:
		g.onViewAck(m, now)
	case typeLeave:
		g.onLeave(m, now)
	case typeHeartbeat:
		g.onHeartbeat(m, now)
	case typeProbe:
		g.onProbe(m, now)
	case typeSuspect:
		g.onSuspect(m, now)
	case typeMergeReq:
		g.onMergeReq(m, now)
	case typeMergeRsp:
		g.onMergeRsp(m, now)
	case typeMergeDone:
		g.onMergeDone(m, now)
	case typeCutReq:
		g.onCutReq(m, now)
	case typeCutReport:
		g.onCutReport(m, now)
	case typeCut:
		g.onCut(m, now)
	case typeCutAck:
		g.onCutAck(m, now)
	case typeStateReq:
		g.onStateReq(m, now)
	case typeStateChunk:
		g.onStateChunk(m, now)
	case typeStateAck:
		g.onStateAck(m, now)
	case typeStateDone:
		g.onStateDone(m, now)
	}
	return nil
}

// Tick fires every timer due at or before now.
func (g *GMS) Tick(now time.Duration) {
	switch g.status {
	case StatusJoining:
		g.tickJoin(now)
	case StatusLeaving:
		g.tickLeave(now)
	case StatusMember:
		g.tickFD(now)
		if g.status != StatusMember {
			return
		}
		g.tickCoord(now)
		g.tickCuts(now)
		g.tickMerge(now)
		g.tickState(now)
	}
	if g.status == StatusLeaving {
		g.tickCuts(now) // a leaver keeps acknowledging cuts it is part of
	}
}

// NextDeadline returns when Tick should be called next, or Never.
func (g *GMS) NextDeadline() time.Duration {
	d := Never
	at := func(t time.Duration) {
		if t > 0 && t < d {
			d = t
		}
	}
	switch g.status {
	case StatusJoining:
		at(g.join.deadline)
	case StatusLeaving:
		at(g.leave.resendAt)
		at(g.leave.deadline)
	case StatusMember:
		at(g.fd.nextCheck)
		g.coordDeadlines(at)
		g.cutDeadlines(at)
		g.mergeDeadlines(at)
		g.stateDeadlines(at)
	}
	return d
}

// installView installs v with the protocol and resets what depends on the
// view. joinDigest is non-zero only for the joiner.
func (g *GMS) installView(v View, joinDigest digest.Digest, now time.Duration) {
	prev := g.view
	g.setView(v, now)
	g.recordView(v.ID, false)
	g.proto.InstallView(v, joinDigest, now)
	g.viewInstalled(v, now)
	g.refixCuts(prev, false, now)
}

// installMergeView installs a merge view with its digest (one protocol
// call: see Protocol.InstallMergeView).
func (g *GMS) installMergeView(v View, d digest.Digest, now time.Duration) {
	prev := g.view
	if h := g.hold; h != nil && v.ID.Coord == h.leader.Member {
		h.view = v.ID
	}
	g.setView(v, now)
	g.recordView(v.ID, true)
	g.proto.InstallMergeView(v, d, now)
	g.viewInstalled(v, now)
	g.refixCuts(prev, true, now)
}

// setView makes v current. Members of the previous view that v drops
// have departed: their windows stay open until their cuts close. A member
// of v is not departed: a cut still open for it (a merge brought it back
// before the cut closed) is dropped, never closed under a live sender.
// A view we do not coordinate (a merge led by another coordinator) ends
// the cuts we ran as coordinator: only a coordinator drives them, and
// survivors whose windows are still open report them to the new one
// (tickCuts), which cuts them again.
func (g *GMS) setView(v View, now time.Duration) {
	if c := v.Coord().Member; c != g.view.Coord().Member && c != g.self.Member {
		// A new coordinator: report each departed sender whose cut no
		// member of v runs (its coordinator left or was excluded before
		// the close reached us) once the coordinator has likely finished
		// installing v (it takes no report during a view change), rather
		// than after ViewChangeTimeout.
		for m, ow := range g.open {
			if mc := g.mcuts[m]; mc == nil || !v.Contains(mc.coord.Member) {
				ow.nudgeAt = min(ow.nudgeAt, now+2*g.cfg.ViewAckTimeout)
			}
		}
	}
	for _, p := range g.view.Members {
		if p.Member != g.self.Member && !v.Contains(p.Member) {
			ow := &openWin{peer: p, nudgeAt: now + g.cfg.ViewChangeTimeout}
			if l, ok := g.leavers[p.Member]; ok {
				ow.highest, ow.low, ow.graceful = l.highest, l.low, true
			}
			g.open[p.Member] = ow
		}
	}
	for m := range g.leavers {
		if !v.Contains(m) {
			delete(g.leavers, m)
		}
	}
	g.view = v
	g.viewAt = now
	g.maxCounter = max(g.maxCounter, v.ID.Counter)
	for _, p := range v.Members {
		delete(g.cuts, p.Member)
		delete(g.mcuts, p.Member)
		delete(g.open, p.Member)
	}
	if v.Coord().Member != g.self.Member {
		clear(g.cuts)
	}
}

// viewRecord is one view in GMS.hist.
type viewRecord struct {
	id    digest.ViewID
	merge bool // installed with a merge digest
}

// maxViewHist bounds GMS.hist: a member further behind is excluded rather
// than brought forward (memberBehind).
const maxViewHist = 16

func (g *GMS) recordView(id digest.ViewID, merge bool) {
	if len(g.hist) >= maxViewHist {
		g.hist = slices.Delete(g.hist, 0, 1)
	}
	g.hist = append(g.hist, viewRecord{id: id, merge: merge})
}

// regularSince reports whether id is one of the views this member
// installed and every view it installed since was a regular one (no merge
// digest): a member still in view id installs the current view as it
// would have installed each of them, and misses no digest.
func (g *GMS) regularSince(id digest.ViewID) bool {
	for i := len(g.hist) - 1; i >= 0; i-- {
		if g.hist[i].id == id {
			return true
		}
		if g.hist[i].merge {
			return false
		}
	}
	return false
}

func (g *GMS) viewInstalled(v View, now time.Duration) {
	g.stats.ViewsInstalled++
	g.fd.viewChanged(v, now)
	if v.Coord().Member == g.self.Member {
		g.coord.takeover = false
	}
	g.log.Debug("gms: view installed", "self", g.self.Member, "view", v)
	if g.cfg.Listener != nil {
		g.cfg.Listener.ViewInstalled(v)
	}
}

// becomeMember starts the protocol for incarnation self.
func (g *GMS) becomeMember(now time.Duration) error {
	p, err := g.cfg.NewProtocol(g.self.Member, now)
	if err != nil {
		return err
	}
	g.proto = p
	g.status = StatusMember
	g.join = joinState{}
	return nil
}

// exit leaves the group locally: the protocol is dropped, every
// membership task abandoned (captures held as provider or coordinator are
// released first; the other side of a merge is told, abandonMerge), and
// the listener told why.
func (g *GMS) exit(reason error, now time.Duration) {
	if g.proto != nil {
		g.abandonMerge(now)
		g.releaseAll(now)
	}
	g.status = StatusIdle
	g.proto = nil
	g.view = View{}
	g.coord = coordState{}
	g.leave = leaveState{}
	g.fd.init(g.cfg.SuspectTimeout / 2)
	clear(g.cuts)
	clear(g.mcuts)
	clear(g.open)
	clear(g.leavers)
	g.hist = g.hist[:0]
	g.merge, g.hold = nil, nil
	g.lag = laggards{}
	if g.xfer != nil && g.cfg.Listener != nil {
		g.cfg.Listener.StateInstalled(ErrNotMember)
	}
	g.xfer = nil
	if reason != nil {
		g.log.Info("gms: left the group", "self", g.self.Member, "reason", reason)
	}
	if g.cfg.Listener != nil {
		g.cfg.Listener.Left(reason)
	}
}

// releaseAll releases every capture this member holds.
func (g *GMS) releaseAll(now time.Duration) {
	if vc := g.coord.vc; vc != nil && vc.captured {
		g.proto.ReleaseCapture(vc.capID, now)
		vc.captured = false
	}
	if g.merge != nil && g.merge.captured {
		g.proto.ReleaseCapture(g.merge.capID, now)
		g.merge.captured = false
	}
	if g.hold != nil {
		g.proto.ReleaseCapture(g.hold.capID, now)
		g.hold = nil
	}
	for _, id := range sortedIDs(g.prov) {
		g.proto.ReleaseCapture(g.prov[id].capID, now)
		delete(g.prov, id)
	}
}

// errNoView is returned by operations that need a view.
var errNoView = errors.New("gms: no view")
