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

// admit reports whether a datagram with header h and body from src goes on
// to gms or the protocol. It handles the ADDRESS challenges of static
// binding itself.
func (a *agent) admit(h wire.Header, body []byte, src netip.AddrPort, now time.Duration) bool {
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
		// A static member not bound yet: probe the address; nothing is
		// taken from it meanwhile (what it sends repeats, or is repaired,
		// once it is bound: one round trip).
		a.startBind(h.Sender, src, now)
		m.ctr.dropUnverified.Add(1)
		return false
	}
	if m.g != nil && gms.IsMembership(h.Type) {
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

// onAddressChallenge answers an ADDRESS challenge for us with an echo to
// the address it came from (from a member of the view; one bound elsewhere
// is a stranger using its identity), and binds a static member on the echo
// of our own probe.
func (a *agent) onAddressChallenge(h wire.Header, c *wire.Challenge, src netip.AddrPort, now time.Duration) {
	m := a.m
	if h.Type == wire.TypeEcho {
		if c.Target == h.Sender && a.routes.bind(h.Sender, src, c.Nonce) {
			m.ctr.addressesBound.Add(1)
			m.log.l.Debug("static member bound to its address", "member", h.Sender.String(), "addr", src.String())
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

// sendChallenge queues an ADDRESS CHALLENGE (or its ECHO) for target with
// nonce, to dst.
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
