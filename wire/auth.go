package wire

import (
	"encoding/binary"

	"github.com/nakcast/nakcast/digest"
)

// FlagEncrypted (bit 2 of the flags) says the body of an authenticated
// datagram is encrypted: everything between the common header and the
// trailer is AES-GCM ciphertext under the key the key id names, and only the
// common header (which names the sender and the key) is in the clear, as
// additional data. It means nothing without FlagAuth and is then ignored,
// like an unknown bit. A receiver decrypts the body in place before any
// decoder reads it and clears the flag (see ClearEncrypted).
const FlagEncrypted uint8 = 1 << 2

// The nonce in the trailer: a 4-byte salt then an 8-byte counter, both
// little-endian. The sender picks both (see FORMAT.md, "Authentication
// trailer"); receivers read the counter for their replay window.
const (
	NonceSaltLen    = 4
	NonceCounterLen = 8
)

// Sealed is the byte layout of an authenticated datagram, as slices of
// it: the common header (the additional data of an encrypted datagram), the
// body between header and trailer, and the trailer's nonce and tag.
type Sealed struct {
	Header, Body, Nonce, Tag []byte
}

// SplitSealed cuts datagram, whose last TrailerLen bytes are the trailer,
// into its parts, aliasing it. ok is false if datagram is too short to hold
// a common header and a trailer. It reads no flag: the sender uses it on a
// datagram it is about to seal, the receiver after DecodeHeader checked
// FlagAuth.
func SplitSealed(datagram []byte) (s Sealed, ok bool) {
	n := len(datagram)
	if n < HeaderLen+TrailerLen {
		return Sealed{}, false
	}
	t := n - TrailerLen
	return Sealed{
		Header: datagram[:HeaderLen:HeaderLen],
		Body:   datagram[HeaderLen:t:t],
		Nonce:  datagram[t : t+NonceLen : t+NonceLen],
		Tag:    datagram[t+NonceLen : n : n],
	}, true
}

// PutAuth marks the common header at the start of datagram as sealed with
// key keyID (non-zero): it sets FlagAuth, sets or clears FlagEncrypted as
// encrypted says and writes the key id, leaving every other byte as it is.
// datagram must hold at least HeaderLen bytes.
func PutAuth(datagram []byte, keyID uint16, encrypted bool) {
	_ = datagram[HeaderLen-1]
	f := datagram[3] | FlagAuth
	if encrypted {
		f |= FlagEncrypted
	} else {
		f &^= FlagEncrypted
	}
	datagram[3] = f
	binary.LittleEndian.PutUint16(datagram[20:], keyID)
}

// ClearEncrypted clears FlagEncrypted in the common header at the start of
// datagram, once its body has been decrypted in place.
func ClearEncrypted(datagram []byte) { datagram[3] &^= FlagEncrypted }

// PutNonce writes salt and counter into a NonceLen-byte nonce.
func PutNonce(nonce []byte, salt uint32, counter uint64) {
	_ = nonce[NonceLen-1]
	binary.LittleEndian.PutUint32(nonce, salt)
	binary.LittleEndian.PutUint64(nonce[NonceSaltLen:], counter)
}

// NonceUnicast is the top bit of the nonce counter: set on a datagram
// sealed for one member's unicast address, clear on one sealed for the
// group address. The two reach a receiver through different sockets, each
// in the order sent but not in order with each other, so the sender counts
// them apart and a receiver keeps a replay window for each (FORMAT.md,
// "Authentication trailer"); the low 63 bits are the count.
const NonceUnicast uint64 = 1 << 63

// NonceCounter returns the counter of a NonceLen-byte nonce.
func NonceCounter(nonce []byte) uint64 {
	_ = nonce[NonceLen-1]
	return binary.LittleEndian.Uint64(nonce[NonceSaltLen:])
}

// HeaderKeyID and HeaderSender read the key id and the sender of the common
// header at the start of datagram (at least HeaderLen bytes) without
// decoding the rest.
func HeaderKeyID(datagram []byte) uint16 { return binary.LittleEndian.Uint16(datagram[20:]) }

// HeaderSender: see HeaderKeyID.
func HeaderSender(datagram []byte) digest.Member { return getMember(datagram[8:]) }
