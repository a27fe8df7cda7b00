package ebpf

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// ringPair is a producer and a consumer view of one ring over shared
// indexes, as the process and the kernel see it.
type ringPair struct {
	prod, cons, flags uint32
	entries           []uint64
	p, c              ring[uint64]
}

func newRingPair(size int, start uint32) *ringPair {
	rp := &ringPair{prod: start, cons: start, entries: make([]uint64, size)}
	rp.p = newRing(&rp.prod, &rp.cons, &rp.flags, rp.entries, true)
	rp.c = newRing(&rp.prod, &rp.cons, &rp.flags, rp.entries, false)
	return rp
}

// TestRingWraps: indexes run across 2^32 without losing or repeating an
// entry, in order.
func TestRingWraps(t *testing.T) {
	rp := newRingPair(8, math.MaxUint32-20)
	next, want := uint64(0), uint64(0)
	for round := 0; round < 50; round++ {
		idx, n := rp.p.reserve(uint32(round%7 + 1))
		for i := range n {
			*rp.p.at(idx + i) = next
			next++
		}
		rp.p.submit()
		require.LessOrEqual(t, rp.p.pending(), uint32(8))
		idx, n = rp.c.peek(uint32(round%5 + 1))
		for i := range n {
			require.Equal(t, want, *rp.c.at(idx + i))
			want++
		}
		rp.c.release(n)
	}
	require.Greater(t, want, uint64(40))
	require.Less(t, rp.prod, uint32(1000), "the producer index wrapped")
}

func TestRingFullAndEmpty(t *testing.T) {
	rp := newRingPair(4, 0)
	_, n := rp.c.peek(4)
	require.Zero(t, n, "empty")
	_, n = rp.p.reserve(10)
	require.Equal(t, uint32(4), n, "reserve stops at the ring's size")
	rp.p.submit()
	_, n = rp.p.reserve(1)
	require.Zero(t, n, "full")
	_, n = rp.c.peek(1)
	require.Equal(t, uint32(1), n)
	rp.c.release(1)
	_, n = rp.p.reserve(10)
	require.Equal(t, uint32(1), n, "one freed")
	rp.flags = ringNeedWakeup
	require.True(t, rp.p.needWakeup())
	rp.flags = 0
	require.False(t, rp.p.needWakeup())
}

// FuzzRing runs a producer and a consumer over a small ring from a
// fuzzed start index with fuzzed batch sizes, against a model: every
// entry comes out once, in order, and neither side ever sees more than
// the ring holds.
func FuzzRing(f *testing.F) {
	f.Add(uint32(0), uint8(2), []byte{3, 1, 4, 1, 5, 9, 2, 6})
	f.Add(uint32(math.MaxUint32-3), uint8(3), []byte{8, 8, 1, 0, 7})
	f.Add(uint32(1<<31-1), uint8(0), []byte{255, 0, 255, 0})
	f.Fuzz(func(t *testing.T, start uint32, logSize uint8, ops []byte) {
		size := 1 << (logSize % 6)
		rp := newRingPair(size, start)
		var next, want uint64
		for i, op := range ops {
			k := uint32(op >> 1)
			if op&1 == 0 {
				idx, n := rp.p.reserve(k)
				if n > k || uint64(n)+(next-want) > uint64(size) {
					t.Fatalf("op %d: reserved %d of %d with %d held in a ring of %d", i, n, k, next-want, size)
				}
				for j := range n {
					*rp.p.at(idx + j) = next
					next++
				}
				rp.p.submit()
				continue
			}
			idx, n := rp.c.peek(k)
			if n > k || uint64(n) > next-want {
				t.Fatalf("op %d: peeked %d of %d with %d held", i, n, k, next-want)
			}
			for j := range n {
				if got := *rp.c.at(idx + j); got != want {
					t.Fatalf("op %d: entry %d, want %d", i, got, want)
				}
				want++
			}
			rp.c.release(n)
		}
		if rp.p.pending() != uint32(next-want) {
			t.Fatalf("pending %d, want %d", rp.p.pending(), next-want)
		}
	})
}

func TestFramePool(t *testing.T) {
	p := newFramePool(2048, 4, 3) // frames 4, 5, 6
	var got []uint64
	for {
		a, ok := p.get()
		if !ok {
			break
		}
		got = append(got, a)
	}
	require.ElementsMatch(t, []uint64{4 * 2048, 5 * 2048, 6 * 2048}, got)
	p.put(5*2048 + 100) // an address inside a frame returns the frame
	a, ok := p.get()
	require.True(t, ok)
	require.Equal(t, uint64(5*2048), a)
}
