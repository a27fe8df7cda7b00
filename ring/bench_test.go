package ring

import (
	"math"
	"runtime"
	"sync"
	"testing"
)

// The benchmarks put each ring beside a mutex+map baseline with the same
// semantics (retention until purge, Full beyond capacity, gaps, claims), as
// sub-benchmarks ".../ring" and ".../mutexmap", so one run shows the ratio.
// One op is one message: ns/op is per message.

const benchCapacity = 4096

// mapWindow is the baseline receive window: a map under a mutex.
type mapWindow[T any] struct {
	mu                       sync.Mutex
	capacity                 uint64
	low, delivered, received uint64
	m                        map[uint64]T
}

func newMapWindow[T any](capacity int) *mapWindow[T] {
	return &mapWindow[T]{capacity: uint64(capacity), m: make(map[uint64]T, capacity)}
}

func (w *mapWindow[T]) add(seq uint64, v T) AddResult {
	if seq <= w.delivered {
		return Old
	}
	if seq-w.low > w.capacity {
		return Full
	}
	if _, ok := w.m[seq]; ok {
		return Duplicate
	}
	w.m[seq] = v
	w.received = max(w.received, seq)
	return Added
}

func (w *mapWindow[T]) Add(seq uint64, v T) AddResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.add(seq, v)
}

func (w *mapWindow[T]) AddRun(first uint64, vals []T) RunResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	var r RunResult
	for i, v := range vals {
		switch w.add(first+uint64(i), v) {
		case Added:
			r.Added++
		case Duplicate:
			r.Duplicate++
		case Old:
			r.Old++
		case Full:
			r.Full = true
			return r
		}
	}
	return r
}

func (w *mapWindow[T]) Remove() (uint64, T, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	v, ok := w.m[w.delivered+1]
	if !ok {
		return 0, v, false
	}
	w.delivered++
	return w.delivered, v, true
}

func (w *mapWindow[T]) RemoveBatch(dst []T) (uint64, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	first := w.delivered + 1
	n := 0
	for n < len(dst) {
		v, ok := w.m[w.delivered+1]
		if !ok {
			break
		}
		dst[n] = v
		n++
		w.delivered++
	}
	return first, n
}

func (w *mapWindow[T]) Purge(upto uint64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	limit := min(upto, w.delivered)
	n := 0
	for s := w.low + 1; s <= limit; s++ {
		if _, ok := w.m[s]; ok {
			delete(w.m, s)
			n++
		}
	}
	w.low = max(w.low, limit)
	return n
}

func (w *mapWindow[T]) NextGap(after uint64) (Range, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for s := max(after, w.delivered) + 1; s <= w.received; s++ {
		if _, ok := w.m[s]; ok {
			continue
		}
		to := s
		for to < w.received {
			if _, ok := w.m[to+1]; ok {
				break
			}
			to++
		}
		return Range{From: s, To: to}, true
	}
	return Range{}, false
}

func (w *mapWindow[T]) Delivered() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.delivered
}

// mapPublication is the baseline publication: a map under a mutex.
type mapPublication[T any] struct {
	mu         sync.Mutex
	capacity   uint64
	tail, head uint64
	m          map[uint64]T
}

func newMapPublication[T any](capacity int) *mapPublication[T] {
	return &mapPublication[T]{capacity: uint64(capacity), m: make(map[uint64]T, capacity)}
}

func (p *mapPublication[T]) TryClaim(n int) (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tail+uint64(n)-p.head > p.capacity {
		return 0, false
	}
	first := p.tail + 1
	p.tail += uint64(n)
	return first, true
}

func (p *mapPublication[T]) Commit(seq uint64, v T) {
	p.mu.Lock()
	p.m[seq] = v
	p.mu.Unlock()
}

func (p *mapPublication[T]) Poll(dst []T) (uint64, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := p.head + 1
	n := 0
	for n < len(dst) {
		v, ok := p.m[p.head+1]
		if !ok {
			break
		}
		delete(p.m, p.head+1)
		dst[n] = v
		n++
		p.head++
	}
	return first, n
}

// msg is the benchmark value: what a window holds per message in nakack
// (a buffer reference and a position).
type msg struct {
	buf *[64]byte
	off int
}

var benchBuf = new([64]byte)

func reportMsgs(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mmsgs/s")
}

// BenchmarkAddRemove: in-order Add then Remove of each message, purging
// every 64 messages.
func BenchmarkAddRemove(b *testing.B) {
	b.Run("ring", func(b *testing.B) {
		w, _ := NewWindow[msg](benchCapacity, 0)
		b.ReportAllocs()
		for i := 1; i <= b.N; i++ {
			seq := uint64(i)
			w.Add(seq, msg{benchBuf, i})
			if _, _, ok := w.Remove(); !ok {
				b.Fatal("remove")
			}
			if i&63 == 0 {
				w.Purge(seq, nil)
			}
		}
		reportMsgs(b)
	})
	b.Run("mutexmap", func(b *testing.B) {
		w := newMapWindow[msg](benchCapacity)
		b.ReportAllocs()
		for i := 1; i <= b.N; i++ {
			seq := uint64(i)
			w.Add(seq, msg{benchBuf, i})
			if _, _, ok := w.Remove(); !ok {
				b.Fatal("remove")
			}
			if i&63 == 0 {
				w.Purge(seq)
			}
		}
		reportMsgs(b)
	})
}

// BenchmarkAddRunRemoveBatch: bundles of 16 messages inserted as one run and
// delivered as one batch, purging every 64 messages.
func BenchmarkAddRunRemoveBatch(b *testing.B) {
	const bundle = 16
	run := make([]msg, bundle)
	dst := make([]msg, bundle)
	for i := range run {
		run[i] = msg{benchBuf, i}
	}
	b.Run("ring", func(b *testing.B) {
		w, _ := NewWindow[msg](benchCapacity, 0)
		b.ReportAllocs()
		for seq := uint64(1); seq <= uint64(b.N); seq += bundle {
			w.AddRun(seq, run)
			w.RemoveBatch(dst)
			if seq&63 == 1 {
				w.Purge(seq-1, nil)
			}
		}
		reportMsgs(b)
	})
	b.Run("mutexmap", func(b *testing.B) {
		w := newMapWindow[msg](benchCapacity)
		b.ReportAllocs()
		for seq := uint64(1); seq <= uint64(b.N); seq += bundle {
			w.AddRun(seq, run)
			w.RemoveBatch(dst)
			if seq&63 == 1 {
				w.Purge(seq - 1)
			}
		}
		reportMsgs(b)
	})
}

// BenchmarkAddGaps: in-order arrival with 1% of the messages missing; each
// gap is found by a gap scan (the NAK) and repaired 16 messages later, when
// delivery resumes.
func BenchmarkAddGaps(b *testing.B) {
	const (
		every = 100 // one message in 100 is missing
		delay = 16  // repaired this many messages later
	)
	b.Run("ring", func(b *testing.B) {
		w, _ := NewWindow[msg](benchCapacity, 0)
		b.ReportAllocs()
		var hole uint64
		for i := 1; i <= b.N; i++ {
			seq := uint64(i)
			if i%every == 0 {
				hole = seq // lost on the way
			} else {
				w.Add(seq, msg{benchBuf, i})
			}
			if hole != 0 && seq-hole == delay {
				if g, ok := w.NextGap(0); !ok || g.From != hole {
					b.Fatal("gap", g, hole)
				}
				w.Add(hole, msg{benchBuf, int(hole)})
				hole = 0
			}
			for {
				if _, _, ok := w.Remove(); !ok {
					break
				}
			}
			if i&63 == 0 {
				w.Purge(seq, nil)
			}
		}
		reportMsgs(b)
	})
	b.Run("mutexmap", func(b *testing.B) {
		w := newMapWindow[msg](benchCapacity)
		b.ReportAllocs()
		var hole uint64
		for i := 1; i <= b.N; i++ {
			seq := uint64(i)
			if i%every == 0 {
				hole = seq
			} else {
				w.Add(seq, msg{benchBuf, i})
			}
			if hole != 0 && seq-hole == delay {
				if g, ok := w.NextGap(0); !ok || g.From != hole {
					b.Fatal("gap", g, hole)
				}
				w.Add(hole, msg{benchBuf, int(hole)})
				hole = 0
			}
			for {
				if _, _, ok := w.Remove(); !ok {
					break
				}
			}
			if i&63 == 0 {
				w.Purge(seq)
			}
		}
		reportMsgs(b)
	})
}

// BenchmarkSPSC: a producer goroutine adds messages in order (purging what
// was delivered when the window is full) while the benchmark goroutine
// delivers them in batches of up to 64.
func BenchmarkSPSC(b *testing.B) {
	b.Run("ring", func(b *testing.B) {
		w, _ := NewWindow[msg](benchCapacity, 0)
		n := uint64(b.N)
		b.ReportAllocs()
		var wg sync.WaitGroup
		wg.Go(func() {
			for seq := uint64(1); seq <= n; seq++ {
				for w.Add(seq, msg{benchBuf, int(seq)}) == Full {
					if w.Purge(math.MaxUint64, nil) == 0 {
						runtime.Gosched()
					}
				}
			}
		})
		dst := make([]msg, 64)
		for got := uint64(0); got < n; {
			_, k := w.RemoveBatch(dst)
			if k == 0 {
				runtime.Gosched()
			}
			got += uint64(k)
		}
		wg.Wait()
		reportMsgs(b)
	})
	b.Run("mutexmap", func(b *testing.B) {
		w := newMapWindow[msg](benchCapacity)
		n := uint64(b.N)
		b.ReportAllocs()
		var wg sync.WaitGroup
		wg.Go(func() {
			for seq := uint64(1); seq <= n; seq++ {
				for w.Add(seq, msg{benchBuf, int(seq)}) == Full {
					if w.Purge(math.MaxUint64) == 0 {
						runtime.Gosched()
					}
				}
			}
		})
		dst := make([]msg, 64)
		for got := uint64(0); got < n; {
			_, k := w.RemoveBatch(dst)
			if k == 0 {
				runtime.Gosched()
			}
			got += uint64(k)
		}
		wg.Wait()
		reportMsgs(b)
	})
}

// BenchmarkMPSC: 4 producer goroutines each claim one seqno at a time and
// commit it; the benchmark goroutine polls batches of up to 64.
func BenchmarkMPSC(b *testing.B) {
	const producers = 4
	type publication interface {
		TryClaim(n int) (uint64, bool)
		Commit(seq uint64, v msg)
		Poll(dst []msg) (uint64, int)
	}
	run := func(b *testing.B, p publication) {
		per := b.N/producers + 1
		total := uint64(per * producers)
		b.ReportAllocs()
		var wg sync.WaitGroup
		for range producers {
			wg.Go(func() {
				for range per {
					seq, ok := p.TryClaim(1)
					for !ok {
						runtime.Gosched()
						seq, ok = p.TryClaim(1)
					}
					p.Commit(seq, msg{benchBuf, int(seq)})
				}
			})
		}
		dst := make([]msg, 64)
		for got := uint64(0); got < total; {
			_, k := p.Poll(dst)
			if k == 0 {
				runtime.Gosched()
			}
			got += uint64(k)
		}
		wg.Wait()
		reportMsgs(b)
	}
	b.Run("ring", func(b *testing.B) {
		p, _ := NewPublication[msg](benchCapacity)
		run(b, p)
	})
	b.Run("mutexmap", func(b *testing.B) {
		run(b, newMapPublication[msg](benchCapacity))
	})
}

// BenchmarkPublication: the engine's send path on the publication ring,
// one message a claim, with TryClaim and with TryClaimExclusive. "spsc":
// one producer goroutine claims and commits while the benchmark goroutine
// polls batches of up to 64 (TrySend beside the agent); "inline": the same
// goroutine commits 64 and polls them (TrySend and DoWork on one
// goroutine, ThreadingInvoked).
func BenchmarkPublication(b *testing.B) {
	claims := []struct {
		name  string
		claim func(p *Publication[msg]) (uint64, bool)
	}{
		{"", func(p *Publication[msg]) (uint64, bool) { return p.TryClaim(1) }},
		{"-exclusive", func(p *Publication[msg]) (uint64, bool) { return p.TryClaimExclusive(1) }},
	}
	for _, c := range claims {
		b.Run("spsc"+c.name, func(b *testing.B) {
			p, _ := NewPublication[msg](benchCapacity)
			n := b.N
			b.ReportAllocs()
			var wg sync.WaitGroup
			wg.Go(func() {
				for range n {
					seq, ok := c.claim(p)
					for !ok {
						runtime.Gosched()
						seq, ok = c.claim(p)
					}
					p.Commit(seq, msg{benchBuf, int(seq)})
				}
			})
			dst := make([]msg, 64)
			for got := 0; got < n; {
				_, k := p.Poll(dst)
				if k == 0 {
					runtime.Gosched()
				}
				got += k
			}
			wg.Wait()
			reportMsgs(b)
		})
		b.Run("inline"+c.name, func(b *testing.B) {
			p, _ := NewPublication[msg](benchCapacity)
			b.ReportAllocs()
			dst := make([]msg, 64)
			for i := 0; i < b.N; {
				k := min(64, b.N-i)
				for range k {
					seq, _ := c.claim(p)
					p.Commit(seq, msg{benchBuf, int(seq)})
				}
				p.Poll(dst[:k])
				i += k
			}
			reportMsgs(b)
		})
	}
}
