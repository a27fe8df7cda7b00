package gms

import (
	"slices"
	"time"

	"github.com/nakcast/nakcast/digest"
)

// xferReq is the requester's side of a state transfer.
type xferReq struct {
	id       uint64
	provider Peer
	tried    []digest.Member
	attempts int
	deadline time.Duration
	buf      []byte
	total    uint64
	dig      digest.Digest
	started  bool // first chunk (with the digest) received
	resendAt time.Duration
	// queued: requested while this member was serving a state (or it
	// yielded to a member asking it back); the fetch starts once every
	// transfer it serves has ended (onStateReq). id and provider are zero
	// meanwhile.
	queued bool
}

// xferDone remembers the last completed transfer, to re-acknowledge it.
type xferDone struct {
	id       uint64
	provider Peer
}

// xferProv is the provider's side.
type xferProv struct {
	id        uint64
	requester Peer
	state     []byte
	dig       digest.Digest
	capID     uint64
	acked     uint64
	next      uint64
	sentAll   bool
	deadline  time.Duration
	resendAt  time.Duration
}

// RequestState fetches the application state from another member (the
// coordinator first) and installs it with the digest captured at the same
// point (Protocol.OverwriteDigest, seed 003). The outcome is reported by
// Listener.StateInstalled. A member serving a state fetches its own once
// those transfers have ended (onStateReq).
func (g *GMS) RequestState(now time.Duration) error {
	if g.status != StatusMember {
		return ErrNotMember
	}
	if g.cfg.App == nil {
		return ErrNoState
	}
	if g.xfer != nil {
		return ErrBusy
	}
	g.xfer = &xferReq{queued: len(g.prov) > 0}
	if !g.xfer.queued {
		g.startXfer(now)
	}
	return nil
}

// startQueued starts a fetch that waited for the transfers this member
// served to end.
func (g *GMS) startQueued(now time.Duration) {
	if x := g.xfer; x != nil && x.queued && len(g.prov) == 0 {
		x.queued = false
		g.startXfer(now)
	}
}

func (g *GMS) startXfer(now time.Duration) {
	x := g.xfer
	var provider Peer
	for _, p := range g.view.Members {
		if p.Member != g.self.Member && !slices.Contains(x.tried, p.Member) && !g.fd.suspected[p.Member] {
			provider = p
			break
		}
	}
	if provider.Member.IsZero() || x.attempts >= g.cfg.StateAttempts {
		g.xfer = nil
		g.stats.StateAborted++
		if g.cfg.Listener != nil {
			g.cfg.Listener.StateInstalled(ErrStateFailed)
		}
		return
	}
	x.attempts++
	x.id = g.rng.Uint64() | 1
	x.provider = provider
	x.buf, x.total, x.dig, x.started = x.buf[:0], 0, digest.Digest{}, false
	x.deadline = now + g.cfg.StateTimeout
	g.sendStateReq(now)
}

// sendStateReq (re)sends the request; it is repeated until the first chunk
// arrives (the provider restarts from what we acknowledged).
func (g *GMS) sendStateReq(now time.Duration) {
	x := g.xfer
	x.resendAt = now + g.cfg.ViewAckTimeout
	r := &msg{typ: typeStateReq, id: x.id}
	r.withAddr(g.cfg.Addr)
	g.send(x.provider, r)
}

func (g *GMS) onStateChunk(m *msg, now time.Duration) {
	if m.id == g.done.id && m.sender == g.done.provider.Member {
		g.send(g.done.provider, &msg{typ: typeStateDone, kind: 0, id: m.id})
		return
	}
	x := g.xfer
	if x == nil || m.id != x.id || m.sender != x.provider.Member || now >= x.deadline {
		return
	}
	if m.a == 0 && !x.started {
		if !m.has(secDigest) {
			return
		}
		x.started, x.total, x.dig = true, m.b, m.dig
	}
	if !x.started || m.b != x.total {
		return
	}
	if m.a == uint64(len(x.buf)) && uint64(len(x.buf)+len(m.data)) <= x.total {
		x.buf = append(x.buf, m.data...)
	}
	if uint64(len(x.buf)) < x.total {
		g.send(x.provider, &msg{typ: typeStateAck, id: x.id, a: uint64(len(x.buf))})
		return
	}
	// A digest that does not cover exactly our view, or a departed
	// sender's window still open here, would leave that sender's part of
	// the state and our window for it out of step (the digest neither
	// re-delivers nor skips for it): fetch a fresh state from the same
	// provider, within the same deadline.
	if len(g.open) > 0 || x.dig.Matches(g.view.IDs()) != nil {
		g.stats.StateRetried++
		g.send(x.provider, &msg{typ: typeStateDone, kind: 1, id: x.id})
		x.id = g.rng.Uint64() | 1
		x.buf, x.total, x.dig, x.started = x.buf[:0], 0, digest.Digest{}, false
		g.sendStateReq(now)
		return
	}
	// Complete: state and digest are installed together, with no delivery
	// in between (the driver polls the protocol only between entry points).
	// A digest the protocol cannot install (it no longer retains what it
	// would have to re-deliver) fails this provider before the application
	// state is touched.
	if err := g.proto.CheckOverwrite(x.dig); err != nil {
		g.failXfer("gms: state digest cannot be installed", err, now)
		return
	}
	if err := g.cfg.App.SetState(x.buf); err != nil {
		g.failXfer("gms: SetState", err, now)
		return
	}
	if err := g.proto.OverwriteDigest(x.dig, now); err != nil {
		// Checked above, so not expected; the state installed does not
		// match the protocol: the next provider's transfer replaces both.
		g.failXfer("gms: OverwriteDigest", err, now)
		return
	}
	g.send(x.provider, &msg{typ: typeStateDone, kind: 0, id: x.id})
	g.done = xferDone{id: x.id, provider: x.provider}
	g.xfer = nil
	g.stats.StateInstalled++
	if g.cfg.Listener != nil {
		g.cfg.Listener.StateInstalled(nil)
	}
}

// failXfer abandons the transfer from the current provider (which releases
// its capture) and tries the next one.
func (g *GMS) failXfer(what string, err error, now time.Duration) {
	x := g.xfer
	g.log.Error(what, "provider", x.provider.Member, "err", err)
	g.stats.StateAborted++
	g.send(x.provider, &msg{typ: typeStateDone, kind: 1, id: x.id})
	x.tried = append(x.tried, x.provider.Member)
	g.startXfer(now)
}

// onStateReq: capture the state and the digest at the same point and start
// streaming.
func (g *GMS) onStateReq(m *msg, now time.Duration) {
	if g.status != StatusMember || m.addr == "" {
		return
	}
	if !g.view.Contains(m.sender) {
		g.stats.Refused++ // the state is the group's: only for a member of the view
		return
	}
	if p, ok := g.prov[m.id]; ok {
		p.rewind()
		g.pumpState(p)
		return
	}
	if g.cfg.App == nil {
		g.send(Peer{Member: m.sender, Addr: m.addr}, &msg{typ: typeStateDone, kind: 1, id: m.id})
		return
	}
	if len(g.open) > 0 {
		// A departed sender's window is open (its cut is under way): the
		// digest would not cover it, so the state cannot be installed in
		// step with it. Not answered: the requester asks again.
		g.stats.StateDeferred++
		return
	}
	if x := g.xfer; x != nil {
		// This member is fetching a state of its own (or waits to): the
		// one it would serve is about to be replaced, and the requester
		// would install a state no member goes on from. Not answered:
		// the requester asks again, and is served once the fetch ended.
		// Likewise a member serving a state fetches its own only once
		// those transfers ended (RequestState), so a provider's state
		// is the one it captured until its requesters installed it or
		// gave up (their deadline comes before its capture's).
		if x.queued || x.started || m.sender != x.provider.Member || !g.self.Member.Less(m.sender) {
			g.stats.StateDeferred++
			return
		}
		// Two members asking each other would each wait for the other
		// until their deadlines: the lower one abandons its attempt,
		// serves, and asks again once that transfer has ended.
		g.send(x.provider, &msg{typ: typeStateDone, kind: 1, id: x.id})
		x.queued, x.id, x.provider = true, 0, Peer{} // nothing of that attempt is taken now
	}
	state, err := g.cfg.App.State()
	if err != nil {
		g.log.Error("gms: State", "err", err)
		return
	}
	capID, d := g.proto.CaptureDigest(now)
	p := &xferProv{id: m.id, requester: Peer{Member: m.sender, Addr: m.addr}, state: state, dig: d, capID: capID,
		deadline: now + 2*g.cfg.StateTimeout, resendAt: now + g.cfg.ViewAckTimeout}
	g.prov[m.id] = p
	g.pumpState(p)
}

// pumpState sends chunks while fewer than StateWindow are unacknowledged.
func (g *GMS) pumpState(p *xferProv) {
	total := uint64(len(p.state))
	chunk := uint64(g.cfg.StateChunk)
	for !p.sentAll && p.next-p.acked < uint64(g.cfg.StateWindow)*chunk {
		end := min(p.next+chunk, total)
		c := &msg{typ: typeStateChunk, id: p.id, a: p.next, b: total}
		if p.next == 0 {
			c.withDigest(p.dig)
		}
		c.withData(p.state[p.next:end])
		g.send(p.requester, c)
		p.next = end
		p.sentAll = end == total
	}
}

// rewind restarts sending from what the requester acknowledged.
func (p *xferProv) rewind() { p.next, p.sentAll = p.acked, false }

func (g *GMS) onStateAck(m *msg, now time.Duration) {
	p, ok := g.prov[m.id]
	if !ok || m.sender != p.requester.Member || m.a > uint64(len(p.state)) {
		return
	}
	if m.a > p.acked {
		p.acked = m.a
		p.resendAt = now + g.cfg.ViewAckTimeout
		g.pumpState(p)
	}
}

func (g *GMS) onStateDone(m *msg, now time.Duration) {
	if p, ok := g.prov[m.id]; ok && m.sender == p.requester.Member {
		g.proto.ReleaseCapture(p.capID, now)
		delete(g.prov, m.id)
		if m.kind == 0 {
			g.stats.StateServed++
		}
		g.startQueued(now)
		return
	}
	// A provider refused (kind 1): try the next one.
	if x := g.xfer; x != nil && m.id == x.id && m.sender == x.provider.Member && m.kind == 1 {
		x.tried = append(x.tried, x.provider.Member)
		g.startXfer(now)
	}
}

func (g *GMS) tickState(now time.Duration) {
	// A queued fetch has no provider nor deadline yet: it waits for the
	// transfers served below to end (startQueued).
	switch x := g.xfer; {
	case x == nil || x.queued:
	case now >= x.deadline:
		// Abort, never complete late: the provider's capture may be gone.
		g.stats.StateAborted++
		g.send(x.provider, &msg{typ: typeStateDone, kind: 1, id: x.id})
		x.tried = append(x.tried, x.provider.Member)
		g.log.Warn("gms: state transfer timed out", "provider", x.provider.Member)
		g.startXfer(now)
	case !x.started && now >= x.resendAt:
		g.sendStateReq(now)
	}
	for _, id := range sortedIDs(g.prov) {
		p := g.prov[id]
		if now >= p.deadline {
			g.proto.ReleaseCapture(p.capID, now)
			delete(g.prov, id)
			continue
		}
		if now >= p.resendAt {
			p.resendAt = now + g.cfg.ViewAckTimeout
			p.rewind()
			g.pumpState(p)
		}
	}
	g.startQueued(now)
}

func (g *GMS) stateDeadlines(at func(time.Duration)) {
	if x := g.xfer; x != nil && !x.queued {
		at(x.deadline)
		if !x.started {
			at(x.resendAt)
		}
	}
	if len(g.prov) == 0 {
		return // no iterator for an empty map (cutDeadlines)
	}
	for _, p := range g.prov {
		at(p.deadline)
		at(p.resendAt)
	}
}

func sortedIDs[V any](m map[uint64]V) []uint64 {
	ks := make([]uint64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
