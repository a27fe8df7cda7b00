package auth

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

const testGroup = 0x5eed

var (
	alice = digest.Member{ID: 0xa11ce, Inc: 1}
	bob   = digest.Member{ID: 0xb0b, Inc: 7}
)

// key returns key id with a secret of n bytes filled with fill.
func key(t testing.TB, id uint16, n int, fill byte) Key {
	t.Helper()
	s := make([]byte, n)
	for i := range s {
		s[i] = fill + byte(i)
	}
	k, err := NewKey(id, s)
	require.NoError(t, err)
	return k
}

func ring(t testing.TB, keys ...Key) *Keyring {
	t.Helper()
	r, err := NewKeyring(testGroup, keys)
	require.NoError(t, err)
	return r
}

// bundle encodes a DATA datagram from sender with count messages of size
// bytes into a buffer with room for the trailer; it returns the buffer and
// the datagram's length.
func bundle(t testing.TB, from digest.Member, count, size int) ([]byte, int) {
	t.Helper()
	buf := make([]byte, wire.DataOverhead+count*(wire.MsgOverhead+size)+wire.TrailerLen)
	var w wire.DataWriter
	require.NoError(t, w.Reset(buf[:len(buf)-wire.TrailerLen], wire.Header{Group: testGroup, Sender: from}, from, 1))
	msg := make([]byte, size)
	for i := range count {
		msg[0] = byte(i)
		require.True(t, w.Append(msg))
	}
	d := w.Finish()
	return buf, len(d)
}

// at is a clock reading for the derivation budget.
func at(d time.Duration) time.Duration { return time.Hour + d }
