package ring

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// model is a map-based reference implementation of Window's semantics,
// written for clarity, not speed.
type model struct {
	capacity                 uint64
	low, delivered, received uint64
	held                     map[uint64]uint64
	lost                     map[uint64]bool
}

func newModel(capacity int, start uint64) *model {
	return &model{capacity: uint64(capacity), low: start, delivered: start, received: start,
		held: map[uint64]uint64{}, lost: map[uint64]bool{}}
}

func (m *model) add(seq, v uint64) AddResult {
	switch {
	case seq <= m.delivered:
		return Old
	case seq-m.low > m.capacity:
		return Full
	case m.lost[seq]:
		return Old
	}
	if _, ok := m.held[seq]; ok {
		return Duplicate
	}
	m.held[seq] = v
	m.received = max(m.received, seq)
	return Added
}

func (m *model) addRun(first uint64, vs []uint64) RunResult {
	var r RunResult
	for i, v := range vs {
		seq := first + uint64(i)
		if seq > m.delivered && seq-m.low > m.capacity {
			r.Full = true
			break
		}
		switch m.add(seq, v) {
		case Added:
			r.Added++
		case Duplicate:
			r.Duplicate++
		case Old:
			r.Old++
		}
	}
	return r
}

// fresh reports whether every seqno of the n from first could be added
// (above delivered, within the capacity, neither held nor lost).
func (m *model) fresh(first uint64, n int) bool {
	for seq := first; seq < first+uint64(n); seq++ {
		_, held := m.held[seq]
		if seq <= m.delivered || seq-m.low > m.capacity || held || m.lost[seq] {
			return false
		}
	}
	return true
}

// reserveRun inserts vs at first as nakack does: Reserve, fill and Commit
// when the window offers the slots, AddRun otherwise. The window must offer
// them exactly when the run is fresh in the model and does not wrap.
func reserveRun(t *testing.T, w *Window[uint64], m *model, first uint64, vs []uint64, msg string) {
	t.Helper()
	want := len(vs) > 0 && m.fresh(first, len(vs)) && first&w.mask+uint64(len(vs)) <= w.capacity
	slots := w.Reserve(first, len(vs))
	require.Equal(t, want, slots != nil, msg)
	if slots == nil {
		require.Equal(t, m.addRun(first, vs), w.AddRun(first, vs), msg)
		return
	}
	require.Equal(t, RunResult{Added: len(vs)}, m.addRun(first, vs), msg)
	copy(slots, vs)
	w.Commit(first, len(vs))
}

func (m *model) settled(seq uint64) bool {
	_, ok := m.held[seq]
	return ok || m.lost[seq]
}

func (m *model) remove() (uint64, uint64, bool) {
	v, ok := m.held[m.delivered+1]
	if !ok {
		return 0, 0, false
	}
	m.delivered++
	return m.delivered, v, true
}

func (m *model) skipLost() (Range, bool) {
	from := m.delivered + 1
	for m.lost[m.delivered+1] {
		m.delivered++
	}
	return Range{From: from, To: m.delivered}, m.delivered >= from
}

func (m *model) markLost(from, to uint64) int {
	from = max(from, m.delivered+1)
	to = min(to, m.low+m.capacity)
	if from > to {
		return 0
	}
	n := 0
	for s := from; s <= to; s++ {
		if !m.settled(s) {
			m.lost[s] = true
			n++
		}
	}
	m.received = max(m.received, to)
	return n
}

func (m *model) free(from, to uint64, rel *[]uint64) int {
	n := 0
	for s := from; s <= to && s != 0; s++ {
		if v, ok := m.held[s]; ok {
			*rel = append(*rel, v)
			delete(m.held, s)
			n++
		}
		delete(m.lost, s)
	}
	return n
}

func (m *model) purge(upto uint64, rel *[]uint64) int {
	limit := min(upto, m.delivered)
	if limit <= m.low {
		return 0
	}
	n := m.free(m.low+1, limit, rel)
	m.low = limit
	return n
}

func (m *model) get(seq uint64) (uint64, bool) {
	if seq <= m.low || seq > m.received {
		return 0, false
	}
	v, ok := m.held[seq]
	return v, ok
}

func (m *model) gaps() []Range {
	var gs []Range
	for s := m.delivered + 1; s <= m.received; s++ {
		if m.settled(s) {
			continue
		}
		if n := len(gs); n > 0 && gs[n-1].To == s-1 {
			gs[n-1].To = s
		} else {
			gs = append(gs, Range{From: s, To: s})
		}
	}
	return gs
}

func (m *model) rewind(to uint64) error {
	if to > m.delivered {
		return ErrRange
	}
	if to < m.low {
		return ErrNotRetained
	}
	for s := to + 1; s <= m.delivered; s++ {
		if !m.settled(s) {
			return ErrNotRetained
		}
	}
	m.delivered = to
	return nil
}

func (m *model) skip(to uint64, rel *[]uint64) int {
	if to <= m.delivered {
		return 0
	}
	n := m.free(m.delivered+1, to, rel)
	if to-m.low > m.capacity {
		newLow := to - m.capacity
		n += m.free(m.low+1, min(newLow, m.delivered), rel)
		m.low = newLow
	}
	m.delivered = to
	m.received = max(m.received, to)
	return n
}

// TestWindowAgainstModel drives windows of several capacities and start
// points through random operation sequences and compares every result and
// the state after every step with the reference model, with freed slots
// zeroed and left as they are (KeepFreed: a stale entry would show as
// another seqno's value).
func TestWindowAgainstModel(t *testing.T) {
	steps := modelSteps
	for _, tc := range []struct {
		capacity int
		start    uint64
	}{
		{1, 0}, {2, 3}, {4, 0}, {8, 13}, {32, 0}, {64, 60}, {128, 5}, {256, 1<<40 - 77}, {512, 0},
	} {
		for seed := uint64(1); seed <= 3; seed++ {
			for _, keep := range []bool{false, true} {
				t.Run(fmt.Sprintf("cap%d/start%d/seed%d/keep=%v", tc.capacity, tc.start, seed, keep), func(t *testing.T) {
					runModel(t, tc.capacity, tc.start, seed, steps, keep)
				})
			}
		}
	}
}

func runModel(t *testing.T, capacity int, start, seed uint64, steps int, keepFreed bool) {
	rng := rand.New(rand.NewPCG(seed, uint64(capacity)))
	w, err := NewWindow[uint64](capacity, start)
	require.NoError(t, err)
	if keepFreed {
		w.KeepFreed()
	}
	m := newModel(capacity, start)
	c := uint64(capacity)
	// around picks a seqno near the interesting part of the window.
	around := func() uint64 {
		lo := m.low
		if lo > 2 {
			lo -= 2
		}
		return lo + rng.Uint64N(c+c/2+4)
	}
	dst := make([]uint64, 2*capacity+3)
	var relW, relM []uint64
	release := func(v uint64) { relW = append(relW, v) }
	for step := range steps {
		op := rng.IntN(100)
		msg := fmt.Sprintf("step %d op %d", step, op)
		relW, relM = relW[:0], relM[:0]
		switch {
		case op < 30:
			s := around()
			require.Equal(t, m.add(s, val(s)), w.Add(s, val(s)), msg)
		case op < 38:
			first := around()
			n := rng.IntN(capacity + 3)
			require.Equal(t, m.addRun(first, vals(first, n)), w.AddRun(first, vals(first, n)), msg)
		case op < 45:
			first := around()
			n := rng.IntN(capacity + 3)
			reserveRun(t, w, m, first, vals(first, n), msg)
		case op < 55:
			ws, wv, wok := w.Remove()
			ms, mv, mok := m.remove()
			require.Equal(t, []any{ms, mv, mok}, []any{ws, wv, wok}, msg)
		case op < 65:
			n := rng.IntN(len(dst) + 1)
			mfirst := m.delivered + 1
			var want []uint64
			for range n {
				_, v, ok := m.remove()
				if !ok {
					break
				}
				want = append(want, v)
			}
			if rng.IntN(2) == 0 {
				first, got := w.RemoveBatch(dst[:n])
				require.Equal(t, mfirst, first, msg)
				require.Equal(t, want, append([]uint64(nil), dst[:got]...), msg)
				break
			}
			// The same through Peek and Advance, which stop at the end
			// of the slots: read in place, in as many calls as it takes.
			var got []uint64
			for {
				first, run := w.Peek(n - len(got))
				require.Equal(t, mfirst+uint64(len(got)), first, msg)
				if len(run) == 0 {
					break
				}
				got = append(got, run...)
				w.Advance(len(run))
			}
			require.Equal(t, want, got, msg)
		case op < 70:
			r, ok := m.skipLost()
			wr, wok := w.SkipLost()
			require.Equal(t, ok, wok, msg)
			if ok {
				require.Equal(t, r, wr, msg)
			}
		case op < 76:
			from := around()
			to := from + rng.Uint64N(c/2+2)
			require.Equal(t, m.markLost(from, to), w.MarkLost(from, to), msg)
		case op < 84:
			upto := m.low + rng.Uint64N(c+2)
			require.Equal(t, m.purge(upto, &relM), w.Purge(upto, release), msg)
			require.Equal(t, relM, relW, msg)
		case op < 90:
			s := around()
			mv, mok := m.get(s)
			wv, wok := w.Get(s)
			require.Equal(t, mok, wok, msg)
			require.Equal(t, mv, wv, msg)
			require.Equal(t, mok, w.Has(s), msg)
		case op < 95:
			after := m.delivered
			if rng.IntN(2) == 0 && m.received > m.delivered {
				after += rng.Uint64N(m.received - m.delivered)
			}
			var want []Range
			for _, g := range m.gaps() {
				if g.To > after {
					g.From = max(g.From, after+1)
					want = append(want, g)
				}
			}
			g, ok := w.NextGap(after)
			require.Equal(t, len(want) > 0, ok, msg)
			if ok {
				require.Equal(t, want[0], g, msg)
			}
			all := m.gaps()
			require.Equal(t, all, w.AppendGaps(nil, 0), msg)
			missing := 0
			for _, g := range all {
				missing += int(g.Len())
			}
			require.Equal(t, missing, w.MissingCount(), msg)
		case op < 97:
			to := m.low + rng.Uint64N(m.delivered-m.low+3)
			merr := m.rewind(to)
			werr := w.Rewind(to)
			if merr == nil {
				require.NoError(t, werr, msg)
			} else {
				require.ErrorIs(t, werr, merr, msg)
			}
		default:
			to := m.delivered + rng.Uint64N(2*c+2)
			require.Equal(t, m.skip(to, &relM), w.Skip(to, release), msg)
			require.ElementsMatch(t, relM, relW, msg)
		}
		require.Equal(t, [3]uint64{m.low, m.delivered, m.received},
			[3]uint64{w.Low(), w.Delivered(), w.Received()}, msg)
	}
}
