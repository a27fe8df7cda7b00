package ring

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func newP(t *testing.T, capacity int) *Publication[uint64] {
	t.Helper()
	p, err := NewPublication[uint64](capacity)
	require.NoError(t, err)
	return p
}

func TestNewPublicationCapacity(t *testing.T) {
	for _, tc := range []struct {
		capacity int
		ok       bool
	}{{-1, false}, {0, false}, {1, true}, {6, false}, {8, true}, {1 << 12, true}} {
		t.Run("", func(t *testing.T) {
			p, err := NewPublication[string](tc.capacity)
			if !tc.ok {
				require.ErrorIs(t, err, ErrCapacity)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.capacity, p.Capacity())
			require.Equal(t, tc.capacity, p.Free())
			require.Equal(t, 0, p.Len())
		})
	}
}

func TestPublicationTryClaim(t *testing.T) {
	for _, tc := range []struct {
		name   string
		claims []int
		want   []uint64 // first seqno of each claim, 0 = refused
		free   int
	}{
		{"first seqno is 1", []int{1}, []uint64{1}, 7},
		{"consecutive", []int{3, 2, 1}, []uint64{1, 4, 6}, 2},
		{"exactly full", []int{4, 4}, []uint64{1, 5}, 0},
		{"not enough space", []int{6, 3, 2}, []uint64{1, 0, 7}, 0},
		{"zero and negative", []int{0, -2}, []uint64{0, 0}, 8},
		{"more than capacity", []int{9}, []uint64{0}, 8},
		{"whole ring", []int{8, 1}, []uint64{1, 0}, 0},
	} {
		for _, exclusive := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/exclusive=%v", tc.name, exclusive), func(t *testing.T) {
				p := newP(t, 8)
				for i, n := range tc.claims {
					claim := p.TryClaim
					if exclusive {
						claim = p.TryClaimExclusive
					}
					first, ok := claim(n)
					require.Equal(t, tc.want[i] != 0, ok, "claim %d", i)
					require.Equal(t, tc.want[i], first, "claim %d", i)
				}
				require.Equal(t, tc.free, p.Free())
				require.Equal(t, 8-tc.free, p.Len())
			})
		}
	}
}

// TestPublicationTryClaimUpTo: both kinds claim min(n, free), and nothing
// from a full ring or for n < 1.
func TestPublicationTryClaimUpTo(t *testing.T) {
	for _, exclusive := range []bool{false, true} {
		t.Run(fmt.Sprintf("exclusive=%v", exclusive), func(t *testing.T) {
			p := newP(t, 8)
			claim := p.TryClaimUpTo
			if exclusive {
				claim = p.TryClaimUpToExclusive
			}
			for _, c := range []struct {
				n, first, k int
				ok          bool
			}{{0, 0, 0, false}, {3, 1, 3, true}, {10, 4, 5, true}, {1, 0, 0, false}} {
				first, k, ok := claim(c.n)
				require.Equal(t, c.ok, ok, "claim %d", c.n)
				require.Equal(t, uint64(c.first), first, "claim %d", c.n)
				require.Equal(t, c.k, k, "claim %d", c.n)
			}
			for s := uint64(1); s <= 8; s++ {
				p.Commit(s, s)
			}
			dst := make([]uint64, 2)
			p.Poll(dst)
			first, k, ok := claim(5)
			require.True(t, ok)
			require.Equal(t, uint64(9), first)
			require.Equal(t, 2, k, "two slots polled free")
		})
	}
}

func TestPublicationCommitPoll(t *testing.T) {
	p := newP(t, 8)
	dst := make([]uint64, 8)

	first, n := p.Poll(dst)
	require.Equal(t, uint64(1), first, "empty")
	require.Equal(t, 0, n)

	a, _ := p.TryClaim(3) // 1..3
	b, _ := p.TryClaim(2) // 4..5
	p.Commit(b, val(b))
	p.Commit(b+1, val(b+1))
	first, n = p.Poll(dst)
	require.Equal(t, uint64(1), first)
	require.Equal(t, 0, n, "stops at uncommitted 1 even though 4,5 are in")

	p.Commit(a+2, val(a+2))
	p.Commit(a, val(a))
	first, n = p.Poll(dst)
	require.Equal(t, uint64(1), first)
	require.Equal(t, 1, n, "stops at uncommitted 2")
	require.Equal(t, val(1), dst[0])
	require.Equal(t, 4, p.Free(), "the polled slot is free again, 4 are still claimed")

	p.Commit(a+1, val(a+1))
	first, n = p.Poll(dst[:2])
	require.Equal(t, uint64(2), first)
	require.Equal(t, []uint64{val(2), val(3)}, dst[:n], "bounded by len(dst)")
	first, n = p.Poll(dst)
	require.Equal(t, uint64(4), first)
	require.Equal(t, []uint64{val(4), val(5)}, dst[:n])
	require.Equal(t, 8, p.Free())
	require.Equal(t, 0, p.Len())
}

func TestPublicationWrapAround(t *testing.T) {
	for _, capacity := range []int{1, 2, 8, 64} {
		p := newP(t, capacity)
		dst := make([]uint64, capacity)
		next := uint64(1)
		var polled uint64
		for round := range 50 * capacity {
			n := 1 + round%capacity
			first, ok := p.TryClaim(n)
			if !ok {
				require.Less(t, p.Free(), n)
			} else {
				require.Equal(t, next, first)
				for i := n - 1; i >= 0; i-- { // commit in reverse
					p.Commit(first+uint64(i), val(first+uint64(i)))
				}
				next += uint64(n)
			}
			f, got := p.Poll(dst[:1+round%len(dst)])
			require.Equal(t, polled+1, f)
			for i := range got {
				require.Equal(t, val(f+uint64(i)), dst[i])
			}
			polled += uint64(got)
		}
		for p.Len() > 0 {
			_, got := p.Poll(dst)
			polled += uint64(got)
		}
		require.Equal(t, next-1, polled, "capacity %d", capacity)
	}
}

func TestPublicationPollDropsReferences(t *testing.T) {
	p, err := NewPublication[*int](2)
	require.NoError(t, err)
	x := 1
	first, ok := p.TryClaim(1)
	require.True(t, ok)
	p.Commit(first, &x)
	dst := make([]*int, 1)
	_, n := p.Poll(dst)
	require.Equal(t, 1, n)
	require.Same(t, &x, dst[0])
	require.Nil(t, p.slots[1].v)
}
