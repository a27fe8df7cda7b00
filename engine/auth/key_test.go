package auth

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewKeyRefusesBadKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   uint16
		n    int
	}{{"id 0", 0, 32}, {"empty", 1, 0}, {"15 bytes", 1, 15}, {"24 bytes", 1, 24}, {"33 bytes", 1, 33}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewKey(tc.id, make([]byte, tc.n))
			require.ErrorIs(t, err, ErrInvalidKey)
		})
	}
	for _, n := range []int{16, 32} {
		k, err := NewKey(9, make([]byte, n))
		require.NoError(t, err)
		require.Equal(t, uint16(9), k.ID())
	}
}

func TestCheckKeys(t *testing.T) {
	a, b := key(t, 1, 32, 1), key(t, 2, 16, 2)
	require.NoError(t, CheckKeys([]Key{a, b}))
	require.ErrorIs(t, CheckKeys(nil), ErrInvalidKey)
	require.ErrorIs(t, CheckKeys([]Key{a, a}), ErrInvalidKey, "duplicate id")
	require.ErrorIs(t, CheckKeys([]Key{{}}), ErrInvalidKey, "zero Key")
	require.ErrorIs(t, CheckKeys([]Key{a, b, key(t, 3, 16, 3), key(t, 4, 16, 4), key(t, 5, 16, 5)}), ErrInvalidKey, "more than MaxKeys")
}

// TestKeyNeverPrinted checks every way a Key (alone or inside a struct)
// can reach a log, an error or an encoder: none shows the secret.
func TestKeyNeverPrinted(t *testing.T) {
	k := key(t, 3, 32, 0xc0)
	secret := k.secret
	type cfg struct {
		Keys []Key
		Key  Key
	}
	c := cfg{Keys: []Key{k}, Key: k}
	var out []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%X", "%q", "%d"} {
		out = append(out, fmt.Sprintf(verb, k), fmt.Sprintf(verb, c), fmt.Sprintf(verb, &c))
	}
	j, err := json.Marshal(c)
	require.NoError(t, err)
	out = append(out, string(j))
	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("x", "key", k, "cfg", c)
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "key", k, "cfg", c)
	out = append(out, logs.String())
	for _, s := range out {
		require.NotContains(t, strings.ToLower(s), hex.EncodeToString(secret), s)
		require.NotContains(t, s, fmt.Sprint([]byte(secret)), s)
		require.NotContains(t, s, string(secret), s)
	}
	require.Equal(t, "key 3 (AES-256)", k.String())
}

func TestParseKeysRoundTrip(t *testing.T) {
	keys := []Key{key(t, 7, 32, 1), key(t, 2, 16, 9)}
	var b bytes.Buffer
	require.NoError(t, WriteKeys(&b, keys))
	got, err := ParseKeys(strings.NewReader("# rotation in progress\n\n" + b.String()))
	require.NoError(t, err)
	require.Len(t, got, 2)
	for i := range keys {
		require.Equal(t, keys[i].id, got[i].id)
		require.Equal(t, keys[i].secret, got[i].secret)
	}
}

func TestParseKeysErrorsHideTheSecret(t *testing.T) {
	secret := strings.Repeat("ab", 20) // 20 bytes: a bad length
	for _, in := range []string{
		"", "# only a comment\n", "1\n", "x " + secret + "\n", "0 " + secret + "\n",
		"1 " + secret + "\n", "1 zz" + secret + "\n", "1 " + strings.Repeat("ab", 32) + "\n1 " + strings.Repeat("cd", 32) + "\n",
	} {
		_, err := ParseKeys(strings.NewReader(in))
		require.ErrorIs(t, err, ErrInvalidKey, "%q", in)
		require.NotContains(t, err.Error(), secret)
	}
}
