package nakack

import (
	"context"
	crand "crypto/rand"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

// This file confirms MSG_NOT_FOUND in open mode (Config.Authenticated
// false). MSG_NOT_FOUND is the one message that makes a member skip data,
// and without a key its source address proves nothing: a stranger can put
// the original sender's address on it. So a receiver acts on one only
// once the sender confirmed it: it sends the sender, by unicast to its
// known address, a CHALLENGE with a fresh random nonce and the range it
// would mark lost; the sender echoes it only if it holds none of those
// seqnos; the receiver then marks exactly that range (what it still lacks
// of it) lost, as design.md item 1 says. A stranger that spoofed the
// sender's address never sees the nonce and cannot answer; the sender,
// which still holds the seqnos, does not. It costs one round trip, only
// on the path where data is already gone.
//
// One challenge per sender is pending at a time (so at most one per member
// of the view), resent every ChallengeTimeout, given up after
// ChallengeAttempts; a later MSG_NOT_FOUND starts again. While one is
// pending, a MSG_NOT_FOUND claiming less (a lower purge point) replaces it:
// a claim that is true is never held up behind a false one that claims
// more. A claim below the sender's real purge point is true (the sender
// does not hold those seqnos) and so is confirmed: a stranger can at most
// delay the report of what is really lost, never make a member skip what
// the sender holds.

// notFoundChallenge is a MSG_NOT_FOUND waiting for its sender's echo.
type notFoundChallenge struct {
	active  bool
	nonce   uint64
	view    digest.ViewID
	rg      wire.Range // what is marked lost once confirmed: (our delivered, the sender's low]
	highest uint64     // the MSG_NOT_FOUND's highest sent
	at      time.Duration
	tries   int
	// digest is the sender's digest, kept for the warning logged on
	// confirmation (only when the logger is enabled at WARN).
	digest digest.Digest
	raw    wire.MsgNotFound // the fields logged (its Digest is not kept)
}

// randomNonces returns Config.Nonce's default: a ChaCha8 generator (a
// cryptographically strong one) seeded from crypto/rand, so that nonces
// cannot be predicted from outside and drawing one allocates nothing.
func randomNonces() func() uint64 {
	var seed [32]byte
	_, _ = crand.Read(seed[:]) // never fails (Go 1.24+: it crashes the program instead)
	return rand.NewChaCha8(seed).Uint64
}

// challengeNotFound starts (or keeps) the confirmation of m, a
// MSG_NOT_FOUND from s that would mark rg lost.
func (p *Protocol) challengeNotFound(s *sender, m *wire.MsgNotFound, rg wire.Range, now time.Duration) {
	c := &s.chal
	if c.active && rg.To >= c.rg.To {
		p.stats.MsgNotFoundIgnored++ // confirmation of as much or more already under way
		return
	}
	if !c.active {
		p.challenged = append(p.challenged, s)
	}
	*c = notFoundChallenge{active: true, nonce: p.cfg.Nonce(), view: p.view.ID, rg: rg, highest: m.HighestSent, raw: *m}
	c.raw.Digest = wire.DigestView{}
	if p.cfg.Logger.Enabled(context.Background(), slog.LevelWarn) {
		c.digest = m.Digest.ToDigest()
	}
	p.sendChallenge(s, now)
}

// sendChallenge sends s's pending challenge (again) and arms its timer.
func (p *Protocol) sendChallenge(s *sender, now time.Duration) {
	c := &s.chal
	c.tries++
	c.at = now + p.cfg.ChallengeTimeout
	b := p.getBuf(wire.ChallengeOverhead + wire.RangeLen)
	if b == nil {
		return
	}
	p.ranges = append(p.ranges[:0], c.rg)
	d, err := wire.EncodeChallenge(b.B, p.hdr, wire.TypeChallenge, c.view, s.m, c.nonce, wire.ChallengeNotFound, wire.RangeSlice(p.ranges))
	if err != nil {
		panic(err) // valid by construction
	}
	p.emit(s.m, b, len(d))
	p.stats.ChallengesSent++
}

// tickChallenges resends the challenges due at now and gives up those
// that used every attempt.
func (p *Protocol) tickChallenges(now time.Duration) {
	for i := 0; i < len(p.challenged); {
		s := p.challenged[i]
		if s.chal.at > now {
			i++
			continue
		}
		if s.chal.tries < p.cfg.ChallengeAttempts {
			p.sendChallenge(s, now)
			i++
			continue
		}
		p.stats.ChallengesExpired++
		p.dropChallenge(s) // removes s from challenged
	}
}

// dropChallenge forgets s's pending challenge.
func (p *Protocol) dropChallenge(s *sender) {
	if !s.chal.active {
		return
	}
	s.chal = notFoundChallenge{}
	for i, c := range p.challenged {
		if c == s {
			p.challenged = append(p.challenged[:i], p.challenged[i+1:]...)
			break
		}
	}
}

// decodeNotFound decodes a CHALLENGE or ECHO; ok is false when it does not
// decode (counted, err) or is not a MSG_NOT_FOUND confirmation (ADDRESS
// challenges are the engine's).
func (p *Protocol) decodeNotFound(h wire.Header, body []byte) (c wire.Challenge, ok bool, err error) {
	if c, err = wire.DecodeChallenge(h, body); err != nil {
		p.stats.Drops.Malformed++
		return c, false, err
	}
	return c, c.Kind == wire.ChallengeNotFound, nil
}

// onChallenge answers another member's CHALLENGE of a MSG_NOT_FOUND of
// ours: an ECHO, to its known address, only if it is for our view and we
// hold none of the seqnos it names. ADDRESS challenges are the engine's.
func (p *Protocol) onChallenge(h wire.Header, body []byte) error {
	c, ok, err := p.decodeNotFound(h, body)
	if !ok {
		return err
	}
	if !p.peer(h.Sender) || c.Target != p.self {
		p.stats.Drops.Stranger++
		return nil
	}
	low := p.own.win.Low()
	ok = p.hasView && c.View == p.view.ID && c.Ranges.Len() > 0
	for i := 0; ok && i < c.Ranges.Len(); i++ {
		ok = c.Ranges.At(i).To <= low
	}
	if !ok {
		p.stats.ChallengesRefused++
		return nil
	}
	b := p.getBuf(wire.ChallengeOverhead + c.Ranges.Len()*wire.RangeLen)
	if b == nil {
		return nil
	}
	d, err := wire.EncodeChallenge(b.B, p.hdr, wire.TypeEcho, c.View, c.Target, c.Nonce, c.Kind, c.Ranges)
	if err != nil {
		b.Release()
		return nil
	}
	p.emit(h.Sender, b, len(d))
	p.stats.ChallengesAnswered++
	return nil
}

// onEcho confirms the pending challenge the ECHO answers (same sender,
// nonce, view and range) and acts on its MSG_NOT_FOUND.
func (p *Protocol) onEcho(h wire.Header, body []byte, now time.Duration) error {
	e, ok, err := p.decodeNotFound(h, body)
	if !ok {
		return err
	}
	s := p.senders[h.Sender]
	if s == nil || !s.chal.active {
		p.stats.EchoesIgnored++
		return nil
	}
	c := s.chal
	if e.Nonce != c.nonce || e.Target != s.m || e.View != c.view || e.Ranges.Len() != 1 || e.Ranges.At(0) != c.rg {
		p.stats.EchoesIgnored++
		return nil
	}
	p.dropChallenge(s)
	if s.state != live || !p.hasView || c.view != p.view.ID {
		p.stats.MsgNotFoundIgnored++
		return nil
	}
	p.notFound(s, c.rg.To, c.highest, &c.raw, c.digest, now)
	return nil
}
