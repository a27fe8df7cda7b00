package wire

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPoolClasses(t *testing.T) {
	cases := []struct {
		name        string
		maxDatagram int
		get         int
		wantCap     int
	}{
		{"zero size", 65507, 0, 512},
		{"smallest", 65507, 512, 512},
		{"just above", 65507, 513, 1024},
		{"4k", 65507, 4096, 4096},
		{"top class is max datagram", 65507, 40000, 65507},
		{"max", 65507, 65507, 65507},
		{"power of two max", 8192, 8192, 8192},
		{"small max", 300, 100, 300},
		{"default max", 0, 65507, 65507},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := NewPool(c.maxDatagram, 0)
			b := p.Get(c.get)
			require.NotNil(t, b)
			require.Len(t, b.B, c.wantCap)
			require.Zero(t, b.N)
			require.Empty(t, b.Bytes())
			require.Equal(t, int32(1), b.Refs())
			b.Release()
		})
	}
	p := NewPool(1500, 0)
	require.Equal(t, 1500, p.MaxDatagram())
	require.Nil(t, p.Get(1501))
	require.Equal(t, uint64(1), p.Stats().Oversize)
}

func TestPoolRefcountAndReuse(t *testing.T) {
	p := NewPool(1500, 0)
	b := p.Get(1000)
	b.N = copy(b.B, "hello")
	require.Equal(t, []byte("hello"), b.Bytes())
	b.Retain(2)
	b.Retain(0) // no-op
	require.Equal(t, int32(3), b.Refs())
	b.Release()
	b.Release()
	st := p.Stats()
	require.Equal(t, int64(1024), st.Outstanding)
	require.Equal(t, int64(1), st.OutstandingBuffers)
	b.Release()
	st = p.Stats()
	// The first buffer back grows the empty free list: one allocation.
	require.Equal(t, PoolStats{Gets: 1, Allocs: 1, Releases: 1, ListGrowth: 1, Idle: 1024}, st)

	b2 := p.Get(600)
	require.Same(t, b, b2, "reused from the free list")
	require.Zero(t, b2.N)
	require.Equal(t, int32(1), b2.Refs())
	b2.Release()
	st = p.Stats()
	require.Equal(t, uint64(1), st.Allocs)
	require.Equal(t, uint64(2), st.Gets)
}

func TestPoolDoubleReleasePanics(t *testing.T) {
	p := NewPool(1500, 0)
	b := p.Get(100)
	b.Release()
	require.PanicsWithValue(t, "wire: Buffer released more often than retained", b.Release)
	require.PanicsWithValue(t, "wire: Retain of a released Buffer", func() { b.Retain(1) })

	u := NewBuffer(make([]byte, 10, 20))
	require.Len(t, u.B, 20)
	require.Equal(t, 10, u.N)
	u.Release()
	require.Panics(t, u.Release)
}

func TestPoolBudget(t *testing.T) {
	const budget = 10 * 1024
	p := NewPool(4096, budget)
	var held []*Buffer
	for {
		b := p.Get(1024)
		if b == nil {
			break
		}
		held = append(held, b)
	}
	require.Len(t, held, 10)
	st := p.Stats()
	require.Equal(t, int64(budget), st.Outstanding)
	require.Equal(t, uint64(1), st.OverBudget)
	require.Nil(t, p.Get(512), "no room for any class")

	held[0].Release()
	require.Nil(t, p.Get(2048), "1 KiB free is not enough for 2 KiB")
	b := p.Get(1000)
	require.NotNil(t, b)
	held[0] = b
	for _, b := range held {
		b.Release()
	}
	st = p.Stats()
	require.Zero(t, st.Outstanding)
	require.Equal(t, int64(budget), st.Idle)
	require.Zero(t, st.Discards)

	// Idle memory is bounded by the budget too: fill it with 4 KiB buffers
	// (the 1 KiB ones stay idle), then release them.
	var big []*Buffer
	for b := p.Get(4096); b != nil; b = p.Get(4096) {
		big = append(big, b)
	}
	require.Len(t, big, 2)
	for _, b := range big {
		b.Release()
	}
	st = p.Stats()
	require.LessOrEqual(t, st.Idle, int64(budget))
	require.Equal(t, uint64(2), st.Discards)
}

// TestPoolConcurrent: goroutines get, share (Retain) and release buffers;
// every byte comes back and no buffer is handed to two owners at once.
func TestPoolConcurrent(t *testing.T) {
	n := poolOps
	p := NewPool(9000, 64*1024)
	const workers = 4
	shared := make(chan *Buffer, 64)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range n {
				b := p.Get(r.IntN(9000) + 1)
				if b == nil {
					continue
				}
				// Owner check: the stamp must survive until we release.
				stamp := byte(w*31 + i)
				b.N = copy(b.B, []byte{stamp, stamp, stamp})
				if r.IntN(4) == 0 {
					b.Retain(1)
					select {
					case shared <- b:
					default:
						b.Release()
					}
				}
				if got := b.Bytes(); got[0] != stamp || got[2] != stamp {
					t.Errorf("buffer overwritten while owned")
					return
				}
				b.Release()
				select {
				case s := <-shared:
					s.Release()
				default:
				}
			}
		}()
	}
	wg.Wait()
	close(shared)
	for b := range shared {
		b.Release()
	}
	st := p.Stats()
	require.Zero(t, st.Outstanding)
	require.Zero(t, st.OutstandingBuffers)
	require.Equal(t, st.Gets, st.Releases)
	require.LessOrEqual(t, st.Idle, int64(64*1024))
}
