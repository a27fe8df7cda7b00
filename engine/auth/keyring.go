package auth

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"

	"github.com/nakcast/nakcast/digest"
)

// Keyring is an immutable set of keys of one group: the first seals, all
// verify. Replace a member's keyring (Sealer.SetKeyring,
// Verifier.SetKeyring) to rotate.
type Keyring struct {
	group uint32
	keys  []*ringKey
}

type ringKey struct {
	id     uint16
	secret []byte
}

// NewKeyring returns the keyring of keys (checked by CheckKeys; the first
// is the current key) for the group id group.
func NewKeyring(group uint32, keys []Key) (*Keyring, error) {
	if err := CheckKeys(keys); err != nil {
		return nil, err
	}
	r := &Keyring{group: group, keys: make([]*ringKey, len(keys))}
	for i, k := range keys {
		r.keys[i] = &ringKey{id: k.id, secret: k.secret}
	}
	return r, nil
}

// Current returns the id of the key that seals.
func (r *Keyring) Current() uint16 { return r.keys[0].id }

// IDs returns the key ids, the current one first.
func (r *Keyring) IDs() []uint16 {
	ids := make([]uint16, len(r.keys))
	for i, k := range r.keys {
		ids[i] = k.id
	}
	return ids
}

// lookup returns the key with id, or nil.
func (r *Keyring) lookup(id uint16) *ringKey {
	for _, k := range r.keys {
		if k.id == id {
			return k
		}
	}
	return nil
}

// has reports whether k is one of r's keys.
func (r *Keyring) has(k *ringKey) bool {
	for _, o := range r.keys {
		if o == k {
			return true
		}
	}
	return false
}

// subkeyInfo is the HKDF info prefix; the group id, key id and sender
// follow it.
const subkeyInfo = "nakcast/1 datagram"

// derive returns the AEAD of sender m's subkey under k (see the package
// doc). It allocates: callers keep the result.
func (r *Keyring) derive(k *ringKey, m digest.Member) (cipher.AEAD, error) {
	var info [len(subkeyInfo) + 4 + 2 + 8 + 4]byte
	n := copy(info[:], subkeyInfo)
	binary.LittleEndian.PutUint32(info[n:], r.group)
	binary.LittleEndian.PutUint16(info[n+4:], k.id)
	binary.LittleEndian.PutUint64(info[n+6:], m.ID)
	binary.LittleEndian.PutUint32(info[n+14:], m.Inc)
	sub, err := hkdf.Key(sha256.New, k.secret, nil, string(info[:]), len(k.secret))
	if err != nil {
		return nil, err
	}
	defer clear(sub)
	b, err := aes.NewCipher(sub)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}
