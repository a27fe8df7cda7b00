package auth

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
)

// ErrInvalidKey is wrapped by every error about a key or a key ring.
var ErrInvalidKey = errors.New("auth: invalid key")

// MaxKeys is the most keys a Keyring holds: the current one and those
// still accepted during a rotation's overlap.
const MaxKeys = 4

// Key is a group key: a non-zero key id, carried in every datagram's header,
// and a 16- or 32-byte secret (AES-128 or AES-256). The secret is
// unexported and never printed: String, GoString, Format, LogValue and
// MarshalJSON show the id and the size only. Build one with NewKey,
// GenerateKey or ParseKeys.
type Key struct {
	id     uint16
	secret []byte
}

// NewKey returns a key with id and a copy of secret. id must not be 0 and
// secret must be 16 or 32 bytes.
func NewKey(id uint16, secret []byte) (Key, error) {
	if id == 0 {
		return Key{}, fmt.Errorf("%w: key id 0: want 1..65535", ErrInvalidKey)
	}
	if n := len(secret); n != 16 && n != 32 {
		return Key{}, fmt.Errorf("%w: key %d: secret of %d bytes: want 16 (AES-128) or 32 (AES-256)", ErrInvalidKey, id, n)
	}
	return Key{id: id, secret: append([]byte(nil), secret...)}, nil
}

// GenerateKey returns a key with id and a fresh random 32-byte secret.
func GenerateKey(id uint16) (Key, error) {
	s := make([]byte, 32)
	if _, err := rand.Read(s); err != nil {
		return Key{}, err
	}
	return NewKey(id, s)
}

// ID returns the key id.
func (k Key) ID() uint16 { return k.id }

// IsZero reports whether k is the zero Key (no key).
func (k Key) IsZero() bool { return k.id == 0 && k.secret == nil }

// valid reports whether k could have come from NewKey.
func (k Key) valid() bool { return k.id != 0 && (len(k.secret) == 16 || len(k.secret) == 32) }

// String returns "key 3 (AES-256)": the id and the size, never the secret.
func (k Key) String() string {
	if !k.valid() {
		return "key(invalid)"
	}
	return "key " + strconv.Itoa(int(k.id)) + " (AES-" + strconv.Itoa(8*len(k.secret)) + ")"
}

// GoString is String, so %#v does not print the secret either.
func (k Key) GoString() string { return k.String() }

// Format prints String for every verb (%x and %v of a struct holding a Key
// included), so no format verb reaches the secret.
func (k Key) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, k.String()) }

// LogValue implements slog.LogValuer: the id and the size.
func (k Key) LogValue() slog.Value { return slog.StringValue(k.String()) }

// MarshalJSON writes String as a JSON string.
func (k Key) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(k.String())), nil }

// MarshalText writes String (encodings that prefer text, flag values).
func (k Key) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// ParseKeys reads a key file: one key per line, "ID HEX" (a key id 1..65535
// and the secret as 32 or 64 hex digits), the current key first; blank
// lines and lines starting with '#' are skipped. It returns at least one
// key, with distinct ids, at most MaxKeys. Errors name the line, never its
// secret.
func ParseKeys(r io.Reader) ([]Key, error) {
	var keys []Key
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		f := strings.Fields(s)
		if len(f) != 2 {
			return nil, fmt.Errorf("%w: key file line %d: want \"ID HEX\"", ErrInvalidKey, line)
		}
		id, err := strconv.ParseUint(f[0], 10, 16)
		if err != nil {
			return nil, fmt.Errorf("%w: key file line %d: key id %q: want 1..65535", ErrInvalidKey, line, f[0])
		}
		secret, err := hex.DecodeString(f[1])
		if err != nil {
			return nil, fmt.Errorf("%w: key file line %d: secret is not hex", ErrInvalidKey, line)
		}
		k, err := NewKey(uint16(id), secret)
		clear(secret)
		if err != nil {
			return nil, fmt.Errorf("key file line %d: %w", line, err)
		}
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if err := CheckKeys(keys); err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	return keys, nil
}

// WriteKeys writes keys in ParseKeys' format. It is the one function that
// writes secrets: for key files (0600) that a harness hands to members.
func WriteKeys(w io.Writer, keys []Key) error {
	if err := CheckKeys(keys); err != nil {
		return err
	}
	for _, k := range keys {
		if _, err := fmt.Fprintf(w, "%d %s\n", k.id, hex.EncodeToString(k.secret)); err != nil {
			return err
		}
	}
	return nil
}

// CheckKeys reports whether keys can form a Keyring: 1..MaxKeys keys, each
// valid (from NewKey), with distinct ids.
func CheckKeys(keys []Key) error {
	if len(keys) == 0 || len(keys) > MaxKeys {
		return fmt.Errorf("%w: %d keys: want 1..%d (the current key first)", ErrInvalidKey, len(keys), MaxKeys)
	}
	for i, k := range keys {
		if !k.valid() {
			return fmt.Errorf("%w: keys[%d]: not a key from NewKey (id 1..65535, 16- or 32-byte secret)", ErrInvalidKey, i)
		}
		for _, o := range keys[:i] {
			if o.id == k.id {
				return fmt.Errorf("%w: keys[%d]: key id %d listed twice", ErrInvalidKey, i, k.id)
			}
		}
	}
	return nil
}
