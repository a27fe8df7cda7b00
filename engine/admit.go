package engine

import (
	"net/netip"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/gms"
	"github.com/nakcast/nakcast/wire"
)

// This file is the agent's gate between the socket and the protocols: a
// datagram goes on to gms or nakack only if the routing table (routes.go)
// says it comes from the member it claims, at that member's address. What
// is refused is counted by reason (Stats.Drops).

// admit reports whether datagram d (header h, body) from src goes on to
// gms or the protocol. It handles the ADDRESS challenges of static binding
// itself, and holds what a static member not bound yet sends.
func (a *agent) admit(h wire.Header, d, body []byte, src netip.AddrPort, now time.Duration) bool {
	m := a.m
	if h.Type == wire.TypeChallenge || h.Type == wire.TypeEcho {
		if c, err := wire.DecodeChallenge(h, body); err == nil && c.Kind == wire.ChallengeAddress {
			a.onAddressChallenge(h, &c, src, now)
			return false
		}
	}
	switch a.routes.check(h.Sender, src) {
	case fromMember:
		return true
	case wrongSource:
		m.ctr.dropWrongSource.Add(1)
		return false
	case unbound:
		// A static member not bound yet: probe the address, and hold what
		// came from it until the echo binds it there (one round trip).
		a.startBind(h.Sender, src, now)
		a.hold(h.Sender, src, d, now)
		return false
	}
	if m.dynamic() && gms.IsMembership(h.Type) {
		return true // a peer outside the view may discover, join or merge: gms decides
	}
	m.ctr.dropNotMember.Add(1)
	return false
}

// startBind sends an ADDRESS challenge to src for static member mem, unless
// a probe for mem is under way.
func (a *agent) startBind(mem digest.Member, src netip.AddrPort, now time.Duration) {
	if !a.unicastOK(src) {
		return
	}
	nonce, ok := a.routes.probe(mem, src, now)
	if !ok {
		return
	}
	a.m.ctr.addressProbes.Add(1)
	a.sendChallenge(src, wire.TypeChallenge, mem, nonce)
}

// probeGroup asks, through the group, every static member not bound yet to
// answer from its address (static membership without MemberAddrs, at
// Open and every lag check until all are bound): members started together
// bind before their data flows. The nonce travels by multicast, which an
// off-path spoofer does not see (a stranger on the segment does: the
// limit docs/security.md states for binding on first contact).
func (a *agent) probeGroup() {
	for _, mem := range a.routes.unbound(nil) {
		a.m.ctr.addressProbes.Add(1)
		a.sendChallenge(netip.AddrPort{}, wire.TypeChallenge, mem, a.routes.probeNonce(mem, netip.AddrPort{}))
	}
}

// onAddressChallenge answers an ADDRESS challenge for us with an echo to
// the address it came from (from a member of the view; one bound elsewhere
// is a stranger using its identity), and binds a static member on the echo
// of our own probe.
func (a *agent) onAddressChallenge(h wire.Header, c *wire.Challenge, src netip.AddrPort, now time.Duration) {
	m := a.m
	if h.Type == wire.TypeEcho {
		if a.routes.check(h.Sender, src) == fromMember {
			return // a late echo (of the group probe, answered more than once)
		}
		if c.Target == h.Sender && a.routes.bind(h.Sender, src, c.Nonce) {
			m.ctr.addressesBound.Add(1)
			m.log.l.Debug("static member bound to its address", "member", h.Sender.String(), "addr", src.String())
			a.releaseHeld(h.Sender, src, now)
		} else {
			m.ctr.dropUnverified.Add(1)
		}
		return
	}
	switch v := a.routes.check(h.Sender, src); {
	case c.Target != m.Self():
		m.ctr.dropUnverified.Add(1)
	case v == wrongSource:
		m.ctr.dropWrongSource.Add(1)
	case v == stranger:
		m.ctr.dropNotMember.Add(1)
	case a.unicastOK(src):
		a.sendChallenge(src, wire.TypeEcho, c.Target, c.Nonce)
	}
}

// heldDgram is a datagram from a static member not bound yet: who it
// claims, where it came from, when.
type heldDgram struct {
	m   digest.Member
	src netip.AddrPort
	buf *wire.Buffer
	at  time.Duration
}

// maxHeldBytes bounds the bytes held for binding (what a sender streams
// before the bind completes: a round trip, longer when the member that
// must echo is busy), heldFor how long a datagram waits: what a stranger
// claiming a member from an address that never answers sends is thrown
// away (counted).
const (
	maxHeldBytes = 16 << 20
	heldFor      = 4 * probeInterval
)

// hold keeps a copy of datagram d, which claims mem and came from src,
// until mem is bound (releaseHeld); past maxHeldBytes it is dropped (the
// protocol repairs it once the member is bound).
func (a *agent) hold(mem digest.Member, src netip.AddrPort, d []byte, now time.Duration) {
	m := a.m
	k := 0
	for _, h := range a.held {
		if now-h.at < heldFor {
			a.held[k] = h
			k++
			continue
		}
		a.heldBytes -= len(h.buf.B)
		h.buf.Release()
		m.ctr.dropUnverified.Add(1)
	}
	clear(a.held[k:])
	a.held = a.held[:k]
	var b *wire.Buffer
	if a.heldBytes+len(d) <= maxHeldBytes {
		b = m.pool.Get(len(d))
	}
	if b == nil {
		m.ctr.dropUnverified.Add(1)
		return
	}
	b.N = copy(b.B, d)
	a.heldBytes += len(b.B)
	a.held = append(a.held, heldDgram{m: mem, src: src, buf: b, at: now})
}

// releaseHeld hands the protocol what mem sent from addr while it was not
// bound, in order, and drops what came in its name from elsewhere.
func (a *agent) releaseHeld(mem digest.Member, addr netip.AddrPort, now time.Duration) {
	m := a.m
	k := 0
	for _, h := range a.held {
		switch {
		case h.m != mem:
			a.held[k] = h
			k++
			continue
		case sameAddr(h.src, addr) && m.proto != nil:
			if err := m.proto.Receive(h.buf, now); err != nil {
				m.ctr.receiveErrors.Add(1)
			}
		default:
			m.ctr.dropUnverified.Add(1)
		}
		a.heldBytes -= len(h.buf.B)
		h.buf.Release()
	}
	clear(a.held[k:])
	a.held = a.held[:k]
}

// sendChallenge queues an ADDRESS CHALLENGE (or its ECHO) for target with
// nonce, to dst (the zero AddrPort: the group).
func (a *agent) sendChallenge(dst netip.AddrPort, t wire.Type, target digest.Member, nonce uint64) {
	m := a.m
	b := m.pool.Get(wire.ChallengeOverhead + wire.TrailerLen)
	if b == nil {
		return
	}
	var view digest.ViewID
	if p := m.proto; p != nil {
		view = p.View().ID
	}
	d, err := wire.EncodeChallenge(b.B, wire.Header{Group: a.group, Sender: m.Self()}, t, view, target, nonce,
		wire.ChallengeAddress, wire.RangeSlice(nil))
	if err != nil {
		b.Release()
		return
	}
	b.N = len(d)
	a.rw.q = append(a.rw.q, b)
	a.rw.b = append(a.rw.b, b.Bytes())
	a.rw.dsts = append(a.rw.dsts, dst)
}
