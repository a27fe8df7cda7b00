package ring

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// failure records the first error of several goroutines and tells the
// others to stop.
type failure struct {
	abort atomic.Bool
	once  sync.Once
	err   error
}

func (f *failure) fail(format string, args ...any) {
	f.once.Do(func() { f.err = fmt.Errorf(format, args...) })
	f.abort.Store(true)
}

// stressRun is one datagram of the SPSC stress test: a run of seqnos that is
// either sent or declared lost.
type stressRun struct {
	first uint64
	n     int
	lost  bool
}

// TestWindowSPSCStress runs a producer and a consumer concurrently on one
// window. The producer inserts runs of 1..8 seqnos in random order within a
// bounded reordering window, resends recent runs (duplicates, repairs
// overlapping held and delivered entries), declares some runs lost, looks up
// retained entries, scans gaps and purges what the consumer delivered. The
// consumer checks that every seqno is delivered or reported lost exactly
// once, in order, with its own value.
func TestWindowSPSCStress(t *testing.T) {
	total := uint64(stressCount)
	const (
		capacity = 1024
		reorder  = 32 // runs pending at once: at most 256 seqnos out of order
	)
	w, err := NewWindow[uint64](capacity, 0)
	require.NoError(t, err)

	rng := rand.New(rand.NewPCG(7, 11))
	var runs []stressRun
	lost := make([]bool, total+1)
	for s := uint64(1); s <= total; {
		n := min(1+rng.IntN(8), int(total-s+1))
		r := stressRun{first: s, n: n, lost: rng.IntN(500) == 0}
		for i := range n {
			lost[s+uint64(i)] = r.lost
		}
		runs = append(runs, r)
		s += uint64(n)
	}

	var f failure
	var wg sync.WaitGroup
	var stats struct{ added, dup, old, marked, gets, gaps int }
	var producerDone atomic.Bool
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer producerDone.Store(true)
		prng := rand.New(rand.NewPCG(3, 5))
		buf := make([]uint64, 8)
		pending := make([]stressRun, 0, reorder)
		history := make([]stressRun, 64)
		next, sent, stuck := 0, 0, false
		for (next < len(runs) || len(pending) > 0) && !f.abort.Load() {
			for len(pending) < reorder && next < len(runs) {
				pending = append(pending, runs[next])
				next++
			}
			i := prng.IntN(len(pending))
			if stuck { // after a Full, insist on the lowest run: it always fits eventually
				for j := range pending {
					if pending[j].first < pending[i].first {
						i = j
					}
				}
			}
			r := pending[i]
			var done int
			if r.lost {
				limit := w.Low() + capacity
				stats.marked += w.MarkLost(r.first, r.first+uint64(r.n)-1)
				done = r.n
				if last := r.first + uint64(r.n) - 1; last > limit {
					done = int(limit - r.first + 1)
					if limit < r.first {
						done = 0
					}
				}
			} else {
				for k := range r.n {
					buf[k] = val(r.first + uint64(k))
				}
				var res RunResult
				if r.n == 1 {
					switch w.Add(r.first, buf[0]) {
					case Added:
						res.Added = 1
					case Duplicate:
						res.Duplicate = 1
					case Old:
						res.Old = 1
					case Full:
						res.Full = true
					}
				} else if slots := w.Reserve(r.first, r.n); slots != nil && prng.IntN(2) == 0 {
					copy(slots, buf[:r.n]) // in place, as nakack stores a run in order
					w.Commit(r.first, r.n)
					res.Added = r.n
				} else {
					res = w.AddRun(r.first, buf[:r.n])
				}
				stats.added += res.Added
				if res.Duplicate+res.Old != 0 {
					f.fail("first send of [%d,+%d) found %+v", r.first, r.n, res)
					return
				}
				done = res.Processed()
			}
			if done < r.n { // full: keep the rest, make room, retry
				pending[i] = stressRun{first: r.first + uint64(done), n: r.n - done, lost: r.lost}
				stuck = true
				if w.Purge(math.MaxUint64, nil) == 0 {
					runtime.Gosched()
				}
				continue
			}
			stuck = false
			pending[i] = pending[len(pending)-1]
			pending = pending[:len(pending)-1]
			history[sent%len(history)] = r
			sent++

			switch op := prng.IntN(100); {
			case op < 5: // duplicate or overlapping repair of a recent run
				d := history[prng.IntN(min(sent, len(history)))]
				for k := range d.n {
					buf[k] = val(d.first + uint64(k))
				}
				res := w.AddRun(d.first, buf[:d.n])
				if res.Added != 0 {
					f.fail("resend of [%d,+%d) added %d", d.first, d.n, res.Added)
					return
				}
				stats.dup += res.Duplicate
				stats.old += res.Old
			case op < 15: // retransmission lookup of a retained entry
				if lo, hi := w.Low(), w.Received(); hi > lo {
					s := lo + 1 + prng.Uint64N(hi-lo)
					if v, ok := w.Get(s); ok {
						stats.gets++
						if v != val(s) || lost[s] {
							f.fail("get %d: %d", s, v)
							return
						}
					}
				}
			case op < 20: // gap scan
				d := w.Delivered()
				if g, ok := w.NextGap(d); ok {
					stats.gaps++
					if g.From <= d || g.To < g.From || g.To > w.Received() || w.Has(g.From) || w.Has(g.To) {
						f.fail("gap %v after %d", g, d)
						return
					}
				}
			case op < 30: // purge, keeping a little retained
				if d := w.Delivered(); d > 64 {
					w.Purge(d-64, nil)
				}
			}
		}
	}()

	crng := rand.New(rand.NewPCG(13, 17))
	dst := make([]uint64, 64)
	expect := uint64(1)
	var lostRuns int
consume:
	for expect <= total && !f.abort.Load() {
		// Once the producer is done nothing changes any more: a pass without
		// progress then means the window lost something (fail, do not hang).
		final := producerDone.Load()
		progress := false
		switch crng.IntN(3) {
		case 0:
			if seq, v, ok := w.Remove(); ok {
				if seq != expect || v != val(seq) || lost[seq] {
					f.fail("remove: got %d=%d, want %d", seq, v, expect)
					break consume
				}
				expect++
				progress = true
			}
		case 1:
			first, n := w.RemoveBatch(dst[:1+crng.IntN(len(dst))])
			if first != expect {
				f.fail("remove batch: first %d, want %d", first, expect)
				break consume
			}
			for i, v := range dst[:n] {
				if s := first + uint64(i); v != val(s) || lost[s] {
					f.fail("remove batch: %d=%d", s, v)
					break
				}
			}
			expect += uint64(n)
			progress = n > 0
		default:
			// Read in place while the producer purges and adds.
			first, run := w.Peek(1 + crng.IntN(len(dst)))
			if first != expect {
				f.fail("peek: first %d, want %d", first, expect)
				break consume
			}
			for i, v := range run {
				if s := first + uint64(i); v != val(s) || lost[s] {
					f.fail("peek: %d=%d", s, v)
					break
				}
			}
			w.Advance(len(run))
			expect += uint64(len(run))
			progress = len(run) > 0
		}
		if r, ok := w.SkipLost(); ok {
			if r.From != expect || r.To < r.From {
				f.fail("skip lost %v, want from %d", r, expect)
				break
			}
			for s := r.From; s <= r.To; s++ {
				if !lost[s] {
					f.fail("skip lost %v covers %d", r, s)
					break
				}
			}
			expect = r.To + 1
			lostRuns++
			progress = true
		}
		if !progress {
			if final {
				f.fail("stuck at %d after the producer finished", expect)
				break
			}
			runtime.Gosched()
		}
	}
	wg.Wait()
	require.NoError(t, f.err)
	require.Equal(t, total+1, expect)
	require.Equal(t, total, w.Delivered())
	require.Equal(t, total, w.Received())
	require.Equal(t, 0, w.MissingCount())
	marked := 0
	for _, l := range lost {
		if l {
			marked++
		}
	}
	require.Equal(t, marked, stats.marked)
	require.Equal(t, int(total)-marked, stats.added)
	require.NotZero(t, lostRuns)
	require.NotZero(t, stats.dup)
	require.NotZero(t, stats.gets)
	t.Logf("seqnos %d, lost %d in %d reports, duplicates %d, old %d, gets %d, gaps seen %d",
		total, marked, lostRuns, stats.dup, stats.old, stats.gets, stats.gaps)
}

// TestPublicationMPSCStress has several producers claim runs of 1..4
// seqnos and commit them in random order while one consumer polls; the
// consumer checks that every seqno arrives exactly once, in order, with its
// own value.
func TestPublicationMPSCStress(t *testing.T) {
	total := uint64(stressCount)
	const producers = 4
	p, err := NewPublication[uint64](256)
	require.NoError(t, err)
	per := total / producers
	var f failure
	var wg sync.WaitGroup
	claimed := make([]uint64, producers)
	var finished atomic.Int32
	for id := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer finished.Add(1)
			rng := rand.New(rand.NewPCG(uint64(id), 99))
			var order [4]uint64
			for remaining := per; remaining > 0 && !f.abort.Load(); {
				n := min(1+rng.Uint64N(4), remaining)
				first, ok := p.TryClaim(int(n))
				if !ok {
					runtime.Gosched()
					continue
				}
				commitShuffled(p, rng, first, order[:n])
				claimed[id] += n
				remaining -= n
			}
		}()
	}
	dst := make([]uint64, 64)
	want := per * producers
	expect := pollAll(p, want, &f, func() bool { return finished.Load() == producers }, func() []uint64 { return dst })
	wg.Wait()
	require.NoError(t, f.err)
	require.Equal(t, want+1, expect)
	for id, c := range claimed {
		require.Equal(t, per, c, "producer %d", id)
	}
	require.Equal(t, 0, p.Len())
	_, n := p.Poll(dst)
	require.Equal(t, 0, n)
}

// TestPublicationRunStress mixes the two ways to commit: producers claim up
// to 40 seqnos (TryClaimUpTo) and publish them either one by one (Commit,
// in random order) or as runs (Put, then PublishRun, in one or several
// chunks), while the consumer polls into buffers of random length that
// split runs. Every seqno arrives exactly once, in order, with its value.
func TestPublicationRunStress(t *testing.T) {
	total := uint64(stressCount)
	const producers = 4
	p, err := NewPublication[uint64](128)
	require.NoError(t, err)
	per := total / producers
	var f failure
	var wg sync.WaitGroup
	var finished atomic.Int32
	for id := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer finished.Add(1)
			rng := rand.New(rand.NewPCG(uint64(id), 7))
			var order [40]uint64
			for remaining := per; remaining > 0 && !f.abort.Load(); {
				first, k, ok := p.TryClaimUpTo(int(min(1+rng.Uint64N(40), remaining)))
				if !ok {
					runtime.Gosched()
					continue
				}
				n := uint64(k)
				switch rng.IntN(3) {
				case 0:
					commitShuffled(p, rng, first, order[:n])
				default:
					for i := range n {
						p.Put(first+i, val(first+i))
					}
					// One run, or chunks published in any order.
					if cut := rng.Uint64N(n); cut > 0 && rng.IntN(2) == 0 {
						p.PublishRun(first+cut, int(n-cut))
						p.PublishRun(first, int(cut))
					} else {
						p.PublishRun(first, int(n))
					}
				}
				remaining -= n
			}
		}()
	}
	want := per * producers
	rng := rand.New(rand.NewPCG(99, 99))
	dst := make([]uint64, 64)
	expect := pollAll(p, want, &f, func() bool { return finished.Load() == producers },
		func() []uint64 { return dst[:1+rng.IntN(len(dst))] })
	wg.Wait()
	require.NoError(t, f.err)
	require.Equal(t, want+1, expect)
	require.Equal(t, 0, p.Len())
}

// TestPublicationExclusiveStress: one producer claims with
// TryClaimExclusive (runs of 1..4, committed in random order) and
// TryClaimUpToExclusive (up to 40, published as runs), handing the role
// of producer to another goroutine now and then (over a channel: one at a
// time, ordered), while the consumer polls into buffers of random length.
// Every seqno arrives exactly once, in order, with its value.
func TestPublicationExclusiveStress(t *testing.T) {
	total := uint64(stressCount)
	p, err := NewPublication[uint64](64)
	require.NoError(t, err)
	var f failure
	var finished atomic.Int32
	type turn struct{ remaining uint64 }
	baton := make(chan turn, 1)
	baton <- turn{total}
	var wg sync.WaitGroup
	const producers = 3
	for id := range producers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(id), 5))
			var order [4]uint64
			for tn := range baton {
				for steps := 1 + rng.IntN(200); tn.remaining > 0 && steps > 0 && !f.abort.Load(); steps-- {
					if rng.IntN(2) == 0 {
						n := min(1+rng.Uint64N(4), tn.remaining)
						first, ok := p.TryClaimExclusive(int(n))
						if !ok {
							runtime.Gosched()
							continue
						}
						commitShuffled(p, rng, first, order[:n])
						tn.remaining -= n
						continue
					}
					first, k, ok := p.TryClaimUpToExclusive(int(min(1+rng.Uint64N(40), tn.remaining)))
					if !ok {
						runtime.Gosched()
						continue
					}
					for i := range uint64(k) {
						p.Put(first+i, val(first+i))
					}
					p.PublishRun(first, k)
					tn.remaining -= uint64(k)
				}
				if tn.remaining == 0 || f.abort.Load() {
					finished.Store(1)
					close(baton)
					return
				}
				baton <- tn
			}
		})
	}
	rng := rand.New(rand.NewPCG(98, 98))
	dst := make([]uint64, 64)
	expect := pollAll(p, total, &f, func() bool { return finished.Load() == 1 },
		func() []uint64 { return dst[:1+rng.IntN(len(dst))] })
	wg.Wait()
	require.NoError(t, f.err)
	require.Equal(t, total+1, expect)
	require.Equal(t, 0, p.Len())
}

// pollAll is the stress tests' consumer: it polls p into buf() until it has
// seqnos 1..want, checking that they come in order with their values
// (val), and returns the next seqno expected (want+1 when complete). done
// reports that the producers finished: a poll without progress after that
// means the ring is stuck.
func pollAll(p *Publication[uint64], want uint64, f *failure, done func() bool, buf func() []uint64) uint64 {
	expect := uint64(1)
	for expect <= want && !f.abort.Load() {
		final := done() // read before the poll
		dst := buf()
		first, n := p.Poll(dst)
		if first != expect {
			f.fail("poll first %d, want %d", first, expect)
			break
		}
		for i, v := range dst[:n] {
			if v != val(first+uint64(i)) {
				f.fail("poll %d=%d", first+uint64(i), v)
				break
			}
		}
		expect += uint64(n)
		if n == 0 {
			if final {
				f.fail("stuck at %d after the producers finished", expect)
				break
			}
			runtime.Gosched()
		}
	}
	return expect
}

// commitShuffled commits the claimed seqnos first..first+len(order)-1 one
// by one (Commit, value val(seqno)) in a random order; order is scratch.
func commitShuffled(p *Publication[uint64], rng *rand.Rand, first uint64, order []uint64) {
	for i := range order {
		order[i] = first + uint64(i)
	}
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for _, s := range order {
		p.Commit(s, val(s))
	}
}
