package digest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	mA = Member{ID: 0xa, Inc: 1}
	mB = Member{ID: 0xb, Inc: 1}
	mC = Member{ID: 0xc, Inc: 1}
	mD = Member{ID: 0xd, Inc: 2}
)

// dr builds an entry from delivered/received, as the seeds write them.
func dr(m Member, delivered, received uint64) Entry {
	return Entry{Member: m, Delivered: delivered, Received: received}
}

// members returns n distinct members in a scrambled (non-sorted) view order.
func members(n int) []Member {
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = Member{ID: uint64((i*7919)%n + 1), Inc: uint32(i % 3)}
	}
	return ms
}

func bigDigest(n int) Digest {
	es := make([]Entry, n)
	for i, m := range members(n) {
		es[i] = Entry{Member: m, Low: uint64(i), Delivered: uint64(2 * i), Received: uint64(3 * i)}
	}
	return New(es)
}

func TestDigestLookup(t *testing.T) {
	for _, n := range []int{0, 1, linearMax, linearMax + 1, 100, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			d := bigDigest(n)
			require.Equal(t, n, d.Len())
			for i, m := range members(n) {
				e, ok := d.Lookup(m)
				require.True(t, ok)
				require.Equal(t, Entry{Member: m, Low: uint64(i), Delivered: uint64(2 * i), Received: uint64(3 * i)}, e)
				require.Equal(t, e, d.At(i))
				require.Equal(t, i, d.Index(m))
				require.True(t, d.Contains(m))
			}
			for _, m := range []Member{{}, {ID: uint64(n + 1)}, {ID: 1, Inc: 7}, {ID: ^uint64(0), Inc: ^uint32(0)}} {
				_, ok := d.Lookup(m)
				require.False(t, ok, m)
				require.False(t, d.Contains(m))
				require.Equal(t, -1, d.Index(m))
			}
		})
	}
}

func TestDigestLookupAllocs(t *testing.T) {
	for _, n := range []int{0, 4, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			d := bigDigest(n)
			ms := members(max(n, 1))
			var sink uint64
			allocs := testing.AllocsPerRun(100, func() {
				for _, m := range ms[:min(len(ms), 64)] {
					e, _ := d.Lookup(m)
					sink += e.Delivered
				}
			})
			require.Zero(t, allocs)
			_ = sink
		})
	}
}

func TestDigestZeroValue(t *testing.T) {
	var d Digest
	require.Zero(t, d.Len())
	require.True(t, d.IsEmpty())
	require.Equal(t, "[]", d.String())
	require.Empty(t, d.Members())
	require.Empty(t, d.Entries())
	require.True(t, d.Equal(New(nil)))
	require.True(t, d.Equal(New([]Entry{})))
	require.False(t, d.Equal(New([]Entry{dr(mA, 0, 0)})))
	require.NoError(t, d.Matches(nil))
}

func TestDigestImmutable(t *testing.T) {
	es := []Entry{dr(mA, 1, 2), dr(mB, 3, 4)}
	d := New(es)
	es[0].Delivered = 99
	ms := d.Members()
	ms[0] = mC
	got := d.Entries()
	got[1].Received = 77
	require.Equal(t, "[a.1: 0/1/2, b.1: 0/3/4]", d.String())
	require.Equal(t, []Member{mA, mB}, d.Members())
}

func TestDigestDuplicates(t *testing.T) {
	tests := []struct {
		name string
		in   []Entry
		want []Entry
	}{
		{"small", []Entry{dr(mA, 1, 1), dr(mB, 2, 2), dr(mA, 9, 9)}, []Entry{dr(mA, 1, 1), dr(mB, 2, 2)}},
		{"none", []Entry{dr(mA, 1, 1), dr(mB, 2, 2)}, []Entry{dr(mA, 1, 1), dr(mB, 2, 2)}},
	}
	// A large one: 20 distinct members, then each again, then the first twice more.
	var in, want []Entry
	for i := range 20 {
		e := dr(Member{ID: uint64(100 - i)}, uint64(i), uint64(i))
		in, want = append(in, e), append(want, e)
	}
	for i := range 20 {
		in = append(in, dr(Member{ID: uint64(100 - i)}, 1000, 1000))
	}
	in = append(in, dr(Member{ID: 100}, 5000, 5000), dr(Member{ID: 100}, 6000, 6000))
	tests = append(tests, struct {
		name string
		in   []Entry
		want []Entry
	}{"large", in, want})

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := New(tt.in)
			require.Equal(t, tt.want, d.Entries())
			for i, e := range tt.want {
				got, ok := d.Lookup(e.Member)
				require.True(t, ok)
				require.Equal(t, e, got)
				require.Equal(t, i, d.Index(e.Member))
			}
		})
	}
}

func TestDigestEqual(t *testing.T) {
	base := New([]Entry{dr(mA, 1, 2), dr(mB, 3, 4)})
	tests := []struct {
		name string
		o    Digest
		want bool
	}{
		{"same", New([]Entry{dr(mA, 1, 2), dr(mB, 3, 4)}), true},
		{"itself", base, true},
		{"order", New([]Entry{dr(mB, 3, 4), dr(mA, 1, 2)}), false},
		{"delivered", New([]Entry{dr(mA, 1, 2), dr(mB, 2, 4)}), false},
		{"low", New([]Entry{dr(mA, 1, 2), {Member: mB, Low: 1, Delivered: 3, Received: 4}}), false},
		{"shorter", New([]Entry{dr(mA, 1, 2)}), false},
		{"empty", Digest{}, false},
		{"incarnation", New([]Entry{dr(mA, 1, 2), dr(Member{ID: 0xb, Inc: 2}, 3, 4)}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, base.Equal(tt.o))
			require.Equal(t, tt.want, tt.o.Equal(base))
		})
	}
}

func TestDigestString(t *testing.T) {
	tests := []struct {
		name string
		d    Digest
		want string
	}{
		{"empty", Digest{}, "[]"},
		{"one", New([]Entry{{Member: mA, Low: 0, Delivered: 50, Received: 52}}), "[a.1: 0/50/52]"},
		{"view order", New([]Entry{
			{Member: mC, Low: 10, Delivered: 26, Received: 35},
			{Member: mA, Low: 0, Delivered: 50, Received: 52},
			{Member: Member{ID: 0xdeadbeef, Inc: 42}, Low: 1, Delivered: 2, Received: 3},
		}), "[c.1: 10/26/35, a.1: 0/50/52, deadbeef.42: 1/2/3]"},
		{"max", New([]Entry{{Member: Member{ID: ^uint64(0), Inc: ^uint32(0)}, Low: ^uint64(0), Delivered: ^uint64(0), Received: ^uint64(0)}}),
			"[ffffffffffffffff.4294967295: 18446744073709551615/18446744073709551615/18446744073709551615]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tt.d.String())
			require.Equal(t, tt.want, string(tt.d.AppendText(nil)))
		})
	}
	// Entry and Member formats agree.
	e := Entry{Member: Member{ID: 0xabc, Inc: 3}, Low: 1, Delivered: 2, Received: 3}
	require.Equal(t, e.Member.String()+": 1/2/3", e.String())
}

func TestDigestMatches(t *testing.T) {
	d := New([]Entry{dr(mA, 1, 1), dr(mB, 2, 2), dr(mC, 3, 3)})
	tests := []struct {
		name    string
		view    []Member
		missing []Member
		extra   []Member
	}{
		{"exact", []Member{mA, mB, mC}, nil, nil},
		{"other order", []Member{mC, mA, mB}, nil, nil},
		{"view lists twice", []Member{mA, mB, mC, mA}, nil, nil},
		{"missing", []Member{mA, mB, mC, mD}, []Member{mD}, nil},
		{"extra", []Member{mA, mC}, nil, []Member{mB}},
		{"both", []Member{mA, mD}, []Member{mD}, []Member{mB, mC}},
		{"new incarnation", []Member{mA, mB, {ID: 0xc, Inc: 2}}, []Member{{ID: 0xc, Inc: 2}}, []Member{mC}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := d.Matches(tt.view)
			if tt.missing == nil && tt.extra == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrMismatch)
			var me *MismatchError
			require.ErrorAs(t, err, &me)
			require.Equal(t, tt.missing, me.Missing)
			require.Equal(t, tt.extra, me.Extra)
			for _, m := range append(tt.missing, tt.extra...) {
				require.Contains(t, err.Error(), m.String())
			}
		})
	}
}

// The issue's merge case: delivered/received per member.
func TestMutableMergeSeedCase(t *testing.T) {
	view := []Member{mA, mB, mC}
	md := NewMutable(view)
	md.MergeDigest(New([]Entry{dr(mA, 499, 502), dr(mB, 26, 27), dr(mC, 26, 35)}))
	md.MergeDigest(New([]Entry{dr(mA, 500, 501), dr(mB, 26, 26), dr(mC, 25, 33)}))
	d, err := md.Complete()
	require.NoError(t, err)
	require.Equal(t, "[a.1: 0/500/502, b.1: 0/26/27, c.1: 0/26/35]", d.String())
	require.True(t, d.Equal(New([]Entry{dr(mA, 500, 502), dr(mB, 26, 27), dr(mC, 26, 35)})))
}

func TestMutableMerge(t *testing.T) {
	tests := []struct {
		name string
		ops  []Entry // merged in order into a digest over {A, B}
		want Entry   // A's entry
		ok   bool    // A set
	}{
		{"unset takes other", []Entry{{Member: mA, Low: 3, Delivered: 5, Received: 9}}, Entry{Member: mA, Low: 3, Delivered: 5, Received: 9}, true},
		{"unset takes zeros", []Entry{{Member: mA}}, Entry{Member: mA}, true},
		{"max per number", []Entry{
			{Member: mA, Low: 3, Delivered: 5, Received: 6},
			{Member: mA, Low: 1, Delivered: 8, Received: 4},
			{Member: mA, Low: 4, Delivered: 2, Received: 5},
		}, Entry{Member: mA, Low: 4, Delivered: 8, Received: 6}, true},
		{"non-member ignored", []Entry{{Member: mC, Delivered: 5}}, Entry{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := NewMutable([]Member{mA, mB})
			for _, e := range tt.ops {
				require.Equal(t, e.Member != mC, md.Merge(e))
			}
			got, ok := md.Lookup(mA)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.ok, md.IsSet(mA))
			require.False(t, md.IsSet(mB))
			require.False(t, md.IsSet(mC))
		})
	}
}

func TestMutableSet(t *testing.T) {
	md := NewMutable([]Member{mA, mB})
	require.False(t, md.Set(dr(mC, 7, 7)), "non-member")
	require.False(t, md.Set(dr(Member{ID: 0xa, Inc: 2}, 7, 7)), "other incarnation")
	require.Equal(t, []Member{mA, mB}, md.Unset())
	require.Equal(t, 2, md.NumUnset())

	require.True(t, md.Set(dr(mA, 10, 12)))
	require.True(t, md.Set(dr(mA, 4, 5)), "set overwrites, no max")
	e, ok := md.Lookup(mA)
	require.True(t, ok)
	require.Equal(t, dr(mA, 4, 5), e)
	require.Equal(t, []Member{mB}, md.Unset())
	require.Equal(t, 1, md.NumUnset())
	require.Equal(t, "[a.1: 0/4/5, b.1: unset]", md.String())

	require.Equal(t, 1, md.SetDigest(New([]Entry{dr(mC, 1, 1), dr(mB, 0, 0)})))
	require.Nil(t, md.Unset())
	d, err := md.Complete()
	require.NoError(t, err)
	require.Equal(t, "[a.1: 0/4/5, b.1: 0/0/0]", d.String())
	require.False(t, d.Contains(mC))
}

// Seed 002: a view member the protocol's digest lacks keeps the digest from
// completing, and the error names every such member.
func TestMutableCompleteIncomplete(t *testing.T) {
	view := []Member{mA, mB, mC, mD}
	tests := []struct {
		name  string
		fill  []Entry
		unset []Member
	}{
		{"none set", nil, []Member{mA, mB, mC, mD}},
		{"C missing (seed 002)", []Entry{dr(mA, 25, 25), dr(mB, 10, 10), dr(mD, 0, 0)}, []Member{mC}},
		{"C and D missing", []Entry{dr(mA, 25, 25), dr(mB, 10, 10)}, []Member{mC, mD}},
		{"non-members do not count", []Entry{dr(mA, 1, 1), dr(mB, 1, 1), dr(Member{ID: 0xc, Inc: 9}, 1, 1)}, []Member{mC, mD}},
		{"complete", []Entry{dr(mA, 25, 25), dr(mB, 10, 10), dr(mC, 17, 17), dr(mD, 0, 0)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := NewMutable(view)
			md.MergeDigest(New(tt.fill))
			d, err := md.Complete()
			if tt.unset == nil {
				require.NoError(t, err)
				require.NoError(t, d.Matches(view))
				return
			}
			require.ErrorIs(t, err, ErrIncomplete)
			require.True(t, d.IsEmpty())
			var ie *IncompleteError
			require.True(t, errors.As(err, &ie))
			require.Equal(t, tt.unset, ie.Unset)
			require.Equal(t, len(view), ie.Total)
			for _, m := range tt.unset {
				require.Contains(t, err.Error(), m.String())
			}
			for _, m := range view {
				if !containsMember(tt.unset, m) {
					require.NotContains(t, err.Error(), m.String())
				}
			}
		})
	}
	md := NewMutable([]Member{mA, mB, mC})
	md.Set(dr(mA, 1, 1))
	_, err := md.Complete()
	require.EqualError(t, err, "digest incomplete: 2 of 3 members unset: [b.1 c.1]")
}

func containsMember(ms []Member, m Member) bool {
	for _, x := range ms {
		if x == m {
			return true
		}
	}
	return false
}

func TestMutableCompleteIsSnapshot(t *testing.T) {
	md := NewMutable(members(50))
	for i, m := range members(50) {
		md.Set(dr(m, uint64(i), uint64(i)))
	}
	d, err := md.Complete()
	require.NoError(t, err)
	before := d.String()
	md.Set(dr(members(50)[3], 999, 999))
	md.Reset([]Member{mA})
	require.Equal(t, before, d.String())
	for i, m := range members(50) {
		e, ok := d.Lookup(m)
		require.True(t, ok)
		require.Equal(t, uint64(i), e.Delivered)
	}
}

func TestMutableReset(t *testing.T) {
	tests := []struct {
		name string
		from []Member
		to   []Member
	}{
		{"small to small", []Member{mA, mB}, []Member{mC, mD, mA}},
		{"large to small", members(100), []Member{mB}},
		{"small to large", []Member{mA}, members(200)},
		{"to empty", members(20), nil},
		{"duplicates", nil, []Member{mA, mB, mA}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := NewMutable(tt.from)
			for _, m := range tt.from {
				md.Set(dr(m, 5, 5))
			}
			md.Reset(tt.to)
			want := []Member{}
			for _, m := range tt.to {
				if !containsMember(want, m) {
					want = append(want, m)
				}
			}
			require.Equal(t, want, md.Members())
			require.Equal(t, len(want), md.Len())
			require.Equal(t, len(want), md.NumUnset())
			for _, m := range tt.from {
				require.False(t, md.IsSet(m))
			}
			for i, m := range want {
				require.True(t, md.Set(dr(m, uint64(i), 0)))
			}
			d, err := md.Complete()
			require.NoError(t, err)
			require.NoError(t, d.Matches(tt.to))
		})
	}
}

func TestMutableEmpty(t *testing.T) {
	md := NewMutable(nil)
	d, err := md.Complete()
	require.NoError(t, err)
	require.True(t, d.IsEmpty())
	require.False(t, md.Set(dr(mA, 1, 1)))
}

func TestMutableHotPathAllocs(t *testing.T) {
	ms := members(1000)
	md := NewMutable(ms)
	allocs := testing.AllocsPerRun(20, func() {
		for i, m := range ms {
			md.Merge(dr(m, uint64(i), uint64(i)))
			_ = md.IsSet(m)
		}
		md.Reset(ms)
	})
	require.Zero(t, allocs)
}

func TestHistory(t *testing.T) {
	d := func(n uint64) Digest { return New([]Entry{dr(mA, n, n)}) }
	tests := []struct {
		name  string
		cap   int
		adds  int
		first uint64 // delivered in the oldest kept record
	}{
		{"empty", 3, 0, 0},
		{"partial", 3, 2, 1},
		{"full", 3, 3, 1},
		{"wrapped", 3, 7, 5},
		{"wrapped twice exactly", 3, 6, 4},
		{"cap 1", 1, 4, 4},
		{"cap 0 means 1", 0, 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHistory(tt.cap)
			for i := 1; i <= tt.adds; i++ {
				h.Add(time.Duration(i)*time.Millisecond, ReasonMerge, d(uint64(i)))
			}
			recs := h.Records()
			want := min(tt.adds, max(tt.cap, 1))
			require.Len(t, recs, want)
			require.Equal(t, want, h.Len())
			require.Equal(t, uint64(tt.adds), h.Total())
			for i, r := range recs {
				n := tt.first + uint64(i)
				require.Equal(t, time.Duration(n)*time.Millisecond, r.At)
				require.Equal(t, ReasonMerge, r.Reason)
				require.True(t, r.Digest.Equal(d(n)))
			}
			if want > 0 {
				require.Equal(t, uint64(tt.adds), recs[len(recs)-1].Digest.At(0).Delivered, "newest kept")
			}
		})
	}
}

func TestHistoryString(t *testing.T) {
	h := NewHistory(2)
	require.Equal(t, "digest history (0 of 0):", h.String())
	h.Add(time.Second, ReasonSet, New([]Entry{dr(mA, 1, 2)}))
	h.Add(1500*time.Millisecond, ReasonOverwrite, New([]Entry{dr(mA, 3, 4), dr(mB, 0, 0)}))
	h.Add(2*time.Second, ReasonMsgNotFound, New([]Entry{{Member: mB, Low: 150, Delivered: 200, Received: 201}}))
	require.Equal(t, "digest history (2 of 3):\n"+
		"  1.5s overwrite [a.1: 0/3/4, b.1: 0/0/0]\n"+
		"  2s msg_not_found [b.1: 150/200/201]", h.String())
	require.Equal(t, "2s msg_not_found [b.1: 150/200/201]", h.Records()[1].String())
}

func TestHistoryRecordsAreCopies(t *testing.T) {
	h := NewHistory(2)
	h.Add(1, ReasonSet, Digest{})
	recs := h.Records()
	recs[0].Reason = "changed"
	require.Equal(t, ReasonSet, h.Records()[0].Reason)
}

func TestHistoryAddAllocs(t *testing.T) {
	h := NewHistory(8)
	d := bigDigest(10)
	allocs := testing.AllocsPerRun(100, func() { h.Add(time.Second, ReasonMerge, d) })
	require.Zero(t, allocs)
}

func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{4, 16, 1000} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			d := bigDigest(n)
			ms := members(n)
			var sink uint64
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				e, _ := d.Lookup(ms[i%n])
				sink += e.Delivered
			}
			_ = sink
		})
	}
}

func BenchmarkMutableMerge(b *testing.B) {
	ms := members(1000)
	md := NewMutable(ms)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		md.Merge(dr(ms[i%len(ms)], uint64(i), uint64(i)))
	}
}

func BenchmarkNew(b *testing.B) {
	es := bigDigest(1000).Entries()
	b.ReportAllocs()
	for b.Loop() {
		_ = New(es)
	}
}

func ExampleMutableDigest_Complete() {
	a, b, c := Member{ID: 0xa, Inc: 1}, Member{ID: 0xb, Inc: 1}, Member{ID: 0xc, Inc: 1}
	md := NewMutable([]Member{a, b, c}) // the new view
	md.MergeDigest(New([]Entry{         // the protocol's digest lacks c
		{Member: a, Delivered: 25, Received: 25},
		{Member: b, Delivered: 10, Received: 10},
	}))
	_, err := md.Complete()
	fmt.Println(err)
	md.Set(Entry{Member: c, Low: 45, Delivered: 50, Received: 50})
	d, err := md.Complete()
	fmt.Println(d, err)
	// Output:
	// digest incomplete: 1 of 3 members unset: [c.1]
	// [a.1: 0/25/25, b.1: 0/10/10, c.1: 45/50/50] <nil>
}
