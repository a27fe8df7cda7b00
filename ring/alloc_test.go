package ring

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// payload is a value type like the ones nakack stores: a reference to a
// pooled buffer and a position in it.
type payload struct {
	buf *[64]byte
	off int
}

// TestZeroAllocs proves that the hot paths allocate nothing in steady state.
func TestZeroAllocs(t *testing.T) {
	const capacity = 1024
	buf := new([64]byte)
	released := 0
	release := func(payload) { released++ }

	newWin := func() *Window[payload] {
		w, err := NewWindow[payload](capacity, 0)
		require.NoError(t, err)
		return w
	}
	// steady keeps a window flowing: in order, delivered, purged.
	type steady struct {
		w    *Window[payload]
		next uint64
	}
	add := func(s *steady) {
		if s.w.Add(s.next, payload{buf, int(s.next)}) == Full {
			s.w.Purge(s.w.Delivered(), release)
			if s.w.Add(s.next, payload{buf, int(s.next)}) != Added {
				panic("add after purge")
			}
		}
		s.next++
	}
	run := make([]payload, 16)
	dst := make([]payload, 16)
	gaps := make([]Range, 0, 64)

	for _, tc := range []struct {
		name string
		f    func(s *steady)
	}{
		{"Add", func(s *steady) {
			add(s)
			s.w.Remove()
		}},
		{"AddRun", func(s *steady) {
			if r := s.w.AddRun(s.next, run); r.Full {
				s.w.Purge(s.w.Delivered(), nil)
				k := uint64(r.Processed())
				if r := s.w.AddRun(s.next+k, run[k:]); r.Full {
					panic("add run after purge")
				}
			}
			s.next += uint64(len(run))
			s.w.RemoveBatch(dst)
		}},
		{"Remove", func(s *steady) {
			add(s)
			if _, _, ok := s.w.Remove(); !ok {
				panic("remove")
			}
		}},
		{"RemoveBatch", func(s *steady) {
			for range 4 {
				add(s)
			}
			if _, n := s.w.RemoveBatch(dst); n != 4 {
				panic("remove batch")
			}
		}},
		{"MarkLost+SkipLost", func(s *steady) {
			add(s)
			s.w.Purge(s.w.Delivered(), nil)
			if s.w.MarkLost(s.next, s.next+2) != 3 {
				panic("mark lost")
			}
			s.next += 3
			s.w.Remove()
			if r, ok := s.w.SkipLost(); !ok || r.Len() != 3 {
				panic("skip lost")
			}
		}},
		{"NextGap", func(s *steady) {
			s.next++ // leave a gap
			add(s)
			add(s)
			if _, ok := s.w.NextGap(0); !ok {
				panic("no gap")
			}
			s.w.Add(s.next-3, payload{buf, 0}) // repair
			for {
				if _, _, ok := s.w.Remove(); !ok {
					break
				}
			}
		}},
		{"AppendGaps", func(s *steady) {
			s.next++
			add(s)
			s.next++
			add(s)
			gaps = s.w.AppendGaps(gaps[:0], 0)
			if len(gaps) != 2 || s.w.MissingCount() != 2 {
				panic("gaps")
			}
			s.w.Add(s.next-2, payload{buf, 0})
			s.w.Add(s.next-4, payload{buf, 0})
			s.w.RemoveBatch(dst)
		}},
		{"Get", func(s *steady) {
			add(s)
			s.w.Remove()
			if _, ok := s.w.Get(s.next - 1); !ok {
				panic("get")
			}
		}},
		{"Purge", func(s *steady) {
			add(s)
			s.w.Remove()
			s.w.Purge(s.next-1, release)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &steady{w: newWin(), next: 1}
			for range 3 * capacity { // warm up past several laps
				tc.f(s)
			}
			require.Zero(t, testing.AllocsPerRun(10*capacity, func() { tc.f(s) }))
		})
	}

	t.Run("Publication", func(t *testing.T) {
		p, err := NewPublication[payload](capacity)
		require.NoError(t, err)
		f := func() {
			first, ok := p.TryClaim(4)
			if !ok {
				panic("claim")
			}
			for i := range uint64(4) {
				p.Commit(first+i, payload{buf, int(i)})
			}
			if _, n := p.Poll(dst); n != 4 {
				panic("poll")
			}
		}
		for range capacity {
			f()
		}
		require.Zero(t, testing.AllocsPerRun(10*capacity, f))
	})
}
