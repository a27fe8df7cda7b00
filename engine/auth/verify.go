package auth

import (
	"crypto/cipher"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

// Reason is why a datagram was refused (OK: accepted).
type Reason uint8

// Reasons, in the order the checks run.
const (
	OK Reason = iota
	// NoTrailer: a member with a key got a datagram without FlagAuth (or
	// too short to hold a trailer).
	NoTrailer
	// UnknownKey: the key id is not in the keyring (never was, or retired
	// after a rotation).
	UnknownKey
	// Replay: the counter was already accepted from this sender.
	Replay
	// TooOld: the counter is below the sender's replay window.
	TooOld
	// Throttled: a sender not known yet, and the budget of subkey
	// derivations (DeriveBurst, DeriveRate) is spent.
	Throttled
	// BadTag: the tag does not verify: forged, corrupted, or sealed under
	// another secret with the same key id.
	BadTag
	// NoKey: a member without a key (open mode) got an authenticated
	// datagram, which it can neither verify nor, encrypted, read.
	NoKey
	// NumReasons is the number of Reasons (OK included), for arrays of
	// counters indexed by Reason.
	NumReasons
)

var reasonNames = [NumReasons]string{"ok", "no_trailer", "unknown_key", "replay", "too_old", "throttled", "bad_tag", "no_key"}

// String returns the reason's metric label: "bad_tag", "replay", ...
func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Bounds of a Verifier's state and work.
const (
	// MaxSenders is the most senders a Verifier keeps a replay window and
	// subkeys for; the least recently heard is forgotten first.
	MaxSenders = 1024
	// DeriveBurst and DeriveRate ration the subkey derivations for senders
	// not known yet (a derivation allocates some 2.6 KB and takes about
	// 2us): DeriveBurst at once, then DeriveRate a second.
	DeriveBurst = 64
	DeriveRate  = 10000
)

// Verifier checks the datagrams one member receives. Not safe for
// concurrent use: the engine verifies on its receive path, under its lock.
type Verifier struct {
	ring    *Keyring
	senders map[digest.Member]*sender
	heard   uint64 // a counter of accepted datagrams, for least recently heard
	tokens  int
	tokAt   time.Duration
	stats   VerifierStats
	// nonce is openSealed's scratch (see Sealer.nonce)
	nonce [wire.NonceLen]byte
}

// VerifierStats are a Verifier's own counters (drops are the caller's, by
// Reason).
type VerifierStats struct {
	Senders   int    // senders with a replay window
	Derived   uint64 // subkeys derived
	Forgotten uint64 // senders forgotten to stay within MaxSenders
}

type sender struct {
	win   [numPaths]Window // by Path
	heard uint64
	keys  [MaxKeys]subkey
}

type subkey struct {
	k    *ringKey
	aead cipher.AEAD
}

// NewVerifier returns a verifier over ring.
func NewVerifier(ring *Keyring) *Verifier {
	return &Verifier{ring: ring, senders: make(map[digest.Member]*sender), tokens: DeriveBurst}
}

// SetKeyring replaces the keys that verify: datagrams under a key id no
// longer in ring fail with UnknownKey from now on. Replay windows stay.
func (v *Verifier) SetKeyring(ring *Keyring) { v.ring = ring }

// Stats returns the verifier's counters.
func (v *Verifier) Stats() VerifierStats {
	s := v.stats
	s.Senders = len(v.senders)
	return s
}

// Open verifies datagram d in place, at time now (the derivation budget's
// clock). It returns OK if d carries a valid tag under a key of the ring
// and a counter that the sender's replay window for the counter's path has
// not seen; an encrypted body is then decrypted in place and FlagEncrypted
// cleared, so d reads as an authenticated plaintext datagram (its trailer
// is no longer meaningful). Any other result leaves no state behind (a
// refused encrypted body may be overwritten). The caller has checked the
// common header (wire.DecodeHeader). It does not allocate for a known
// sender.
func (v *Verifier) Open(d []byte, now time.Duration) Reason {
	sl, ok := wire.SplitSealed(d)
	if !ok || d[3]&wire.FlagAuth == 0 {
		return NoTrailer
	}
	k := v.ring.lookup(wire.HeaderKeyID(d))
	if k == nil {
		return UnknownKey
	}
	p, ctr := pathOf(wire.NonceCounter(sl.Nonce))
	m := wire.HeaderSender(d)
	s := v.senders[m]
	if s != nil {
		if r := s.win[p].Check(ctr); r != OK {
			return r
		}
	} else if ctr == 0 {
		return TooOld
	}
	a := s.aead(k)
	if a == nil {
		if s == nil && !v.takeToken(now) {
			return Throttled
		}
		var err error
		if a, err = v.ring.derive(k, m); err != nil {
			return BadTag
		}
		v.stats.Derived++
		if s != nil {
			s.keep(k, a, v.ring)
		}
	}
	if !openSealed(a, d, sl, v.nonce[:]) {
		return BadTag
	}
	if s == nil {
		s = v.add(m)
		s.keep(k, a, v.ring)
	}
	s.win[p].Mark(ctr)
	v.heard++
	s.heard = v.heard
	return OK
}

// openSealed checks d's tag with a, decrypting an encrypted body in place;
// nonce is NonceLen bytes of scratch.
func openSealed(a cipher.AEAD, d []byte, sl wire.Sealed, nonce []byte) bool {
	if d[3]&wire.FlagEncrypted == 0 {
		_, err := a.Open(nil, sl.Nonce, sl.Tag, d[:len(d)-wire.TrailerLen])
		return err == nil
	}
	// AES-GCM wants ciphertext then tag: move the tag down over the nonce.
	copy(nonce, sl.Nonce)
	n := len(d)
	copy(d[n-wire.TrailerLen:], sl.Tag)
	ct := d[wire.HeaderLen : n-wire.NonceLen]
	if _, err := a.Open(ct[:0], nonce, ct, sl.Header); err != nil {
		return false
	}
	wire.ClearEncrypted(d)
	return true
}

// takeToken takes one derivation from the budget for unknown senders: a
// token bucket of DeriveBurst refilled at DeriveRate on the caller's clock.
func (v *Verifier) takeToken(now time.Duration) bool {
	const per = time.Second / DeriveRate
	if n := (now - v.tokAt) / per; n > 0 {
		v.tokens = min(DeriveBurst, v.tokens+int(min(n, DeriveBurst)))
		v.tokAt += n * per
	}
	if v.tokens == 0 {
		return false
	}
	v.tokens--
	return true
}

// add creates m's state, forgetting the least recently heard sender when
// MaxSenders are known.
func (v *Verifier) add(m digest.Member) *sender {
	if len(v.senders) >= MaxSenders {
		var old digest.Member
		oldest := uint64(1<<64 - 1)
		for id, s := range v.senders {
			if s.heard < oldest {
				old, oldest = id, s.heard
			}
		}
		delete(v.senders, old)
		v.stats.Forgotten++
	}
	s := &sender{}
	v.senders[m] = s
	return s
}

// aead returns s's AEAD for key k, or nil (s may be nil).
func (s *sender) aead(k *ringKey) cipher.AEAD {
	if s == nil {
		return nil
	}
	for i := range s.keys {
		if s.keys[i].k == k {
			return s.keys[i].aead
		}
	}
	return nil
}

// keep stores a for k in a slot that is free or holds a key no longer in
// ring (there is one: ring has at most MaxKeys keys, k among them).
func (s *sender) keep(k *ringKey, a cipher.AEAD, ring *Keyring) {
	for i := range s.keys {
		if o := s.keys[i].k; o == nil || !ring.has(o) {
			s.keys[i] = subkey{k: k, aead: a}
			return
		}
	}
}
