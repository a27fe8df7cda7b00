package auth

import (
	"crypto/cipher"
	"errors"
	"fmt"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

// ErrShortBuffer: the buffer has no room for the trailer (Sign) or the
// sealed datagram (Encrypt), or the datagram is shorter than a header.
var ErrShortBuffer = errors.New("auth: buffer too short to seal")

// ErrCountersExhausted: the nonce source's count reached the path bit
// (wire.NonceUnicast): sealing further could repeat a nonce.
var ErrCountersExhausted = errors.New("auth: nonce counters exhausted")

// Sealer seals the datagrams one member sends, under the current key of
// its keyring and the subkey of the datagram's sender (the header's; a
// member's incarnation changes with gms). Not safe for concurrent use: the
// engine seals under its write lock.
type Sealer struct {
	ring    *Keyring
	nonces  *NonceSource
	encrypt bool

	// the subkey of the last sender sealed for, under key
	key  *ringKey
	self digest.Member
	aead cipher.AEAD
	// nonce is Encrypt's scratch (a local array would escape through the
	// AEAD interface: an allocation per datagram)
	nonce [wire.NonceLen]byte
}

// NewSealer returns a sealer over ring taking counters from nonces
// (ProcessNonces in a member). encrypt selects Encrypt over Sign for
// Seal's callers (see Encrypts).
func NewSealer(ring *Keyring, nonces *NonceSource, encrypt bool) *Sealer {
	return &Sealer{ring: ring, nonces: nonces, encrypt: encrypt}
}

// SetKeyring makes ring's current key the one that seals from now on.
func (s *Sealer) SetKeyring(ring *Keyring) { s.ring, s.key, s.aead = ring, nil, nil }

// Encrypts reports whether the sealer was made to encrypt bodies: the
// caller then uses Encrypt, else Sign.
func (s *Sealer) Encrypts() bool { return s.encrypt }

// subkey returns the AEAD for sender m under the current key, deriving it
// when m or the key changed.
func (s *Sealer) subkey(m digest.Member) (cipher.AEAD, *ringKey, error) {
	k := s.ring.keys[0]
	if s.aead != nil && s.key == k && s.self == m {
		return s.aead, k, nil
	}
	a, err := s.ring.derive(k, m)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: derive subkey: %w", err)
	}
	s.aead, s.key, s.self = a, k, m
	return a, k, nil
}

// next returns the nonce counter of the next seal on path p.
func (s *Sealer) next(p Path) (uint64, error) {
	c := s.nonces.Next(p)
	if c >= wire.NonceUnicast {
		return 0, ErrCountersExhausted
	}
	return nonceCounter(p, c), nil
}

// Sign authenticates the datagram buf[:n], to be sent on path p, in place:
// it marks the header (FlagAuth, the current key id, FlagEncrypted
// cleared), writes the trailer into buf[n:n+wire.TrailerLen] and returns
// buf[:n+wire.TrailerLen]. The tag covers buf[:n]; the body stays in the
// clear. Calling it again on the same buf and n reseals with a new nonce.
// It does not allocate once the sender's subkey is derived.
func (s *Sealer) Sign(buf []byte, n int, p Path) ([]byte, error) {
	if n < wire.HeaderLen || len(buf) < n+wire.TrailerLen {
		return nil, ErrShortBuffer
	}
	d := buf[:n+wire.TrailerLen]
	a, k, err := s.subkey(wire.HeaderSender(d))
	if err != nil {
		return nil, err
	}
	ctr, err := s.next(p)
	if err != nil {
		return nil, err
	}
	wire.PutAuth(d, k.id, false)
	sl, _ := wire.SplitSealed(d)
	wire.PutNonce(sl.Nonce, s.nonces.salt, ctr)
	a.Seal(sl.Tag[:0], sl.Nonce, nil, d[:n])
	return d, nil
}

// Encrypt seals the datagram src, to be sent on path p, into dst, which
// must not overlap it and must hold len(src)+wire.TrailerLen bytes: the
// common header goes in the clear (marked FlagAuth, FlagEncrypted, the
// current key id) as additional data, the body (src after the common
// header) as ciphertext, then the trailer. It returns
// dst[:len(src)+wire.TrailerLen]. src is not modified: it may be a
// retention buffer whose messages the sender still delivers and repairs.
// It does not allocate once the sender's subkey is derived.
func (s *Sealer) Encrypt(dst, src []byte, p Path) ([]byte, error) {
	n := len(src)
	if n < wire.HeaderLen || len(dst) < n+wire.TrailerLen {
		return nil, ErrShortBuffer
	}
	d := dst[:n+wire.TrailerLen]
	copy(d[:wire.HeaderLen], src[:wire.HeaderLen])
	a, k, err := s.subkey(wire.HeaderSender(d))
	if err != nil {
		return nil, err
	}
	ctr, err := s.next(p)
	if err != nil {
		return nil, err
	}
	wire.PutAuth(d, k.id, true)
	nonce := s.nonce[:]
	wire.PutNonce(nonce, s.nonces.salt, ctr)
	// AES-GCM writes ciphertext then tag: the tag lands where the nonce
	// goes and moves up by NonceLen (copy handles the overlap).
	a.Seal(d[wire.HeaderLen:wire.HeaderLen], nonce, src[wire.HeaderLen:], d[:wire.HeaderLen])
	copy(d[n+wire.NonceLen:], d[n:n+wire.TagLen])
	copy(d[n:n+wire.NonceLen], nonce)
	return d, nil
}
