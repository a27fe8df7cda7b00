package gms

import (
	"time"

	"github.com/nakcast/nakcast/digest"
)

// mergeState is the merge leader's side.
type mergeState struct {
	id        uint64
	others    []Peer // the other coordinators
	rsps      map[digest.Member]*msg
	captured  bool
	capID     uint64
	own       digest.Digest
	deadline  time.Duration
	installed bool
	reqMsg    []byte        // MERGE_REQ, resent until every other coordinator answers
	reqAt     time.Duration // its next resend
	view      View
	dig       digest.Digest
	viewMsg   []byte
	acks      map[digest.Member]bool
	resendAt  time.Duration
}

// mergeHold is another coordinator's side: its capture, held until the
// leader says the merge is done or cancelled.
type mergeHold struct {
	id       uint64
	leader   Peer
	capID    uint64
	start    time.Duration // when we first answered this leader (endHold)
	deadline time.Duration
	rsp      []byte // our answer, sent again to a repeat of the request
	// view is the merge view, once installed here: a heartbeat of the
	// leader naming it (or a later view) and no merge under way ends the
	// hold if MERGE_DONE was lost (onHeartbeat).
	view digest.ViewID
}

// mergeCandidate is called when a coordinator hears another group's
// coordinator: the one with the smaller member id leads the merge.
//
// A heartbeat can come from anyone, so starting a merge holds nothing:
// the other side's counter is not taken (installMerge numbers the merge
// view above the counters of the views the other coordinators answer
// with), our digest is captured only once every answer is in
// (installMerge), a pending view change cancels a merge still waiting for
// answers (tryViewChange). A stranger that heartbeats as another group's
// coordinator and never answers neither suspends stability nor holds up
// the group's view changes.
func (g *GMS) mergeCandidate(other Peer, otherView digest.ViewID, now time.Duration) {
	if g.merge != nil || g.hold != nil || g.coord.vc != nil || !g.self.Member.Less(other.Member) {
		return
	}
	ms := &mergeState{id: g.rng.Uint64() | 1, others: []Peer{other}, rsps: make(map[digest.Member]*msg),
		deadline: now + g.cfg.MergeTimeout}
	g.merge = ms
	g.log.Info("gms: merge started", "self", g.self.Member, "with", other.Member)
	r := &msg{typ: typeMergeReq, id: ms.id, view: g.view.ID}
	r.withAddr(g.cfg.Addr)
	b, err := r.encode(g.cfg.Group, g.self.Member)
	if err != nil {
		g.log.Error("gms: encode merge request", "err", err)
		g.cancelMerge("encode", now)
		return
	}
	ms.reqMsg = b
	g.sendMergeReq(now)
}

// sendMergeReq sends the merge request to every other coordinator that has
// not answered yet, and arms its resend: a lost request or answer costs
// ViewAckTimeout, not the whole MergeTimeout.
func (g *GMS) sendMergeReq(now time.Duration) {
	ms := g.merge
	for _, o := range ms.others {
		if ms.rsps[o.Member] == nil {
			g.sendRaw(o, ms.reqMsg)
		}
	}
	ms.reqAt = now + g.cfg.ViewAckTimeout
}

// onMergeReq: another group's coordinator leads a merge; answer with our
// view and a captured digest, or refuse if busy.
func (g *GMS) onMergeReq(m *msg, now time.Duration) {
	leader := Peer{Member: m.sender, Addr: m.addr}
	if !g.IsCoordinator() || m.addr == "" {
		return
	}
	if g.view.Contains(m.sender) {
		g.stats.Refused++ // a member of our view does not lead another partition
		return
	}
	if h := g.hold; h != nil && h.id == m.id {
		if h.leader.Member == m.sender {
			g.sendRaw(leader, h.rsp) // a repeat: our answer (or its request) was lost
		}
		return
	}
	start := now
	if h := g.hold; h != nil && h.leader.Member == m.sender && h.view.IsZero() {
		// The leader leads one merge at a time: the one we hold for is
		// over (its MERGE_DONE was lost). The new one continues the
		// episode: its deadline and endHold count from the first
		// request, so that a leader that keeps asking anew holds our
		// capture for at most 2×MergeTimeout at a time.
		start = h.start
		g.endHold(h, now)
	}
	if g.merge != nil || g.hold != nil || g.coord.vc != nil || !m.sender.Less(g.self.Member) || now < g.mergeQuiet {
		g.send(leader, &msg{typ: typeMergeRsp, kind: 1, id: m.id})
		return
	}
	// The leader's counter is not taken either: the merge view it sends
	// is numbered above both sides' counters, and installing it raises
	// maxCounter.
	capID, d := g.proto.CaptureMergeDigest(now)
	r := &msg{typ: typeMergeRsp, kind: 0, id: m.id}
	r.withView(g.view).withDigest(d)
	b, err := r.encode(g.cfg.Group, g.self.Member)
	if err != nil {
		g.log.Error("gms: encode merge answer", "err", err)
		g.proto.ReleaseCapture(capID, now)
		return
	}
	g.hold = &mergeHold{id: m.id, leader: leader, capID: capID, start: start, deadline: start + 2*g.cfg.MergeTimeout, rsp: b}
	g.sendRaw(leader, b)
}

func (g *GMS) onMergeRsp(m *msg, now time.Duration) {
	ms := g.merge
	if ms == nil || m.id != ms.id || ms.installed {
		return
	}
	if m.kind == 1 || !m.has(secView) || !m.has(secDigest) || m.v.validate() != nil {
		g.cancelMerge("refused by "+m.sender.String(), now)
		return
	}
	ms.rsps[m.sender] = m
	for _, o := range ms.others {
		if ms.rsps[o.Member] == nil {
			return
		}
	}
	g.installMerge(now)
}

// installMerge builds the merge view and its digest and installs it. The
// digest merges every partition's captured digest over the merge view;
// members that no digest covers are left out of the view (seed 002: never a
// zero entry).
func (g *GMS) installMerge(now time.Duration) {
	ms := g.merge
	ms.capID, ms.own = g.proto.CaptureMergeDigest(now)
	ms.captured = true
	members := []Peer{g.self}
	counter := g.maxCounter
	add := func(v View) {
		counter = max(counter, v.ID.Counter)
		for _, p := range v.Members {
			if !containsPeer(members, p.Member) {
				members = append(members, p)
			}
		}
	}
	add(g.view)
	digests := []digest.Digest{ms.own}
	for _, o := range ms.others {
		r := ms.rsps[o.Member]
		add(r.v)
		digests = append(digests, r.dig)
	}
	ids := make([]digest.Member, len(members))
	for i, p := range members {
		ids[i] = p.Member
	}
	md := digest.NewMutable(ids)
	for _, d := range digests {
		md.MergeDigest(d)
	}
	if unset := md.Unset(); len(unset) > 0 {
		g.stats.MergeLeftOut += uint64(len(unset))
		g.log.Warn("gms: members without digest entry left out of merge view", "members", unset)
		kept := members[:0]
		for _, p := range members {
			if md.IsSet(p.Member) {
				kept = append(kept, p)
			}
		}
		members = kept
		ids = ids[:0]
		for _, p := range members {
			ids = append(ids, p.Member)
		}
		md = digest.NewMutable(ids)
		for _, d := range digests {
			md.MergeDigest(d)
		}
	}
	d, err := md.Complete()
	if err != nil || len(members) == 0 || members[0].Member != g.self.Member {
		g.log.Error("gms: merge digest", "err", err)
		g.cancelMerge("digest", now)
		return
	}
	v := View{ID: digest.ViewID{Coord: g.self.Member, Counter: counter + 1}, Members: members}
	vm := &msg{typ: typeView, kind: 1, view: v.ID, id: ms.id}
	vm.withView(v).withDigest(d)
	b, err := vm.encode(g.cfg.Group, g.self.Member)
	if err != nil {
		g.log.Error("gms: encode merge view", "err", err)
		g.cancelMerge("encode", now)
		return
	}
	ms.installed, ms.view, ms.dig, ms.viewMsg = true, v, d, b
	ms.acks = map[digest.Member]bool{g.self.Member: true}
	ms.resendAt = now + g.cfg.ViewAckTimeout
	ms.deadline = now + g.cfg.MergeTimeout
	g.stats.Merges++
	g.log.Info("gms: merge view", "view", v, "digest", d)
	g.sendRaw(Peer{}, b)
	g.installMergeView(v, d, now)
	g.checkMerge(now)
}

func containsPeer(ps []Peer, m digest.Member) bool {
	for _, p := range ps {
		if p.Member == m {
			return true
		}
	}
	return false
}

func (g *GMS) checkMerge(now time.Duration) {
	ms := g.merge
	for _, p := range ms.view.Members {
		if !ms.acks[p.Member] {
			return
		}
	}
	g.endMerge(0, now)
}

func (g *GMS) cancelMerge(why string, now time.Duration) {
	g.log.Info("gms: merge cancelled", "self", g.self.Member, "why", why)
	g.endMerge(1, now)
}

// endMerge tells the other coordinators to release their captures (kind 0
// done, 1 cancelled) and releases ours.
func (g *GMS) endMerge(kind uint8, now time.Duration) {
	ms := g.merge
	g.merge = nil
	for _, o := range ms.others {
		g.send(o, &msg{typ: typeMergeDone, kind: kind, id: ms.id})
	}
	if ms.captured {
		g.proto.ReleaseCapture(ms.capID, now)
	}
	g.tryViewChange(now)
}

// abandonMerge ends this member's part in a merge when it stops
// coordinating (Leave, exit) and tells the other side at once, so that
// nobody holds a capture for a merge that can no longer complete: as
// leader it sends MERGE_DONE (kind 0 if the merge view is installed, else
// 1: cancelled) to the other coordinators, which would otherwise hold
// theirs until their deadline (2×MergeTimeout); as another coordinator
// holding its capture for a leader it refuses (MERGE_RSP kind 1), and the
// leader cancels instead of waiting out its MergeTimeout. It sends once:
// if that datagram is lost, the deadlines still release the captures. Our
// own captures are released; the caller drops the rest.
func (g *GMS) abandonMerge(now time.Duration) {
	if ms := g.merge; ms != nil {
		kind := uint8(1)
		if ms.installed {
			kind = 0
		}
		g.log.Info("gms: merge abandoned", "self", g.self.Member, "installed", ms.installed)
		for _, o := range ms.others {
			g.send(o, &msg{typ: typeMergeDone, kind: kind, id: ms.id})
		}
		if ms.captured {
			g.proto.ReleaseCapture(ms.capID, now)
		}
		g.merge = nil
	}
	if h := g.hold; h != nil {
		g.send(h.leader, &msg{typ: typeMergeRsp, kind: 1, id: h.id})
		g.proto.ReleaseCapture(h.capID, now)
		g.hold = nil
	}
}

func (g *GMS) onMergeDone(m *msg, now time.Duration) {
	if h := g.hold; h != nil && h.id == m.id && h.leader.Member == m.sender {
		g.endHold(h, now)
		g.tryViewChange(now)
	}
}

// endHold releases our capture for a merge another coordinator leads.
// A hold that lasted more than MergeTimeout without the merge view
// (ended by the deadline, or cancelled late) starts a quiet period in
// which merge requests are refused: MergeTimeout, doubled by each further
// such hold up to 8×MergeTimeout, reset by a hold that saw its merge view.
// A real leader sends its view, or cancels, within MergeTimeout of its
// request (its own deadline); merge requests can come from anyone, and
// without the quiet period a stranger that asks again as soon as a hold
// ends would keep our capture (stability) and our view changes suspended
// for good. With it, once the back-off is at its longest, at most a fifth
// of the time (a hold of at most 2×MergeTimeout per 8×MergeTimeout of
// quiet); the first rounds hold more.
func (g *GMS) endHold(h *mergeHold, now time.Duration) {
	g.proto.ReleaseCapture(h.capID, now)
	g.hold = nil
	switch {
	case !h.view.IsZero():
		g.mergeBackoff = 0
	case now-h.start > g.cfg.MergeTimeout:
		g.mergeBackoff = min(max(2*g.mergeBackoff, g.cfg.MergeTimeout), 8*g.cfg.MergeTimeout)
		g.mergeQuiet = now + g.mergeBackoff
	}
}

func (g *GMS) tickMerge(now time.Duration) {
	if h := g.hold; h != nil && now >= h.deadline {
		g.endHold(h, now)
		g.tryViewChange(now)
	}
	ms := g.merge
	if ms == nil {
		return
	}
	if now >= ms.deadline {
		g.cancelMerge("timed out", now)
		return
	}
	if !ms.installed && now >= ms.reqAt {
		g.sendMergeReq(now)
	}
	if ms.installed && now >= ms.resendAt {
		ms.resendAt = now + g.cfg.ViewAckTimeout
		g.resendMergeView(ms)
	}
}

// resendMergeView sends the merge view again to the members that have not
// acknowledged it: directly to those of our partition and to the other
// coordinators, and through its coordinator (which relays it:
// relayMergeView) to a member of another partition, which takes views only
// from members of its own.
func (g *GMS) resendMergeView(ms *mergeState) {
	relay := make(map[digest.Member]bool)
	for _, p := range ms.view.Members {
		if ms.acks[p.Member] {
			continue
		}
		o, ok := ms.partitionOf(p.Member)
		if !ok || o.Member == p.Member {
			g.sendRaw(p, ms.viewMsg)
			continue
		}
		if !relay[o.Member] {
			relay[o.Member] = true
			g.sendRaw(o, ms.viewMsg)
		}
	}
}

// partitionOf returns the coordinator of the other partition m came from
// (false: m was in ours).
func (ms *mergeState) partitionOf(m digest.Member) (Peer, bool) {
	for _, o := range ms.others {
		if r := ms.rsps[o.Member]; r != nil && r.v.Contains(m) {
			return o, true
		}
	}
	return Peer{}, false
}

func (g *GMS) mergeDeadlines(at func(time.Duration)) {
	if g.hold != nil {
		at(g.hold.deadline)
	}
	if ms := g.merge; ms != nil {
		at(ms.deadline)
		if ms.installed {
			at(ms.resendAt)
		} else {
			at(ms.reqAt)
		}
	}
}
