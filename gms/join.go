package gms

import (
	"slices"
	"time"

	"github.com/nakcast/nakcast/digest"
)

// joinState is the joiner's side of a join.
type joinState struct {
	discovering bool
	deadline    time.Duration
	reqs        int // JOIN_REQs sent: MaxJoinAttempts bounds them, the backoff doubles per JOIN_REQ
	coord       Peer
	incs        []uint32 // incarnations of the last maxJoinIncs JOIN_REQs: a JoinRsp for any is accepted
	answers     []Peer   // coordinators named by discovery answers
	counters    []uint64 // and the view counters they gave
	empty       int      // discovery rounds in a row that got no answer (never join attempts)
	// deferUntil: a concurrent joiner with a smaller id that would found a
	// group too was heard; we do not found before this time (see
	// onDiscovery).
	deferUntil time.Duration
}

// maxJoinIncs bounds joinState.incs (a join with unbounded
// MaxJoinAttempts may retry for ever). A coordinator answers the retries
// of a join in progress with the JoinRsp of the incarnation it took, for at
// most ViewChangeTimeout; the backoff makes that a handful of JOIN_REQs.
const maxJoinIncs = 16

// Join starts joining the group: discovery, then JOIN_REQ until a valid
// JoinRsp (Listener.ViewInstalled) or Config.MaxJoinAttempts is spent
// (Listener.Left(ErrJoinFailed)).
func (g *GMS) Join(now time.Duration) error {
	if g.status != StatusIdle {
		return ErrBusy
	}
	g.status = StatusJoining
	g.join = joinState{}
	g.startDiscovery(now)
	return nil
}

func (g *GMS) startDiscovery(now time.Duration) {
	g.join.discovering = true
	g.join.answers = g.join.answers[:0]
	g.join.counters = g.join.counters[:0]
	g.join.deadline = now + g.cfg.DiscoveryTimeout
	m := &msg{typ: typeDiscovery, kind: 0, b: uint64(g.cfg.DiscoveryTimeout)}
	if g.cfg.CreateGroup {
		m.a = 1
	}
	m.withAddr(g.cfg.Addr)
	if len(g.cfg.InitialHosts) == 0 {
		g.multicast(m)
		return
	}
	for _, h := range g.cfg.InitialHosts {
		if h != g.cfg.Addr {
			g.send(Peer{Addr: h}, m)
		}
	}
}

// onDiscovery answers a joiner's request (kind 0) with our coordinator, or
// records an answer (kind 1) while discovering.
//
// A request carries a = 1 when its sender would found a group if nobody
// answers (Config.CreateGroup) and b = its DiscoveryTimeout. A joiner that
// hears such a request from a concurrent joiner with a smaller id leaves
// the founding to it: it does not found until that joiner's round plus two
// of its own have passed since the request (by then the other has founded
// and answers our next request), so members started together form one
// group instead of founding one each and merging. The smallest id never
// defers; every other joiner defers only while it hears it.
func (g *GMS) onDiscovery(m *msg, now time.Duration) {
	switch m.kind {
	case 0:
		if g.status == StatusJoining && g.cfg.CreateGroup && m.a == 1 && m.sender.ID < g.cfg.ID {
			wait := time.Duration(min(m.b, uint64(time.Minute)))
			if wait <= 0 {
				wait = g.cfg.DiscoveryTimeout
			}
			g.join.deferUntil = max(g.join.deferUntil, now+wait+2*g.cfg.DiscoveryTimeout)
			return
		}
		if g.status != StatusMember || m.addr == "" {
			return
		}
		r := &msg{typ: typeDiscovery, kind: 1, view: g.view.ID}
		r.withPeer(g.view.Coord())
		g.send(Peer{Member: m.sender, Addr: m.addr}, r)
	case 1:
		if g.status != StatusJoining || !g.join.discovering || m.peer.Member.IsZero() {
			return
		}
		g.join.answers = append(g.join.answers, m.peer)
		g.join.counters = append(g.join.counters, m.view.Counter)
	}
}

// pickCoordinator returns the coordinator named by the answer with the
// highest view counter (ties: the most named).
func (g *GMS) pickCoordinator() (Peer, bool) {
	best, bestN, bestC := Peer{}, 0, uint64(0)
	for i, p := range g.join.answers {
		n := 0
		for _, q := range g.join.answers {
			if q.Member == p.Member {
				n++
			}
		}
		c := g.join.counters[i]
		if bestN == 0 || c > bestC || (c == bestC && n > bestN) {
			best, bestN, bestC = p, n, c
		}
	}
	return best, bestN > 0
}

func (g *GMS) tickJoin(now time.Duration) {
	if now < g.join.deadline {
		return
	}
	if g.join.discovering {
		g.join.discovering = false
		coord, ok := g.pickCoordinator()
		if !ok {
			// Not a join attempt (MaxJoinAttempts counts JOIN_REQs): a
			// joiner that finds no group keeps asking. With CreateGroup it
			// founds one after DiscoveryRounds unanswered rounds in a
			// row, but not while a concurrent joiner with a smaller id is
			// about to found.
			g.join.empty++
			if g.cfg.CreateGroup && g.join.empty >= g.cfg.DiscoveryRounds && now >= g.join.deferUntil {
				g.found(now)
				return
			}
			g.startDiscovery(now)
			return
		}
		g.join.empty = 0
		g.join.coord = coord
		g.sendJoinReq(now)
		return
	}
	// No valid JoinRsp in time: rediscover after every third JOIN_REQ (the
	// coordinator may have changed), else retry the same coordinator.
	if g.cfg.MaxJoinAttempts > 0 && g.join.reqs >= g.cfg.MaxJoinAttempts {
		g.exit(ErrJoinFailed, now)
		return
	}
	if g.join.reqs%3 == 0 {
		g.startDiscovery(now)
		return
	}
	g.sendJoinReq(now)
}

// sendJoinReq sends JOIN_REQ with a new incarnation and arms the backoff.
// The request carries (a) the oldest incarnation whose JoinRsp we still
// accept (join.incs[0]), so that the coordinator does not take a late
// request for a newer one as a new member replacing one it already
// admitted from this join (see onJoinReq).
func (g *GMS) sendJoinReq(now time.Duration) {
	g.join.reqs++
	g.inc++
	if len(g.join.incs) >= maxJoinIncs {
		g.join.incs = slices.Delete(g.join.incs, 0, 1)
	}
	g.join.incs = append(g.join.incs, g.inc)
	g.self.Member = digest.Member{ID: g.cfg.ID, Inc: g.inc}
	m := &msg{typ: typeJoinReq, a: uint64(g.join.incs[0])}
	m.withAddr(g.cfg.Addr)
	g.send(g.join.coord, m)
	g.stats.JoinAttempts++
	wait := g.cfg.JoinTimeout << min(g.join.reqs-1, 20)
	wait = min(wait, g.cfg.JoinBackoffMax)
	wait += time.Duration(g.rng.Int64N(int64(wait)/4 + 1))
	g.join.deadline = now + wait
}

// found makes this member a singleton group's coordinator.
func (g *GMS) found(now time.Duration) {
	g.inc++
	g.self.Member = digest.Member{ID: g.cfg.ID, Inc: g.inc}
	if err := g.becomeMember(now); err != nil {
		g.log.Error("gms: protocol", "err", err)
		g.exit(err, now)
		return
	}
	v := View{ID: digest.ViewID{Coord: g.self.Member, Counter: g.maxCounter + 1}, Members: []Peer{g.self}}
	g.installView(v, digest.New([]digest.Entry{{Member: g.self.Member}}), now)
}

// validateJoinRsp is the joiner's check of seed 002: the view is well
// formed and names us, the digest covers exactly the view's members, and our
// own entry is 0 (our incarnation is new).
func validateJoinRsp(v View, d digest.Digest, self digest.Member) error {
	if err := v.validate(); err != nil {
		return err
	}
	if !v.Contains(self) {
		return errNotInView
	}
	if err := d.Matches(v.IDs()); err != nil {
		return err
	}
	if e, _ := d.Lookup(self); e.Low != 0 || e.Delivered != 0 || e.Received != 0 {
		return errOwnEntry
	}
	return nil
}

// onJoinRsp: kind 0 view + digest for one of our incarnations, kind 1 a
// redirect to the coordinator.
//
// A JoinRsp counts only from the member the JOIN_REQ went to (join.coord;
// the driver checks that it came from the address it was sent to): a
// stranger cannot hand a joiner a view.
func (g *GMS) onJoinRsp(m *msg, now time.Duration) {
	if g.status == StatusMember && m.has(secView) && m.v.ID == g.view.ID && m.member == g.self.Member &&
		m.sender == g.view.Coord().Member {
		g.send(g.view.Coord(), &msg{typ: typeViewAck, view: g.view.ID}) // our ack was lost
		return
	}
	if g.status != StatusJoining {
		return
	}
	if m.sender != g.join.coord.Member {
		g.stats.Refused++
		return
	}
	if m.kind == 1 {
		if !m.peer.Member.IsZero() && m.peer.Member != g.join.coord.Member {
			g.join.coord = m.peer
			g.join.discovering = false
			g.sendJoinReq(now)
		}
		return
	}
	if m.member.ID != g.cfg.ID || !slices.Contains(g.join.incs, m.member.Inc) {
		g.stats.JoinRspRejected++
		return
	}
	if !m.has(secView) || !m.has(secDigest) {
		g.stats.JoinRspRejected++
		g.log.Warn("gms: JoinRsp without view or digest rejected", "from", m.sender)
		return
	}
	if err := validateJoinRsp(m.v, m.dig, m.member); err != nil {
		g.stats.JoinRspRejected++
		g.log.Warn("gms: JoinRsp rejected", "from", m.sender, "view", m.v, "digest", m.dig, "err", err)
		return
	}
	g.self.Member = m.member
	if err := g.becomeMember(now); err != nil {
		g.log.Error("gms: protocol", "err", err)
		g.exit(err, now)
		return
	}
	g.installView(m.v, m.dig, now)
	g.send(m.v.Coord(), &msg{typ: typeViewAck, view: m.v.ID})
}

// departure is a member a view change removes.
type departure struct {
	member  digest.Member
	peer    Peer
	highest uint64 // announced by a graceful leaver
	// low: a graceful leaver's own purge point, announced with highest:
	// what no survivor holds at or below it is gone (a forced purge).
	low      uint64
	graceful bool
}

// coordState is the coordinator's side of view changes.
type coordState struct {
	takeover bool // acting coordinator before our own view is installed
	joins    []Peer
	leaves   []departure
	excl     []digest.Member
	vc       *viewChange
	tries    int           // digest attempts for the queued joins (seed 002)
	retryAt  time.Duration // earliest retry of a view change postponed by an unset digest entry
}

// viewChange is a view being installed, waiting for acknowledgements.
type viewChange struct {
	view     View
	joiners  []digest.Member
	departed []departure
	acks     map[digest.Member]bool
	rsp      map[digest.Member][]byte // encoded JoinRsp per joiner
	viewMsg  []byte
	jd       digest.Digest // the joiners' digest
	captured bool
	capID    uint64
	deadline time.Duration
	resendAt time.Duration
}

// onJoinReq queues a joiner (coordinator), or redirects it.
//
// A member of the view with the joiner's id and an older incarnation is
// replaced (excluded by the view that admits the joiner), unless it was
// admitted from this same join: its incarnation is at or above the oldest
// one the joiner still accepts a JoinRsp for (field a). The request is then
// a retry the joiner sent before it got that member's JoinRsp, arriving
// late; the joiner is that member, or, if it never acknowledged its view,
// the member is queued for exclusion or suspected, and then replaced as
// usual. Replacing a member that acknowledged would exclude a member that
// just joined (it leaves with ErrExcluded) for an incarnation nobody runs.
func (g *GMS) onJoinReq(m *msg, now time.Duration) {
	if g.status != StatusMember || m.addr == "" {
		return
	}
	joiner := Peer{Member: m.sender, Addr: m.addr}
	if !g.IsCoordinator() {
		r := &msg{typ: typeJoinRsp, kind: 1, member: joiner.Member}
		r.withPeer(g.view.Coord())
		g.send(joiner, r)
		return
	}
	if vc := g.coord.vc; vc != nil {
		for _, j := range vc.joiners {
			if j.ID == joiner.Member.ID {
				// A retry of a join in progress: resend its JoinRsp (the
				// joiner accepts any of its incarnations).
				g.sendRaw(joiner, vc.rsp[j])
				g.stats.JoinRspSent++
				return
			}
		}
	}
	for _, p := range g.view.Members {
		if p.Member == joiner.Member {
			return // already in: a duplicate
		}
		if p.Member.ID == joiner.Member.ID && p.Member != g.self.Member {
			if m.a != 0 && uint64(p.Member.Inc) >= m.a && p.Member.Inc < joiner.Member.Inc &&
				!slices.Contains(g.coord.excl, p.Member) && !g.fd.suspected[p.Member] {
				g.stats.JoinReqStale++
				return // a late retry of p's join
			}
			g.queueExclusion(p.Member) // an older incarnation: replaced
		}
	}
	for i, p := range g.coord.joins {
		if p.Member.ID == joiner.Member.ID {
			g.coord.joins[i] = joiner
			g.tryViewChange(now)
			return
		}
	}
	g.coord.joins = append(g.coord.joins, joiner)
	g.tryViewChange(now)
}

func (g *GMS) queueExclusion(m digest.Member) {
	if !slices.Contains(g.coord.excl, m) {
		g.coord.excl = append(g.coord.excl, m)
	}
}

func (g *GMS) queueLeave(d departure) {
	for _, l := range g.coord.leaves {
		if l.member == d.member {
			return
		}
	}
	g.coord.leaves = append(g.coord.leaves, d)
}

// tryViewChange starts a view change for everything queued, unless one is
// in progress or a digest retry is pending.
func (g *GMS) tryViewChange(now time.Duration) {
	c := &g.coord
	if !g.IsCoordinator() || c.vc != nil || g.hold != nil || now < c.retryAt || (g.merge != nil && g.merge.installed) {
		return
	}
	if len(c.joins) == 0 && len(c.leaves) == 0 && len(c.excl) == 0 {
		return
	}
	members, departed, joiners := g.nextMembers()
	if g.merge != nil {
		// A merge still waiting for answers holds nothing yet: it yields
		// to a real change of the group's own (and is tried again on a
		// later heartbeat), so that a coordinator that never answers
		// cannot hold the group's views up.
		if len(joiners) > 0 || len(departed) > 0 || c.takeover {
			g.cancelMerge("a view change of our own comes first", now) // calls tryViewChange again
		}
		return
	}
	c.excl, c.leaves = c.excl[:0], c.leaves[:0]
	if len(joiners) == 0 && len(departed) == 0 && !c.takeover {
		c.joins = c.joins[:0]
		return
	}
	v := View{ID: digest.ViewID{Coord: g.self.Member, Counter: g.maxCounter + 1}, Members: members}
	vc := &viewChange{view: v, joiners: joiners, departed: departed, acks: make(map[digest.Member]bool),
		rsp: make(map[digest.Member][]byte)}
	var jd digest.Digest
	if len(joiners) > 0 {
		var err error
		vc.capID, jd, err = g.joinDigest(v, joiners, now)
		if err != nil {
			// An entry is unset. Retry a bounded number of times;
			// then drop the joins (no JoinRsp: the joiners retry) and go on
			// with the rest.
			g.stats.JoinDigestRetry++
			c.tries++
			for _, d := range departed { // keep them queued
				if d.graceful {
					c.leaves = append(c.leaves, d)
				} else {
					c.excl = append(c.excl, d.member)
				}
			}
			if c.tries <= g.cfg.DigestRetries {
				g.log.Warn("gms: join digest incomplete, retrying", "view", v, "err", err, "try", c.tries)
				c.retryAt = now + g.cfg.DigestRetryInterval
				return
			}
			g.log.Warn("gms: join digest incomplete, join dropped", "view", v, "err", err)
			g.stats.JoinsDropped += uint64(len(joiners))
			c.joins, c.tries = c.joins[:0], 0
			g.tryViewChange(now)
			return
		}
		vc.captured = true
	}
	c.joins, c.tries = c.joins[:0], 0
	c.vc = vc
	vc.deadline = now + g.cfg.ViewChangeTimeout
	vc.jd = jd
	if err := g.sendViewChange(vc, now); err != nil {
		return
	}
	g.installView(v, digest.Digest{}, now)
	vc.acks[g.self.Member] = true
	g.checkViewChange(now)
}

// nextMembers is the membership of the view tryViewChange installs: this
// member first, then the members of the view that neither leave nor are
// excluded (departed, with their leave if graceful), then the joiners not
// yet in it.
func (g *GMS) nextMembers() (members []Peer, departed []departure, joiners []digest.Member) {
	c := &g.coord
	gone := func(m digest.Member) bool {
		if slices.Contains(c.excl, m) {
			return true
		}
		for _, l := range c.leaves {
			if l.member == m {
				return true
			}
		}
		return false
	}
	// The new coordinator comes first: normally us already; after a
	// takeover we move ahead of the members we do not exclude.
	members = append(members, g.self)
	for _, p := range g.view.Members {
		if p.Member == g.self.Member {
			continue
		}
		if gone(p.Member) {
			d := departure{member: p.Member, peer: p}
			for _, l := range c.leaves {
				if l.member == p.Member {
					d = l
					d.peer = p
				}
			}
			departed = append(departed, d)
			continue
		}
		members = append(members, p)
	}
	for _, j := range c.joins {
		if !slices.ContainsFunc(members, func(p Peer) bool { return p.Member.ID == j.Member.ID }) {
			members = append(members, j)
			joiners = append(joiners, j.Member)
		}
	}
	return members, departed, joiners
}

// joinDigest captures the protocol digest and builds the JoinRsp digest over
// v: every entry starts unset, existing members' entries come from the
// capture, the joiners' are 0. If any entry is still unset the capture is
// released and the error names the unset members (seed 002).
func (g *GMS) joinDigest(v View, joiners []digest.Member, now time.Duration) (uint64, digest.Digest, error) {
	id, d := g.proto.CaptureDigest(now)
	md := digest.NewMutable(v.IDs())
	md.SetDigest(d)
	for _, j := range joiners {
		md.Set(digest.Entry{Member: j})
	}
	jd, err := md.Complete()
	if err != nil {
		g.proto.ReleaseCapture(id, now)
		return 0, digest.Digest{}, err
	}
	return id, jd, nil
}

func (g *GMS) onViewAck(m *msg, now time.Duration) {
	if m.kind == 1 {
		if vc := g.coord.vc; vc != nil && m.view == vc.view.ID && vc.view.Contains(m.sender) &&
			m.a >= vc.view.ID.Counter && m.a <= MaxViewCounter {
			g.maxCounter = max(g.maxCounter, m.a)
			g.renumberViewChange(now)
		}
		return
	}
	if vc := g.coord.vc; vc != nil && m.view == vc.view.ID && vc.view.Contains(m.sender) {
		vc.acks[m.sender] = true
		g.checkViewChange(now)
		return
	}
	if ms := g.merge; ms != nil && ms.installed && m.view == ms.view.ID && ms.view.Contains(m.sender) {
		ms.acks[m.sender] = true
		g.checkMerge(now)
	}
}

// renumberViewChange reinstalls the view change's view under a counter above
// every counter a member reported: same members, same join digest.
func (g *GMS) renumberViewChange(now time.Duration) {
	vc := g.coord.vc
	v := View{ID: digest.ViewID{Coord: g.self.Member, Counter: g.maxCounter + 1}, Members: vc.view.Members}
	g.log.Info("gms: view renumbered", "old", vc.view.ID, "new", v.ID)
	vc.view = v
	clear(vc.acks)
	if err := g.sendViewChange(vc, now); err != nil {
		return
	}
	g.installView(v, digest.Digest{}, now)
	vc.acks[g.self.Member] = true
	g.checkViewChange(now)
}

// sendViewChange encodes and sends vc's view to the members and its
// JoinRsps to the joiners.
func (g *GMS) sendViewChange(vc *viewChange, now time.Duration) error {
	v := vc.view
	vc.resendAt = now + g.cfg.ViewAckTimeout
	var err error
	vm := &msg{typ: typeView, kind: 0, view: v.ID}
	vm.withView(v)
	if vc.viewMsg, err = vm.encode(g.cfg.Group, g.self.Member); err != nil {
		g.log.Error("gms: encode view", "err", err)
		return err
	}
	g.sendRaw(Peer{}, vc.viewMsg)
	for _, j := range vc.joiners {
		r := &msg{typ: typeJoinRsp, kind: 0, view: v.ID, member: j}
		r.withView(v).withDigest(vc.jd)
		b, err := r.encode(g.cfg.Group, g.self.Member)
		if err != nil {
			g.log.Error("gms: encode JoinRsp", "err", err)
			continue
		}
		vc.rsp[j] = b
		p, _ := v.Peer(j)
		g.sendRaw(p, b)
		g.stats.JoinRspSent++
	}
	return nil
}

// checkViewChange completes the view change once every member acknowledged.
func (g *GMS) checkViewChange(now time.Duration) {
	vc := g.coord.vc
	for _, p := range vc.view.Members {
		// A member suspected meanwhile is not waited for: the next view
		// change excludes it.
		if !vc.acks[p.Member] && !g.fd.suspected[p.Member] {
			return
		}
	}
	g.finishViewChange(now)
}

func (g *GMS) finishViewChange(now time.Duration) {
	vc := g.coord.vc
	g.coord.vc = nil
	if vc.captured {
		g.proto.ReleaseCapture(vc.capID, now)
	}
	for _, d := range vc.departed {
		g.startCut(d, now)
	}
	// Cuts that were open when a previous coordinator died (or that we
	// never heard of as coordinator): resume them, so that every departed
	// sender's window closes. startCut ignores cuts already under way.
	for _, m := range sortedKeys(g.open) {
		if _, ok := g.cuts[m]; !ok {
			g.stats.CutsResumed++
			g.log.Info("gms: resuming an open cut", "sender", m)
			g.startCut(g.open[m].departure(m), now)
		}
	}
	g.tryViewChange(now)
}

func (g *GMS) tickCoord(now time.Duration) {
	vc := g.coord.vc
	if vc == nil {
		if g.coord.retryAt > 0 && now >= g.coord.retryAt {
			g.coord.retryAt = 0
			g.tryViewChange(now)
		}
		return
	}
	if now >= vc.deadline {
		// Give up waiting: joiners that never acknowledged are excluded by
		// the next view change (they retry with a new incarnation); other
		// silent members are left to failure detection.
		g.stats.ViewChangeAborts++
		for _, j := range vc.joiners {
			if !vc.acks[j] {
				g.queueExclusion(j)
			}
		}
		g.log.Warn("gms: view change timed out", "view", vc.view)
		g.finishViewChange(now)
		return
	}
	if now >= vc.resendAt {
		vc.resendAt = now + g.cfg.ViewAckTimeout
		for _, p := range vc.view.Members {
			if vc.acks[p.Member] {
				continue
			}
			if b, ok := vc.rsp[p.Member]; ok {
				g.sendRaw(p, b)
				g.stats.JoinRspSent++
			} else {
				g.sendRaw(p, vc.viewMsg)
			}
		}
	}
}

func (g *GMS) coordDeadlines(at func(time.Duration)) {
	if vc := g.coord.vc; vc != nil {
		at(vc.resendAt)
		at(vc.deadline)
	} else if g.coord.retryAt > 0 {
		at(g.coord.retryAt)
	}
}

// onView installs a view from the coordinator (kind 0) or a merge view with
// its digest (kind 1); kind 2 is an exclusion notice (noticeExcluded): a
// view that does not contain us, which only tells us we were excluded.
//
// A view counts only from a member entitled to send it (viewFrom): its
// coordinator, a member of our view; for a merge view also our own
// coordinator relaying it, or, at a coordinator holding its capture for
// that merge, the merge's leader.
func (g *GMS) onView(m *msg, now time.Duration) {
	if (g.status != StatusMember && g.status != StatusLeaving) || !m.has(secView) {
		return
	}
	v := m.v
	if v.validate() != nil || v.ID != m.view {
		g.stats.Malformed++
		return
	}
	if !g.viewFrom(m) {
		g.stats.Refused++
		return
	}
	if m.kind == 2 && (m.member != g.self.Member || v.Contains(g.self.Member)) {
		// An exclusion notice (noticeExcluded) for another incarnation,
		// or that excludes nobody: never installed.
		return
	}
	if v.ID == g.view.ID {
		g.send(v.Coord(), &msg{typ: typeViewAck, view: v.ID}) // our ack was lost
		g.relayMergeView(m)                                   // or one of our partition's
		return
	}
	if v.ID.Counter <= g.view.ID.Counter {
		// Stale, or a view numbered like ours by another coordinator (a
		// takeover that missed our last view): if it comes from a member of
		// our view and names us, tell its coordinator our counter so that it
		// installs a view numbered above ours.
		if v.ID.Coord != g.view.ID.Coord && g.view.Contains(m.sender) && v.Contains(g.self.Member) {
			g.send(v.Coord(), &msg{typ: typeViewAck, kind: 1, view: v.ID, a: g.view.ID.Counter})
		}
		return
	}
	if !v.Contains(g.self.Member) {
		if g.status == StatusLeaving {
			return // expected: we wait for LeaveRsp
		}
		// Excluded, if the view comes from a member of our view, or is a
		// merge view that took our coordinator without us.
		if g.view.Contains(m.sender) || (m.kind == 1 && v.Contains(g.view.Coord().Member)) {
			g.exit(ErrExcluded, now)
		}
		return
	}
	if m.kind == 1 {
		if !m.has(secDigest) || m.dig.Matches(v.IDs()) != nil {
			g.stats.Malformed++
			return
		}
		g.installMergeView(v, m.dig, now)
		g.relayMergeView(m)
	} else {
		g.installView(v, digest.Digest{}, now)
	}
	g.send(v.Coord(), &msg{typ: typeViewAck, view: v.ID})
}

// viewFrom reports whether m, a view (kind 0), merge view (1) or exclusion
// notice (2), comes from a member entitled to send it: the view's
// coordinator, a member of our view (a regular view change, a takeover, a
// merge led from our partition); for an exclusion notice any member of our
// view (the coordinator of the view it names); for a merge view also our
// coordinator relaying it to us (relayMergeView) or, at a coordinator that
// holds its capture for the merge m.id, the leader it answered.
func (g *GMS) viewFrom(m *msg) bool {
	inView := g.view.Contains(m.sender)
	switch m.kind {
	case 0:
		return inView && m.sender == m.v.ID.Coord
	case 1:
		if inView && m.sender == m.v.ID.Coord {
			return true
		}
		if m.sender == g.view.Coord().Member && m.v.Contains(m.sender) {
			return true
		}
		h := g.hold
		return h != nil && h.id == m.id && h.leader.Member == m.sender && m.sender == m.v.ID.Coord
	}
	return inView
}

// relayMergeView passes a merge view this coordinator took from the
// merge's leader (it holds its capture for that merge) on to the members
// of its partition, who take views only from members of their view: the
// leader is not one. Sent again whenever the leader resends it.
func (g *GMS) relayMergeView(m *msg) {
	h := g.hold
	if m.kind != 1 || h == nil || h.id != m.id || h.leader.Member != m.sender {
		return
	}
	r := &msg{typ: typeView, kind: 1, view: m.v.ID, id: m.id}
	r.withView(m.v).withDigest(m.dig)
	g.multicast(r)
}
