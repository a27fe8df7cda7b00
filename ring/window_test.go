package ring

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// newW returns a window of uint64 values for tests.
func newW(t *testing.T, capacity int, start uint64) *Window[uint64] {
	t.Helper()
	w, err := NewWindow[uint64](capacity, start)
	require.NoError(t, err)
	return w
}

// val is the value tests store at seq.
func val(seq uint64) uint64 { return seq*10 + 7 }

// vals returns val(first..first+n-1).
func vals(first uint64, n int) []uint64 {
	v := make([]uint64, n)
	for i := range v {
		v[i] = val(first + uint64(i))
	}
	return v
}

// addAll adds val(seq) for each seq and requires Added.
func addAll(t *testing.T, w *Window[uint64], seqs ...uint64) {
	t.Helper()
	for _, s := range seqs {
		require.Equal(t, Added, w.Add(s, val(s)), "add %d", s)
	}
}

// seqRange returns from..to.
func seqRange(from, to uint64) []uint64 {
	var s []uint64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// drain delivers everything deliverable and returns the delivered seqnos
// and the lost ranges in the order met, checking values (and that
// PeekLost sees each lost run SkipLost then consumes).
func drain(t *testing.T, w *Window[uint64]) (got []uint64, lost []Range) {
	t.Helper()
	for {
		if seq, v, ok := w.Remove(); ok {
			require.Equal(t, val(seq), v, "value at %d", seq)
			got = append(got, seq)
			continue
		}
		peek, peeked := w.PeekLost()
		d := w.Delivered()
		if r, ok := w.SkipLost(); ok {
			require.Equal(t, [2]any{peek, true}, [2]any{r, peeked}, "PeekLost returns what SkipLost consumes")
			lost = append(lost, r)
			continue
		}
		require.False(t, peeked)
		require.Equal(t, d, w.Delivered(), "PeekLost consumes nothing")
		return got, lost
	}
}

// state asserts low, delivered, received.
func state(t *testing.T, w *Window[uint64], low, delivered, received uint64) {
	t.Helper()
	require.Equal(t, [3]uint64{low, delivered, received},
		[3]uint64{w.Low(), w.Delivered(), w.Received()}, "low/delivered/received")
}

func TestNewWindowCapacity(t *testing.T) {
	for _, tc := range []struct {
		capacity int
		ok       bool
	}{
		{-8, false}, {0, false}, {1, true}, {2, true}, {3, false}, {48, false},
		{64, true}, {100, false}, {128, true}, {1 << 16, true},
	} {
		t.Run("", func(t *testing.T) {
			w, err := NewWindow[int](tc.capacity, 5)
			if !tc.ok {
				require.ErrorIs(t, err, ErrCapacity)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.capacity, w.Capacity())
			require.Equal(t, uint64(5), w.Low())
			require.Equal(t, uint64(5), w.Delivered())
			require.Equal(t, uint64(5), w.Received())
		})
	}
}

func TestWindowAdd(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(w *Window[uint64])
		seq   uint64
		want  AddResult
	}{
		{"next", nil, 1, Added},
		{"out of order", nil, 5, Added},
		{"last slot", nil, 8, Added},
		{"beyond capacity", nil, 9, Full},
		{"start itself", nil, 0, Old},
		{"duplicate undelivered", func(w *Window[uint64]) { w.Add(3, val(3)) }, 3, Duplicate},
		{"duplicate delivered is old", func(w *Window[uint64]) { w.Add(1, val(1)); w.Remove() }, 1, Old},
		{"lost is old", func(w *Window[uint64]) { w.MarkLost(2, 2) }, 2, Old},
		{"after purge the ring moves on", func(w *Window[uint64]) {
			w.Add(1, val(1))
			w.Add(2, val(2))
			w.RemoveBatch(make([]uint64, 2))
			w.Purge(2, nil)
		}, 10, Added},
		{"after purge still bounded", func(w *Window[uint64]) {
			w.Add(1, val(1))
			w.Add(2, val(2))
			w.RemoveBatch(make([]uint64, 2))
			w.Purge(2, nil)
		}, 11, Full},
		{"delivery alone frees nothing", func(w *Window[uint64]) {
			w.Add(1, val(1))
			w.Remove()
		}, 9, Full},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newW(t, 8, 0)
			if tc.setup != nil {
				tc.setup(w)
			}
			got := w.Add(tc.seq, val(tc.seq))
			require.Equal(t, tc.want, got)
			if got == Added {
				v, ok := w.Get(tc.seq)
				require.True(t, ok)
				require.Equal(t, val(tc.seq), v)
			}
		})
	}
}

func TestWindowAddRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity int
		setup    func(t *testing.T, w *Window[uint64])
		first    uint64
		n        int
		want     RunResult
		received uint64
		held     []uint64 // additionally expected to be held (Has) afterwards
	}{
		{name: "fresh run", capacity: 16, first: 1, n: 10,
			want: RunResult{Added: 10}, received: 10, held: seqRange(1, 10)},
		{name: "empty run", capacity: 16, first: 1, n: 0, want: RunResult{}, received: 0},
		{name: "repair overlapping a held run", capacity: 16,
			setup: func(t *testing.T, w *Window[uint64]) { w.AddRun(5, vals(5, 5)) },
			first: 3, n: 10, want: RunResult{Added: 5, Duplicate: 5}, received: 12, held: seqRange(3, 12)},
		{name: "duplicates inside a run", capacity: 16,
			setup: func(t *testing.T, w *Window[uint64]) { addAll(t, w, 2, 4, 6) },
			first: 1, n: 7, want: RunResult{Added: 4, Duplicate: 3}, received: 7, held: seqRange(1, 7)},
		{name: "run partly delivered", capacity: 16,
			setup: func(t *testing.T, w *Window[uint64]) {
				w.AddRun(1, vals(1, 4))
				w.RemoveBatch(make([]uint64, 3))
			},
			first: 2, n: 5, want: RunResult{Added: 2, Duplicate: 1, Old: 2}, received: 6, held: seqRange(1, 6)},
		{name: "run wholly old", capacity: 16,
			setup: func(t *testing.T, w *Window[uint64]) {
				w.AddRun(1, vals(1, 4))
				w.RemoveBatch(make([]uint64, 4))
			},
			first: 1, n: 3, want: RunResult{Old: 3}, received: 4},
		{name: "run over lost seqnos", capacity: 16,
			setup: func(t *testing.T, w *Window[uint64]) { w.MarkLost(3, 4) },
			first: 1, n: 6, want: RunResult{Added: 4, Old: 2}, received: 6},
		{name: "run beyond capacity inserts what fits", capacity: 8,
			setup: func(t *testing.T, w *Window[uint64]) { addAll(t, w, 6) },
			first: 5, n: 6, want: RunResult{Added: 3, Duplicate: 1, Full: true}, received: 8, held: seqRange(5, 8)},
		{name: "run wholly beyond capacity", capacity: 8, first: 9, n: 3,
			want: RunResult{Full: true}, received: 0},
		{name: "run across the index wrap and words", capacity: 128,
			setup: func(t *testing.T, w *Window[uint64]) {
				require.Equal(t, RunResult{Added: 100}, w.AddRun(1, vals(1, 100)))
				_, n := w.RemoveBatch(make([]uint64, 100))
				require.Equal(t, 100, n)
				require.Equal(t, 100, w.Purge(100, nil))
				addAll(t, w, 130, 191, 192)
			},
			first: 101, n: 128, want: RunResult{Added: 125, Duplicate: 3}, received: 228, held: seqRange(101, 228)},
		{name: "capacity one", capacity: 1, first: 1, n: 2,
			want: RunResult{Added: 1, Full: true}, received: 1, held: []uint64{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newW(t, tc.capacity, 0)
			if tc.setup != nil {
				tc.setup(t, w)
			}
			got := w.AddRun(tc.first, vals(tc.first, tc.n))
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.received, w.Received())
			for _, s := range tc.held {
				v, ok := w.Get(s)
				require.True(t, ok, "held %d", s)
				require.Equal(t, val(s), v)
			}
		})
	}
}

func TestWindowDeliveryAndPurgeInsideARun(t *testing.T) {
	w := newW(t, 16, 0)
	require.Equal(t, RunResult{Added: 10}, w.AddRun(1, vals(1, 10)))

	dst := make([]uint64, 4)
	first, n := w.RemoveBatch(dst)
	require.Equal(t, uint64(1), first)
	require.Equal(t, 4, n)
	require.Equal(t, vals(1, 4), dst)
	state(t, w, 0, 4, 10)

	var released []uint64
	rel := func(v uint64) { released = append(released, v) }
	require.Equal(t, 2, w.Purge(2, rel), "purge ends inside the run")
	require.Equal(t, vals(1, 2), released)
	state(t, w, 2, 4, 10)
	require.False(t, w.Has(2))
	require.True(t, w.Has(3), "delivered, not purged: retained")

	released = nil
	require.Equal(t, 2, w.Purge(100, rel), "purge is bounded by delivered")
	require.Equal(t, vals(3, 2), released)
	state(t, w, 4, 4, 10)
	require.True(t, w.Has(5))

	got, lost := drain(t, w)
	require.Equal(t, seqRange(5, 10), got)
	require.Empty(t, lost)
	require.Equal(t, 0, w.Purge(4, rel), "nothing below low")
}

func TestWindowRemove(t *testing.T) {
	w := newW(t, 8, 0)
	_, _, ok := w.Remove()
	require.False(t, ok, "empty")
	addAll(t, w, 2, 3)
	_, _, ok = w.Remove()
	require.False(t, ok, "gap at 1")
	addAll(t, w, 1)
	got, _ := drain(t, w)
	require.Equal(t, []uint64{1, 2, 3}, got)
	state(t, w, 0, 3, 3)
	v, ok := w.Get(2)
	require.True(t, ok, "delivered entries stay retained")
	require.Equal(t, val(2), v)
}

func TestWindowRemoveBatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cap     int
		start   uint64
		add     []uint64
		lost    []Range
		dst     int
		first   uint64
		want    []uint64
		advance uint64
	}{
		{"empty window", 8, 0, nil, nil, 4, 1, nil, 0},
		{"zero-length dst", 8, 0, []uint64{1}, nil, 0, 1, nil, 0},
		{"stops at dst length", 8, 0, seqRange(1, 6), nil, 4, 1, seqRange(1, 4), 4},
		{"stops at a gap", 8, 0, []uint64{1, 2, 4}, nil, 8, 1, seqRange(1, 2), 2},
		{"stops before lost", 8, 0, []uint64{1, 2, 4}, []Range{{From: 3, To: 3}}, 8, 1, seqRange(1, 2), 2},
		{"nothing at a lost seqno", 8, 0, []uint64{2}, []Range{{From: 1, To: 1}}, 8, 1, nil, 0},
		{"wraps the index", 8, 5, seqRange(6, 13), nil, 8, 6, seqRange(6, 13), 8},
		{"crosses bitmap words", 256, 40, seqRange(41, 200), nil, 256, 41, seqRange(41, 200), 160},
		{"crosses words and wraps", 128, 100, seqRange(101, 228), nil, 128, 101, seqRange(101, 228), 128},
		{"capacity one", 1, 9, []uint64{10}, nil, 4, 10, []uint64{10}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newW(t, tc.cap, tc.start)
			addAll(t, w, tc.add...)
			for _, r := range tc.lost {
				require.Equal(t, int(r.Len()), w.MarkLost(r.From, r.To))
			}
			dst := make([]uint64, tc.dst)
			first, n := w.RemoveBatch(dst)
			require.Equal(t, tc.first, first)
			var want []uint64
			for _, s := range tc.want {
				want = append(want, val(s))
			}
			require.Equal(t, want, append([]uint64(nil), dst[:n]...))
			require.Equal(t, tc.start+tc.advance, w.Delivered())
		})
	}
}

func TestWindowWrapAround(t *testing.T) {
	// Many laps around a small ring, with the start placed so that the index
	// wraps mid-run, delivery in batches and purges lagging behind.
	for _, tc := range []struct {
		name  string
		cap   int
		start uint64
		run   int
	}{
		{"cap 8 start 0", 8, 0, 3},
		{"cap 8 start 13", 8, 13, 5},
		{"cap 1", 1, 7, 1},
		{"cap 64 single word", 64, 60, 7},
		{"cap 256 several words", 256, 1<<40 - 3, 37},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newW(t, tc.cap, tc.start)
			next := tc.start + 1
			dst := make([]uint64, tc.run)
			var released int
			for lap := 0; lap < 40*tc.cap/tc.run+10; lap++ {
				n := min(tc.run, int(w.Low()+uint64(tc.cap)-next+1))
				if n > 0 {
					require.Equal(t, RunResult{Added: n}, w.AddRun(next, vals(next, n)))
					next += uint64(n)
				}
				first, got := w.RemoveBatch(dst)
				for i := 0; i < got; i++ {
					require.Equal(t, val(first+uint64(i)), dst[i])
				}
				// purge half of what is delivered
				d := w.Delivered()
				released += w.Purge(w.Low()+(d-w.Low()+1)/2, nil)
			}
			require.Equal(t, next-1, w.Received())
			released += w.Purge(w.Delivered(), nil)
			require.Equal(t, int(w.Delivered()-tc.start), released)
		})
	}
}

func TestWindowFullThenPurgeThenAdd(t *testing.T) {
	w := newW(t, 4, 0)
	addAll(t, w, 1, 2, 3, 4)
	require.Equal(t, Full, w.Add(5, val(5)))
	require.Equal(t, 0, w.Purge(4, nil), "nothing delivered yet")
	got, _ := drain(t, w)
	require.Equal(t, seqRange(1, 4), got)
	require.Equal(t, Full, w.Add(5, val(5)), "delivered but retained")
	require.Equal(t, 1, w.Purge(1, nil))
	require.Equal(t, Added, w.Add(5, val(5)))
	require.Equal(t, Full, w.Add(6, val(6)))
	require.Equal(t, 3, w.Purge(10, nil))
	addAll(t, w, 8, 7, 6)
	require.Equal(t, Full, w.Add(9, val(9)))
	require.False(t, w.Has(1), "purged")
	got, _ = drain(t, w)
	require.Equal(t, seqRange(5, 8), got)
}

func TestWindowGaps(t *testing.T) {
	w := newW(t, 128, 0)
	addAll(t, w, 1, 2, 5, 6, 7, 70, 71, 100)
	require.Equal(t, 2, w.MarkLost(9, 10))
	got, _ := drain(t, w)
	require.Equal(t, []uint64{1, 2}, got)

	for _, tc := range []struct {
		after uint64
		want  Range
		ok    bool
	}{
		{0, Range{From: 3, To: 4}, true},
		{2, Range{From: 3, To: 4}, true},
		{3, Range{From: 4, To: 4}, true},
		{4, Range{From: 8, To: 8}, true},
		{8, Range{From: 11, To: 69}, true},
		{50, Range{From: 51, To: 69}, true},
		{71, Range{From: 72, To: 99}, true},
		{99, Range{}, false},
		{100, Range{}, false},
		{1000, Range{}, false},
	} {
		g, ok := w.NextGap(tc.after)
		require.Equal(t, tc.ok, ok, "after %d", tc.after)
		require.Equal(t, tc.want, g, "after %d", tc.after)
	}

	all := []Range{{From: 3, To: 4}, {From: 8, To: 8}, {From: 11, To: 69}, {From: 72, To: 99}}
	require.Equal(t, all, w.AppendGaps(nil, 0))
	require.Equal(t, all[:2], w.AppendGaps(nil, 2))
	pre := []Range{{From: 1, To: 1}}
	require.Equal(t, append(pre, all...), w.AppendGaps(pre, -1))
	require.Equal(t, 2+1+59+28, w.MissingCount())

	// repair everything: no gaps, only the lost run stops delivery
	for _, g := range all {
		require.Equal(t, RunResult{Added: int(g.Len())}, w.AddRun(g.From, vals(g.From, int(g.Len()))))
	}
	require.Empty(t, w.AppendGaps(nil, 0))
	require.Equal(t, 0, w.MissingCount())
	got, lost := drain(t, w)
	require.Equal(t, append(seqRange(3, 8), seqRange(11, 100)...), got)
	require.Equal(t, []Range{{From: 9, To: 10}}, lost)
	_, ok := w.NextGap(0)
	require.False(t, ok)
}

func TestWindowGapsWrapAndSmallCapacity(t *testing.T) {
	w := newW(t, 8, 5) // slots wrap at 8, 16
	addAll(t, w, 6, 9, 13)
	require.Equal(t, []Range{{From: 7, To: 8}, {From: 10, To: 12}}, w.AppendGaps(nil, 0))
	require.Equal(t, 5, w.MissingCount())
	w1 := newW(t, 1, 0)
	addAll(t, w1, 1)
	require.Empty(t, w1.AppendGaps(nil, 0))
	require.Equal(t, 0, w1.MissingCount())
}

func TestWindowMarkLost(t *testing.T) {
	// The MSG_NOT_FOUND case of design.md: hd=50, B purged up to 150, A holds
	// 100..120 and the repairs 151..200 and 201: report [51,99] and
	// [121,150] and deliver everything held.
	w := newW(t, 256, 50)
	w.AddRun(100, vals(100, 21))
	w.AddRun(151, vals(151, 51))
	require.Equal(t, 49+30, w.MarkLost(51, 150))
	require.Equal(t, 0, w.MarkLost(51, 150), "marks once")
	require.Empty(t, w.AppendGaps(nil, 0), "lost seqnos are not gaps")
	require.False(t, w.Has(60))
	_, ok := w.Get(60)
	require.False(t, ok)
	require.Equal(t, Old, w.Add(60, val(60)), "a lost seqno is never accepted")
	require.Equal(t, Duplicate, w.Add(110, val(110)))

	_, _, ok = w.Remove()
	require.False(t, ok, "Remove does not pass a lost seqno")
	first, n := w.RemoveBatch(make([]uint64, 10))
	require.Equal(t, uint64(51), first)
	require.Equal(t, 0, n)

	got, lost := drain(t, w)
	require.Equal(t, append(seqRange(100, 120), seqRange(151, 201)...), got)
	require.Equal(t, []Range{{From: 51, To: 99}, {From: 121, To: 150}}, lost)
	state(t, w, 50, 201, 201)

	require.Equal(t, 21+51, w.Purge(201, nil))
	state(t, w, 201, 201, 201)
	require.Equal(t, Added, w.Add(202, val(202)))
}

func TestWindowAppendUnheld(t *testing.T) {
	// Capacity 64, start 40: the lost runs wrap around the ring's end.
	w := newW(t, 64, 40)
	require.Empty(t, w.AppendUnheld(nil), "nothing delivered")
	w.AddRun(45, vals(45, 10))
	w.AddRun(70, vals(70, 20))
	w.MarkLost(41, 44)
	w.MarkLost(55, 69)
	require.Empty(t, w.AppendUnheld(nil), "only (low, delivered] counts")
	_, lost := drain(t, w)
	require.Equal(t, []Range{{From: 41, To: 44}, {From: 55, To: 69}}, lost)
	want := []Range{{From: 41, To: 44}, {From: 55, To: 69}}
	require.Equal(t, want, w.AppendUnheld(nil))
	w.Purge(60, nil)
	require.Equal(t, []Range{{From: 61, To: 69}}, w.AppendUnheld(nil), "purged seqnos are below low")
	w.Purge(89, nil)
	require.Empty(t, w.AppendUnheld(nil))

	w.AddRun(90, vals(90, 3))
	w.MarkLost(93, 93)
	drain(t, w)
	dst := make([]Range, 0, 4)
	allocs := testing.AllocsPerRun(100, func() { dst = w.AppendUnheld(dst[:0]) })
	require.Equal(t, []Range{{From: 93, To: 93}}, dst)
	require.Zero(t, allocs, "AppendUnheld allocates only if dst lacks capacity")
}

func TestWindowFirstHeld(t *testing.T) {
	// Capacity 64, start 40: the searched ranges wrap around the ring's end.
	w := newW(t, 64, 40)
	_, ok := w.FirstHeld(41, 104)
	require.False(t, ok, "empty window")
	w.AddRun(100, vals(100, 2))
	w.MarkLost(41, 60)
	for _, tc := range []struct {
		from, to, want uint64
		ok             bool
	}{
		{41, 104, 100, true},
		{100, 100, 100, true},
		{101, 104, 101, true},
		{41, 99, 0, false}, // lost seqnos are not held
		{102, 104, 0, false},
		{60, 50, 0, false}, // empty range
	} {
		q, ok := w.FirstHeld(tc.from, tc.to)
		require.Equal(t, tc.ok, ok, "[%d, %d]", tc.from, tc.to)
		require.Equal(t, tc.want, q, "[%d, %d]", tc.from, tc.to)
	}
}

func TestWindowLostRun(t *testing.T) {
	// Capacity 64, start 40: the runs wrap around the ring's end.
	w := newW(t, 64, 40)
	w.AddRun(41, vals(41, 1))
	w.AddRun(70, vals(70, 1))
	w.AddRun(100, vals(100, 1))
	w.MarkLost(50, 69) // 42..49 stay missing
	w.MarkLost(71, 99)
	for _, tc := range []struct {
		q    uint64
		want Range
		ok   bool
	}{
		{50, Range{From: 50, To: 69}, true},
		{60, Range{From: 60, To: 69}, true},
		{71, Range{From: 71, To: 99}, true},
		{45, Range{}, false},  // missing
		{70, Range{}, false},  // held
		{101, Range{}, false}, // above received
	} {
		r, ok := w.LostRun(tc.q)
		require.Equal(t, tc.ok, ok, "%d", tc.q)
		require.Equal(t, tc.want, r, "%d", tc.q)
	}
	drain(t, w) // delivers 41 only: 42 is missing
	_, ok := w.LostRun(41)
	require.False(t, ok, "at or below delivered")
}

func TestWindowMarkLostEdges(t *testing.T) {
	// delivered = 3 (low 0), 5 and 6 held, 4 missing.
	for _, tc := range []struct {
		name     string
		from, to uint64
		marked   int
		received uint64
		gaps     []Range
	}{
		{"below delivered is ignored", 1, 4, 1, 6, nil},
		{"raises received", 8, 12, 5, 12, []Range{{From: 4, To: 4}, {From: 7, To: 7}}},
		{"held entries inside stay", 5, 7, 1, 7, []Range{{From: 4, To: 4}}},
		{"all held", 5, 6, 0, 6, []Range{{From: 4, To: 4}}},
		{"clipped at capacity", 10, 40, 7, 16, []Range{{From: 4, To: 4}, {From: 7, To: 9}}},
		{"wholly beyond capacity", 20, 40, 0, 6, []Range{{From: 4, To: 4}}},
		{"empty range", 9, 8, 0, 6, []Range{{From: 4, To: 4}}},
		{"wholly delivered", 1, 3, 0, 6, []Range{{From: 4, To: 4}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newW(t, 16, 0)
			w.Skip(3, nil)
			addAll(t, w, 5, 6)
			require.Equal(t, tc.marked, w.MarkLost(tc.from, tc.to))
			require.Equal(t, tc.received, w.Received())
			require.Equal(t, tc.gaps, w.AppendGaps(nil, 0))
			require.True(t, w.Has(5))
			require.True(t, w.Has(6))
		})
	}
}

func TestWindowRewind(t *testing.T) {
	w := newW(t, 16, 0)
	w.AddRun(1, vals(1, 10))
	require.Equal(t, 2, w.MarkLost(11, 12))
	addAll(t, w, 13)
	got, lost := drain(t, w)
	require.Equal(t, append(seqRange(1, 10), 13), got)
	require.Equal(t, []Range{{From: 11, To: 12}}, lost)
	require.Equal(t, 2, w.Purge(2, nil))

	require.ErrorIs(t, w.Rewind(14), ErrRange, "forward is Skip's job")
	require.ErrorIs(t, w.Rewind(1), ErrNotRetained, "below low")
	require.Equal(t, uint64(13), w.Delivered(), "unchanged on error")

	require.NoError(t, w.Rewind(3))
	state(t, w, 2, 3, 13)
	got, lost = drain(t, w)
	require.Equal(t, append(seqRange(4, 10), 13), got, "re-delivered")
	require.Equal(t, []Range{{From: 11, To: 12}}, lost, "lost run reported again with the re-delivery")

	require.NoError(t, w.Rewind(2), "back to low")
	require.NoError(t, w.Rewind(2), "no-op")
	got, _ = drain(t, w)
	require.Equal(t, seqRange(3, 10), got[:8])

	// a Skip discards, so a Rewind over the skipped range is refused
	w.Skip(20, nil)
	require.ErrorIs(t, w.Rewind(13), ErrNotRetained)
	require.NoError(t, w.Rewind(20))
}

func TestWindowSkip(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		cap                     int
		setup                   func(t *testing.T, w *Window[uint64])
		to                      uint64
		released                []uint64
		low, delivered, receivd uint64
		next                    []uint64 // delivered after the skip
		held                    []uint64 // retained after the skip
		gone                    []uint64 // not retained after the skip
	}{
		{name: "over held and missing", cap: 16,
			setup: func(t *testing.T, w *Window[uint64]) { addAll(t, w, 1, 2, 3, 5, 6, 7) },
			to:    6, released: []uint64{1, 2, 3, 5, 6}, low: 0, delivered: 6, receivd: 7,
			next: []uint64{7}, gone: []uint64{1, 5, 6}},
		{name: "keeps retained delivered entries", cap: 16,
			setup: func(t *testing.T, w *Window[uint64]) {
				addAll(t, w, 1, 2, 3, 5)
				drain(t, w)
			},
			to: 4, released: nil, low: 0, delivered: 4, receivd: 5, next: []uint64{5}, held: []uint64{1, 2, 3}},
		{name: "beyond received", cap: 16,
			setup: func(t *testing.T, w *Window[uint64]) { addAll(t, w, 2) },
			to:    10, released: []uint64{2}, low: 0, delivered: 10, receivd: 10},
		{name: "over lost marks", cap: 16,
			setup: func(t *testing.T, w *Window[uint64]) {
				w.MarkLost(1, 4)
				addAll(t, w, 6)
			},
			to: 5, low: 0, delivered: 5, receivd: 6, next: []uint64{6}},
		{name: "backwards is a no-op", cap: 16,
			setup: func(t *testing.T, w *Window[uint64]) {
				addAll(t, w, 1, 2)
				drain(t, w)
			},
			to: 1, low: 0, delivered: 2, receivd: 2, held: []uint64{1, 2}},
		{name: "beyond capacity moves low", cap: 8,
			setup: func(t *testing.T, w *Window[uint64]) {
				addAll(t, w, 1, 2, 3, 4, 6)
				drain(t, w)
			},
			to: 13, released: []uint64{1, 2, 3, 4, 6}, low: 5, delivered: 13, receivd: 13,
			gone: []uint64{4, 6}},
		{name: "just beyond capacity keeps the top", cap: 8,
			setup: func(t *testing.T, w *Window[uint64]) {
				addAll(t, w, 1, 2, 3, 4, 6)
				drain(t, w)
			},
			to: 10, released: []uint64{1, 2, 6}, low: 2, delivered: 10, receivd: 10,
			held: []uint64{3, 4}, gone: []uint64{2, 6}},
		{name: "far beyond everything", cap: 8,
			setup: func(t *testing.T, w *Window[uint64]) { addAll(t, w, 1, 8) },
			to:    1 << 40, released: []uint64{1, 8}, low: 1<<40 - 8, delivered: 1 << 40, receivd: 1 << 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newW(t, tc.cap, 0)
			tc.setup(t, w)
			var released []uint64
			n := w.Skip(tc.to, func(v uint64) { released = append(released, v) })
			var want []uint64
			for _, s := range tc.released {
				want = append(want, val(s))
			}
			require.ElementsMatch(t, want, released)
			require.Equal(t, len(tc.released), n)
			state(t, w, tc.low, tc.delivered, tc.receivd)
			for _, s := range tc.held {
				require.True(t, w.Has(s), "held %d", s)
			}
			for _, s := range tc.gone {
				require.False(t, w.Has(s), "gone %d", s)
			}
			got, lost := drain(t, w)
			require.Equal(t, tc.next, got)
			require.Empty(t, lost)
			// the window keeps working after the skip
			d := w.Delivered()
			w.Purge(d, nil)
			addAll(t, w, d+2, d+1)
			got, _ = drain(t, w)
			require.Equal(t, []uint64{d + 1, d + 2}, got)
		})
	}
}

func TestWindowGetHas(t *testing.T) {
	w := newW(t, 8, 0)
	addAll(t, w, 1, 2, 4)
	w.MarkLost(3, 3)
	drain(t, w)
	for _, tc := range []struct {
		seq uint64
		ok  bool
	}{
		{0, false}, {1, true}, {2, true}, {3, false}, {4, true}, {5, false}, {9, false}, {1 << 60, false},
	} {
		v, ok := w.Get(tc.seq)
		require.Equal(t, tc.ok, ok, "get %d", tc.seq)
		require.Equal(t, tc.ok, w.Has(tc.seq), "has %d", tc.seq)
		if ok {
			require.Equal(t, val(tc.seq), v)
		}
	}
	w.Purge(2, nil)
	require.False(t, w.Has(1))
	require.False(t, w.Has(2))
	require.True(t, w.Has(4))
}

func TestWindowPurgeZeroesSlots(t *testing.T) {
	w, err := NewWindow[*int](4, 0)
	require.NoError(t, err)
	for i := uint64(1); i <= 4; i++ {
		x := int(i)
		require.Equal(t, Added, w.Add(i, &x))
	}
	dst := make([]*int, 4)
	_, n := w.RemoveBatch(dst)
	require.Equal(t, 4, n)
	require.Equal(t, 3, w.Purge(3, nil))
	for i := range 3 {
		require.Nil(t, w.slots[i+1], "slot of seqno %d zeroed", i+1)
	}
	require.NotNil(t, w.slots[0], "seqno 4 retained")
}

func TestWindowKeepFreedLeavesSlots(t *testing.T) {
	w, err := NewWindow[*int](4, 0)
	require.NoError(t, err)
	w.KeepFreed()
	xs := [6]int{}
	for i := uint64(1); i <= 4; i++ {
		xs[i] = int(i)
		require.Equal(t, Added, w.Add(i, &xs[i]))
	}
	dst := make([]*int, 4)
	_, n := w.RemoveBatch(dst)
	require.Equal(t, 4, n)
	require.Equal(t, 3, w.Purge(3, nil))
	require.Same(t, &xs[1], w.slots[1], "seqno 1's slot left as it was")
	for i := uint64(1); i <= 3; i++ {
		_, ok := w.Get(i)
		require.False(t, ok, "seqno %d freed", i)
	}
	// The slots are reused as if they were zero: seqno 5 takes seqno 1's.
	xs[5] = 5
	require.Equal(t, Added, w.Add(5, &xs[5]))
	v, ok := w.Get(5)
	require.True(t, ok)
	require.Same(t, &xs[5], v)
	_, n = w.RemoveBatch(dst)
	require.Equal(t, 1, n)
	require.Same(t, &xs[5], dst[0])
}

func TestRangeAndResultStrings(t *testing.T) {
	require.Equal(t, "[3,9]", Range{From: 3, To: 9}.String())
	require.Equal(t, uint64(7), Range{From: 3, To: 9}.Len())
	require.Equal(t, uint64(0), Range{From: 9, To: 3}.Len())
	for r, s := range map[AddResult]string{Added: "Added", Duplicate: "Duplicate", Old: "Old", Full: "Full", 9: "AddResult(9)"} {
		require.Equal(t, s, r.String())
	}
	require.Equal(t, 6, RunResult{Added: 1, Duplicate: 2, Old: 3, Full: true}.Processed())
}

// TestWindowUnmarkLost: marks above delivered are cleared (the seqnos are
// gaps again and may be added), those at or below it and beyond the
// capacity are not touched, held entries stay held.
func TestWindowUnmarkLost(t *testing.T) {
	w, err := NewWindow[uint64](64, 0)
	require.NoError(t, err)
	addAll(t, w, 1, 2, 5)
	require.Equal(t, 6, w.MarkLost(3, 9)) // 3, 4 and 6..9 (5 is held)
	for range 2 {
		_, _, ok := w.Remove()
		require.True(t, ok)
	}
	r, ok := w.SkipLost()
	require.True(t, ok)
	require.Equal(t, Range{From: 3, To: 4}, r)
	require.Equal(t, 4, w.UnmarkLost(1, 200), "6..9: not 3, 4 (delivered)")
	require.Equal(t, []Range{{From: 6, To: 9}}, w.AppendGaps(nil, 0))
	require.Equal(t, Added, w.Add(7, val(7)))
	got, lost := drain(t, w)
	require.Equal(t, []uint64{5}, got)
	require.Empty(t, lost)
	require.Equal(t, 0, w.UnmarkLost(1, 9), "nothing left to clear")
}
