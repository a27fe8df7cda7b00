package ring

import (
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRecordsCapacity(t *testing.T) {
	for _, c := range []int{0, 1, 32, 100, 1000} {
		_, err := NewRecords(c)
		require.ErrorIs(t, err, ErrCapacity, "capacity %d", c)
	}
	r, err := NewRecords(64)
	require.NoError(t, err)
	require.Equal(t, 64, r.Capacity())
	require.Equal(t, 24, r.MaxRecord())
	_, ok := r.Claim(25)
	require.False(t, ok, "above MaxRecord")
	_, ok = r.Claim(-1)
	require.False(t, ok)
}

// fillRecord writes record i's content: its number, then bytes derived
// from it.
func fillRecord(b []byte, i uint64) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], i)
	for k := range b {
		b[k] = n[k%8] ^ byte(k)
	}
}

// checkRecord reports whether b is record i of length n.
func checkRecord(b []byte, i uint64, n int) bool {
	if len(b) != n {
		return false
	}
	var n8 [8]byte
	binary.LittleEndian.PutUint64(n8[:], i)
	for k := range b {
		if b[k] != n8[k%8]^byte(k) {
			return false
		}
	}
	return true
}

// TestRecordsModel runs the ring on one goroutine against a FIFO model
// that tracks positions, padding included: random record sizes (empty,
// tiny, MaxRecord), claims published in batches, reads released in
// batches, so that records wrap around the buffer end with padding and a
// full ring refuses exactly when the model says it must.
func TestRecordsModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	r, err := NewRecords(256)
	require.NoError(t, err)
	c := uint64(r.Capacity())
	var sizes []int   // claimed, not read
	var ends []uint64 // each claimed record's end position, not read
	pending := 0      // claimed, not published
	next, read := uint64(0), uint64(0)
	tail, head, readEnd := uint64(0), uint64(0), uint64(0)
	for step := 0; step < 200_000; step++ {
		switch rng.IntN(3) {
		case 0: // claim
			n := []int{0, 1, 7, 8, 9, 31, r.MaxRecord()}[rng.IntN(7)]
			size := align8(uint64(recordHeader + n))
			start := tail
			if toEnd := c - tail%c; size > toEnd {
				start += toEnd
			}
			fits := start+size-head <= c
			b, ok := r.Claim(n)
			require.Equal(t, fits, ok, "claim of %d at tail %d head %d", n, tail, head)
			if !ok {
				continue
			}
			fillRecord(b, next)
			tail = start + size
			sizes = append(sizes, n)
			ends = append(ends, tail)
			next++
			pending++
		case 1:
			r.Publish()
			pending = 0
		case 2:
			for k := rng.IntN(4); k >= 0; k-- {
				b, ok := r.Next()
				if !ok {
					require.Equal(t, len(sizes), pending, "published records must be readable")
					break
				}
				require.True(t, checkRecord(b, read, sizes[0]), "record %d", read)
				readEnd = ends[0]
				sizes, ends = sizes[1:], ends[1:]
				read++
			}
			if rng.IntN(2) == 0 {
				r.Release()
				head = readEnd
				require.Equal(t, int(tail-head)-int(ptailUnpublished(r, tail, pending)), r.Len())
			}
		}
	}
	require.Greater(t, read, uint64(10_000))
}

// ptailUnpublished is how many of the bytes up to tail are claimed but not
// published (Len does not count them).
func ptailUnpublished(r *Records, tail uint64, pending int) uint64 {
	if pending == 0 {
		return 0
	}
	return tail - r.tail.Load()
}

// TestRecordsSPSCStress runs a producer and a consumer on two goroutines:
// every record arrives once, in order, intact.
func TestRecordsSPSCStress(t *testing.T) {
	total := uint64(stressCount)
	r, err := NewRecords(4096)
	require.NoError(t, err)
	size := func(i uint64) int { return int(i*7919) % (r.MaxRecord() / 4) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := uint64(0); i < total; {
			b, ok := r.Claim(size(i))
			if !ok {
				r.Publish()
				runtime.Gosched()
				continue
			}
			fillRecord(b, i)
			i++
			if i%16 == 0 {
				r.Publish()
			}
		}
		r.Publish()
	}()
	for i := uint64(0); i < total; {
		b, ok := r.Next()
		if !ok {
			r.Release()
			runtime.Gosched()
			continue
		}
		if !checkRecord(b, i, size(i)) {
			t.Fatalf("record %d: got %d bytes, want %d, content wrong or out of order", i, len(b), size(i))
		}
		i++
		if i%8 == 0 {
			r.Release()
		}
	}
	r.Release()
	<-done
	require.Zero(t, r.Len())
}

// TestRecordsZeroAllocs: claiming, publishing, reading and releasing
// allocate nothing.
func TestRecordsZeroAllocs(t *testing.T) {
	r, err := NewRecords(1024)
	require.NoError(t, err)
	i := uint64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		for k := 0; k < 4; k++ {
			b, ok := r.Claim(int(i % 100))
			if !ok {
				panic("full")
			}
			fillRecord(b, i)
			i++
		}
		r.Publish()
		for {
			if _, ok := r.Next(); !ok {
				break
			}
		}
		r.Release()
	})
	require.Zero(t, allocs)
}
