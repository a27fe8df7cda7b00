package auth

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

// seal signs (or encrypts) the datagram buf[:n] for the group with s and
// returns the sealed bytes in a buffer of their own.
func seal(t testing.TB, s *Sealer, buf []byte, n int) []byte {
	t.Helper()
	return sealOn(t, s, buf, n, PathGroup)
}

// sealOn is seal on path p.
func sealOn(t testing.TB, s *Sealer, buf []byte, n int, p Path) []byte {
	t.Helper()
	if s.Encrypts() {
		d, err := s.Encrypt(make([]byte, n+wire.TrailerLen), buf[:n], p)
		require.NoError(t, err)
		return d
	}
	d, err := s.Sign(buf, n, p)
	require.NoError(t, err)
	return bytes.Clone(d)
}

var modes = []struct {
	name    string
	encrypt bool
}{{"sign", false}, {"encrypt", true}}

func TestSealOpenRoundTrip(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			r := ring(t, key(t, 5, 32, 1))
			s := NewSealer(r, NewNonceSource(time.Unix(100, 0), 7), mode.encrypt)
			v := NewVerifier(r)
			buf, n := bundle(t, alice, 10, 100)
			plain := bytes.Clone(buf[:n])
			d := seal(t, s, buf, n)
			require.Len(t, d, n+wire.TrailerLen)
			require.Equal(t, wire.FlagAuth, d[3]&wire.FlagAuth)
			require.Equal(t, uint16(5), wire.HeaderKeyID(d))
			if mode.encrypt {
				require.Equal(t, wire.FlagEncrypted, d[3]&wire.FlagEncrypted)
				require.NotEqual(t, plain[wire.HeaderLen:], d[wire.HeaderLen:n], "body encrypted")
				require.Equal(t, plain, buf[:n], "source untouched")
			}
			replay := bytes.Clone(d)
			require.Equal(t, OK, v.Open(d, at(0)))
			require.Equal(t, plain[wire.HeaderLen:], d[wire.HeaderLen:n], "plaintext body after Open")
			require.Zero(t, d[3]&wire.FlagEncrypted, "flag cleared once decrypted")
			h, body, err := wire.DecodeHeader(d, testGroup)
			require.NoError(t, err)
			data, err := wire.DecodeData(h, body)
			require.NoError(t, err)
			require.Equal(t, 10, int(data.Count))
			require.Equal(t, Replay, v.Open(replay, at(0)))
			require.Equal(t, 1, v.Stats().Senders)
		})
	}
}

// TestOpenRefusesTampering flips every bit of a sealed datagram (header,
// body, nonce, tag) and truncates it at every length: every variant is
// refused, and the verifier keeps no state for it.
func TestOpenRefusesTampering(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			r := ring(t, key(t, 5, 16, 1))
			s := NewSealer(r, NewNonceSource(time.Unix(100, 0), 7), mode.encrypt)
			buf, n := bundle(t, alice, 3, 20)
			d := seal(t, s, buf, n)
			for i := range 8 * len(d) {
				v := NewVerifier(r)
				x := bytes.Clone(d)
				x[i/8] ^= 1 << (i % 8)
				got := v.Open(x, at(0))
				require.NotEqual(t, OK, got, "bit %d", i)
				require.Zero(t, v.Stats().Senders, "bit %d", i)
			}
			for l := range len(d) {
				v := NewVerifier(r)
				require.NotEqual(t, OK, v.Open(bytes.Clone(d[:l]), at(0)), "length %d", l)
				require.Zero(t, v.Stats().Senders)
			}
			require.Equal(t, OK, NewVerifier(r).Open(bytes.Clone(d), at(0)), "the original still verifies")
		})
	}
}

func TestOpenReasons(t *testing.T) {
	k5 := key(t, 5, 32, 1)
	r := ring(t, k5)
	s := NewSealer(r, NewNonceSource(time.Unix(100, 0), 7), false)
	buf, n := bundle(t, alice, 1, 10)
	t.Run("no trailer", func(t *testing.T) {
		require.Equal(t, NoTrailer, NewVerifier(r).Open(bytes.Clone(buf[:n]), at(0)))
	})
	t.Run("unknown key id", func(t *testing.T) {
		other := NewSealer(ring(t, key(t, 6, 32, 1)), ProcessNonces(), false)
		require.Equal(t, UnknownKey, NewVerifier(r).Open(seal(t, other, buf, n), at(0)))
	})
	t.Run("same id, other secret", func(t *testing.T) {
		other := NewSealer(ring(t, key(t, 5, 32, 2)), ProcessNonces(), false)
		require.Equal(t, BadTag, NewVerifier(r).Open(seal(t, other, buf, n), at(0)))
	})
	t.Run("another group", func(t *testing.T) {
		g2, err := NewKeyring(testGroup+1, []Key{k5})
		require.NoError(t, err)
		require.Equal(t, BadTag, NewVerifier(r).Open(seal(t, NewSealer(g2, ProcessNonces(), false), buf, n), at(0)))
	})
	t.Run("too old", func(t *testing.T) {
		v := NewVerifier(r)
		old := seal(t, s, buf, n)
		for range WindowSize {
			require.Equal(t, OK, v.Open(seal(t, s, buf, n), at(0)))
		}
		require.Equal(t, TooOld, v.Open(old, at(0)))
	})
	t.Run("sender forged in the header", func(t *testing.T) {
		d := seal(t, s, buf, n)
		copy(d[8:], []byte{1, 2, 3})
		require.Equal(t, BadTag, NewVerifier(r).Open(d, at(0)))
	})
}

// TestRotationOverlap runs the three steps of a rotation between a sender
// and a receiver: old datagrams verify during the overlap and fail with
// UnknownKey after it.
func TestRotationOverlap(t *testing.T) {
	old, nw := key(t, 1, 32, 1), key(t, 2, 32, 2)
	nonces := NewNonceSource(time.Unix(100, 0), 7)
	s := NewSealer(ring(t, old), nonces, false)
	v := NewVerifier(ring(t, old))
	buf, n := bundle(t, alice, 1, 10)
	underOld := seal(t, s, buf, n)
	lateOld := seal(t, s, buf, n)
	require.Equal(t, OK, v.Open(underOld, at(0)))

	// Step 1: the receiver learns the new key; the sender still seals under old.
	v.SetKeyring(ring(t, old, nw))
	require.Equal(t, OK, v.Open(seal(t, s, buf, n), at(0)))
	// Step 2: the sender moves to the new key; both verify.
	s.SetKeyring(ring(t, nw, old))
	underNew := seal(t, s, buf, n)
	require.Equal(t, uint16(2), wire.HeaderKeyID(underNew), "the sender seals under the current key")
	require.Equal(t, OK, v.Open(underNew, at(0)))
	v.SetKeyring(ring(t, nw, old))
	require.Equal(t, OK, v.Open(bytes.Clone(lateOld), at(0)), "an old-key datagram in flight during the overlap")
	// Step 3: old retired.
	v.SetKeyring(ring(t, nw))
	require.Equal(t, UnknownKey, v.Open(seal(t, NewSealer(ring(t, old), nonces, false), buf, n), at(0)))
	require.Equal(t, OK, v.Open(seal(t, s, buf, n), at(0)))
}

// TestNoncesNeverRepeat seals under every combination that shares a
// subkey or a source: incarnations of one member, two members, rotation,
// and restarts of a static member (same member and incarnation) in new
// processes, on both paths. No (subkey, nonce) pair repeats.
func TestNoncesNeverRepeat(t *testing.T) {
	r := ring(t, key(t, 1, 32, 1))
	type use struct {
		m     digest.Member
		nonce [wire.NonceLen]byte
	}
	seen := map[use]bool{}
	record := func(d []byte) {
		sl, _ := wire.SplitSealed(d)
		u := use{m: wire.HeaderSender(d), nonce: [wire.NonceLen]byte(sl.Nonce)}
		require.False(t, seen[u], "nonce reused by %v", u.m)
		seen[u] = true
	}
	start := time.Unix(1_700_000_000, 0)
	// Three runs of the same static member, each a new process started
	// after the last ended (at least 1ms later), each sealing 1000
	// datagrams (the clock advances 1us a datagram, far slower than a
	// counter step of 1ns).
	for run := range 3 {
		src := NewNonceSource(start, 42) // the same salt: only the counter protects
		s := NewSealer(r, src, false)
		for i := range 1000 {
			m := digest.Member{ID: 1, Inc: uint32(1 + i%2)} // gms incarnations share the source too
			buf, n := bundle(t, m, 1, 8)
			// Both paths: their counts overlap, their counters do not.
			record(sealOn(t, s, buf, n, Path(i%3/2)))
		}
		start = start.Add(1000*time.Microsecond + time.Millisecond)
		_ = run
	}
	require.Len(t, seen, 3000)
}

// TestRestartedStaticMemberIsAccepted: a receiver that heard a static
// member keeps accepting it after the member restarts with the same Self
// (its counters start higher), and a restart whose clock went back is
// refused as TooOld, not accepted as a replay.
func TestRestartedStaticMemberIsAccepted(t *testing.T) {
	r := ring(t, key(t, 1, 32, 1))
	v := NewVerifier(r)
	buf, n := bundle(t, alice, 1, 8)
	t0 := time.Unix(1_700_000_000, 0)
	first := NewSealer(r, NewNonceSource(t0, 1), false)
	for range 10 {
		require.Equal(t, OK, v.Open(seal(t, first, buf, n), at(0)))
	}
	again := NewSealer(r, NewNonceSource(t0.Add(time.Second), 2), false)
	require.Equal(t, OK, v.Open(seal(t, again, buf, n), at(0)))
	back := NewSealer(r, NewNonceSource(t0.Add(-time.Second), 3), false)
	require.Equal(t, TooOld, v.Open(seal(t, back, buf, n), at(0)))
}

func TestProcessNoncesShared(t *testing.T) {
	a, b := ProcessNonces(), ProcessNonces()
	require.Same(t, a, b)
	x, y := a.Next(PathGroup), a.Next(PathGroup)
	require.Greater(t, y, x)
	require.Greater(t, x, uint64(time.Unix(1_600_000_000, 0).UnixNano()), "starts at the wall clock")
}

// TestDerivationBudget: forgeries naming ever new senders get a bounded
// number of subkey derivations; known senders are never throttled.
func TestDerivationBudget(t *testing.T) {
	r := ring(t, key(t, 1, 32, 1))
	v := NewVerifier(r)
	s := NewSealer(r, NewNonceSource(time.Unix(100, 0), 7), false)
	buf, n := bundle(t, alice, 1, 8)
	require.Equal(t, OK, v.Open(seal(t, s, buf, n), at(0)))
	forged := seal(t, s, buf, n)
	forged[len(forged)-1] ^= 1
	throttled := 0
	for i := range 1000 {
		x := bytes.Clone(forged)
		copy(x[8:], []byte{byte(i), byte(i >> 8), 0xee})
		if v.Open(x, at(0)) == Throttled {
			throttled++
		}
	}
	require.Equal(t, 1000-DeriveBurst+1, throttled, "the burst, less the legitimate sender's derivation")
	require.Equal(t, OK, v.Open(seal(t, s, buf, n), at(0)), "a known sender is not throttled")
	require.Equal(t, uint64(DeriveBurst), v.Stats().Derived)
	require.Equal(t, 1, v.Stats().Senders, "forgeries leave no state")
	// The budget refills on the clock.
	other, m := bundle(t, bob, 1, 8)
	require.Equal(t, Throttled, v.Open(seal(t, s, other, m), at(0)))
	require.Equal(t, OK, v.Open(seal(t, s, other, m), at(time.Millisecond)))
}

func TestVerifierForgetsLeastRecentlyHeard(t *testing.T) {
	r := ring(t, key(t, 1, 16, 1))
	v := NewVerifier(r)
	s := NewSealer(r, NewNonceSource(time.Unix(100, 0), 7), false)
	now := at(0)
	for i := range MaxSenders + 10 {
		buf, n := bundle(t, digest.Member{ID: uint64(i + 1), Inc: 1}, 1, 8)
		now += time.Millisecond // keep the derivation budget full
		require.Equal(t, OK, v.Open(seal(t, s, buf, n), now))
	}
	st := v.Stats()
	require.Equal(t, MaxSenders, st.Senders)
	require.Equal(t, uint64(10), st.Forgotten)
}

func TestSealShortBuffers(t *testing.T) {
	r := ring(t, key(t, 1, 16, 1))
	s := NewSealer(r, ProcessNonces(), false)
	buf, n := bundle(t, alice, 1, 8)
	_, err := s.Sign(buf[:n+wire.TrailerLen-1], n, PathGroup)
	require.ErrorIs(t, err, ErrShortBuffer)
	_, err = s.Sign(buf, wire.HeaderLen-1, PathGroup)
	require.ErrorIs(t, err, ErrShortBuffer)
	_, err = s.Encrypt(make([]byte, n+wire.TrailerLen-1), buf[:n], PathGroup)
	require.ErrorIs(t, err, ErrShortBuffer)
}

// TestSealOpenDoNotAllocate: with the subkeys derived, sealing and
// verifying a datagram allocate nothing, in both modes, on both paths.
func TestSealOpenDoNotAllocate(t *testing.T) {
	r := ring(t, key(t, 1, 32, 1))
	buf, n := bundle(t, alice, 100, 600)
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			s := NewSealer(r, NewNonceSource(time.Unix(100, 0), 7), mode.encrypt)
			v := NewVerifier(r)
			out := make([]byte, n+wire.TrailerLen)
			var i int
			sealOpen := func() {
				var d []byte
				var err error
				p := Path(i % int(numPaths))
				i++
				if mode.encrypt {
					d, err = s.Encrypt(out, buf[:n], p)
				} else {
					d, err = s.Sign(buf, n, p)
				}
				if err != nil || v.Open(d, at(0)) != OK {
					t.Fatal("seal/open failed")
				}
			}
			sealOpen() // derive the subkeys
			require.Zero(t, testing.AllocsPerRun(200, sealOpen), "both paths")
		})
	}
}
