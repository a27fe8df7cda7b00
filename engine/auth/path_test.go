package auth

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nakcast/nakcast/wire"
)

// counterOf returns the nonce counter of sealed datagram d.
func counterOf(t testing.TB, d []byte) uint64 {
	t.Helper()
	sl, ok := wire.SplitSealed(d)
	require.True(t, ok)
	return wire.NonceCounter(sl.Nonce)
}

// TestPathsCountApart: a unicast datagram's counter has the path bit, a
// group one's has not, each from its path's count of the source; each path
// has its own replay window, so a unicast datagram far ahead of the group
// ones holds none of them back (nor the reverse), while a replay is
// refused on either path, and the path bit is covered by the tag.
func TestPathsCountApart(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			r := ring(t, key(t, 5, 32, 1))
			s := NewSealer(r, NewNonceSource(time.Unix(100, 0), 7), mode.encrypt)
			v := NewVerifier(r)
			buf, n := bundle(t, alice, 2, 30)
			g := sealOn(t, s, buf, n, PathGroup)
			u := sealOn(t, s, buf, n, PathUnicast)
			require.Zero(t, counterOf(t, g)&wire.NonceUnicast)
			require.Equal(t, counterOf(t, g), counterOf(t, u)&^wire.NonceUnicast, "a count of its own for each path")
			require.Equal(t, counterOf(t, g)+1, counterOf(t, sealOn(t, s, buf, n, PathGroup)), "the unicast seal took no group count")

			// Far more group datagrams than a window than holds, then the
			// unicast one sealed before them: still new on its path.
			for range 3 * WindowSize {
				require.Equal(t, OK, v.Open(sealOn(t, s, buf, n, PathGroup), at(0)))
			}
			replayU := bytes.Clone(u)
			require.Equal(t, OK, v.Open(u, at(0)))
			require.Equal(t, Replay, v.Open(bytes.Clone(replayU), at(0)))
			// And the reverse: a unicast datagram far ahead, then a group
			// one sealed before it.
			late := sealOn(t, s, buf, n, PathGroup)
			for range 3 * WindowSize {
				require.Equal(t, OK, v.Open(sealOn(t, s, buf, n, PathUnicast), at(0)))
			}
			replayLate := bytes.Clone(late)
			require.Equal(t, OK, v.Open(late, at(0)))
			require.Equal(t, Replay, v.Open(replayLate, at(0)))
			require.Equal(t, TooOld, v.Open(bytes.Clone(g), at(0)), "the first group datagram is 3 windows behind its path")

			// A unicast flood (repairs) between two group datagrams spreads
			// the group path's counts by nothing: the earlier one, overtaken
			// by the later, is still inside its window.
			early := sealOn(t, s, buf, n, PathGroup)
			for range 3 * WindowSize {
				sealOn(t, s, buf, n, PathUnicast)
			}
			require.Equal(t, OK, v.Open(sealOn(t, s, buf, n, PathGroup), at(0)))
			require.Equal(t, OK, v.Open(early, at(0)), "overtaken by one count of its path")

			// Moving a datagram to the other path breaks its tag.
			x := sealOn(t, s, buf, n, PathGroup)
			x[len(x)-wire.TagLen-1] ^= 0x80 // the counter's top bit
			require.Equal(t, BadTag, v.Open(x, at(0)))
		})
	}
}

// TestSealRefusesExhaustedCounts: a source whose count reached the path bit
// seals nothing (a count at or above it would repeat another path's
// counter).
func TestSealRefusesExhaustedCounts(t *testing.T) {
	r := ring(t, key(t, 1, 16, 1))
	src := &NonceSource{salt: 1}
	src.ctr[PathGroup].Store(wire.NonceUnicast - 1)
	src.ctr[PathUnicast].Store(wire.NonceUnicast - 1)
	buf, n := bundle(t, alice, 1, 8)
	for _, encrypt := range []bool{false, true} {
		s := NewSealer(r, src, encrypt)
		_, err := s.Sign(buf, n, PathGroup)
		require.ErrorIs(t, err, ErrCountersExhausted)
		_, err = s.Encrypt(make([]byte, n+wire.TrailerLen), buf[:n], PathUnicast)
		require.ErrorIs(t, err, ErrCountersExhausted)
	}
	src.ctr[PathUnicast].Store(wire.NonceUnicast - 2)
	_, err := NewSealer(r, src, false).Sign(buf, n, PathUnicast)
	require.NoError(t, err, "the last count below the bit still seals")
}

// socketModel is a receiver's two sockets as the UDP transport reads them
// (engine/transport, readGroupFirst): FIFO queues, the group one of
// bounded size (a full socket buffer drops), read in batches, the unicast
// socket first on every fourth call and otherwise the group socket alone.
type socketModel struct {
	group, unicast [][]byte
	groupCap       int
	calls          int
}

// read returns the next batch of at most max datagrams.
func (m *socketModel) read(max int) [][]byte {
	m.calls++
	var out [][]byte
	take := func(q *[][]byte) {
		k := min(max-len(out), len(*q))
		out = append(out, (*q)[:k]...)
		*q = (*q)[k:]
	}
	if m.calls%4 == 0 {
		take(&m.unicast)
	}
	take(&m.group)
	return out
}

// twoSocketRun is one run of TestWindowsAbsorbTwoSocketReordering: a
// sender streams group DATA and, every stabilityEvery group datagrams,
// unicasts a STABILITY to this receiver and to another member, sealing
// the unicasts on unicastPath; 30% of the group datagrams are lost before
// the receiver, whose group socket holds groupCap datagrams. The receiver
// reads in batches of 64 and keeps up, but now and then stalls
// (descheduled on a loaded machine) until its group socket is full. It
// returns the verifier's results by reason, every datagram it accepted and
// the verifier.
func twoSocketRun(t *testing.T, encrypt bool, unicastPath Path, seed uint64) ([NumReasons]int, [][]byte, *Verifier) {
	const (
		steps          = 320
		perStep        = 200 // group datagrams a step
		stabilityEvery = 150
		// 16 MiB of socket buffer (Config.RecvBuffer, 4 MiB by default) over
		// 1.3 KB datagrams' ~2.3 KB truesize: a full socket is ~10,000
		// counts of the group path, more than a window.
		groupCap     = 7200
		readsPerStep = 10 // 10 x 64 > perStep: the receiver catches up between stalls
		stallEvery   = 80
		stallSteps   = 56 // fills the group socket: 11,200 sealed, 30% lost
		loss         = 0.3
	)
	r := ring(t, key(t, 1, 32, 3))
	s := NewSealer(r, NewNonceSource(time.Unix(1_700_000_000, 0), 9), encrypt)
	v := NewVerifier(r)
	rng := rand.New(rand.NewPCG(seed, 1))
	data, n := bundle(t, alice, 2, 16)
	ctl, cn := bundle(t, alice, 1, 8)
	m := socketModel{groupCap: groupCap}
	var got [NumReasons]int
	var accepted [][]byte
	read := func() {
		for _, d := range m.read(64) {
			keep := bytes.Clone(d)
			res := v.Open(d, at(0))
			got[res]++
			if res == OK {
				accepted = append(accepted, keep)
			}
		}
	}
	sent := 0
	for step := range steps {
		for range perStep {
			d := sealOn(t, s, data, n, PathGroup)
			if rng.Float64() >= loss && len(m.group) < m.groupCap {
				m.group = append(m.group, d)
			}
			if sent++; sent%stabilityEvery == 0 {
				sealOn(t, s, ctl, cn, unicastPath) // to the other member
				m.unicast = append(m.unicast, sealOn(t, s, ctl, cn, unicastPath))
			}
		}
		if step%stallEvery < stallEvery-stallSteps {
			for range readsPerStep {
				read()
			}
		}
	}
	for len(m.group)+len(m.unicast) > 0 {
		read()
	}
	return got, accepted, v
}

// TestWindowsAbsorbTwoSocketReordering models what a keyed receiver saw in
// the namespace runs at 30% loss: the coordinator's unicast STABILITY,
// read from the unicast socket, overtook the thousands of group datagrams
// still queued in the group socket, and those were dropped as TooOld
// (reproduced first with the counters on one path, as the nonces were
// built before). A group socket can hold more counts than any window
// (its size is the user's), so with one counter space legitimate
// datagrams are refused; with a counter space and a window per path
// nothing legitimate is, and a replay of every accepted datagram still is.
func TestWindowsAbsorbTwoSocketReordering(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			for seed := range uint64(3) {
				old, _, _ := twoSocketRun(t, mode.encrypt, PathGroup, seed)
				require.Positive(t, old[TooOld], "seed %d: one counter space for both sockets drops legitimate datagrams", seed)

				got, accepted, v := twoSocketRun(t, mode.encrypt, PathUnicast, seed)
				require.Zero(t, got[TooOld], "seed %d", seed)
				require.Zero(t, got[Replay], "seed %d", seed)
				require.Equal(t, len(accepted), got[OK])
				require.Greater(t, len(accepted), 20000, "seed %d: the run delivered", seed)

				// Replays, in random order: none is accepted again.
				rng := rand.New(rand.NewPCG(seed, 2))
				for _, i := range rng.Perm(len(accepted)) {
					if res := v.Open(accepted[i], at(0)); res != Replay && res != TooOld {
						t.Fatalf("seed %d: replay of datagram %d: %v", seed, i, res)
					}
				}
			}
		})
	}
}
