// Package digest owns the digests of nakcast: the per-member seqno state that
// views, joins, merges, stability and state transfer exchange.
//
// It provides three things:
//   - Digest: an immutable list of entries in view order, one per member, each
//     with the member's purge point (Low), highest delivered and highest
//     received seqno, with a member lookup that does not allocate.
//   - MutableDigest: a digest under construction over a fixed member list whose
//     entries all start unset and that refuses to complete while any entry is
//     still unset, so a view and its digest always match (seed 002: a missing
//     entry must never silently become seqno 0).
//   - History: a bounded record of the last digest changes with their reason,
//     printed for diagnostics (seed 000: MSG_NOT_FOUND logs it).
//
// The package must not allocate per lookup, know about I/O or encodings (wire/
// encodes digests) or read the wall clock: times are durations since an epoch
// chosen by the caller.
package digest

import (
	"slices"
	"strconv"
)

// Entry is one member's state in a digest. Seqnos start at 1; 0 means nothing.
// For a sender's own state Low <= Delivered <= Received normally holds, but the
// package does not enforce it: a digest carries what it was given.
type Entry struct {
	Member Member
	// Low is the highest seqno purged as stable: nothing at or below it can
	// be retransmitted any more.
	Low uint64
	// Delivered is the highest seqno delivered (hd).
	Delivered uint64
	// Received is the highest seqno received (hr).
	Received uint64
}

// String formats e as "member: low/delivered/received".
func (e Entry) String() string { return string(e.appendText(nil)) }

func (e Entry) appendText(b []byte) []byte {
	b = appendMember(b, e.Member)
	b = append(b, ": "...)
	b = strconv.AppendUint(b, e.Low, 10)
	b = append(b, '/')
	b = strconv.AppendUint(b, e.Delivered, 10)
	b = append(b, '/')
	return strconv.AppendUint(b, e.Received, 10)
}

// appendMember appends m in Member.String's format ("id.inc", id in hex)
// without going through fmt.
func appendMember(b []byte, m Member) []byte {
	b = strconv.AppendUint(b, m.ID, 16)
	b = append(b, '.')
	return strconv.AppendUint(b, uint64(m.Inc), 10)
}

// linearMax is the size up to which lookups scan entries instead of
// binary-searching a sorted index: for small views a scan is faster and
// building no index keeps construction cheap.
const linearMax = 8

// key is one slot of the sorted lookup index: a member and its position in
// view order. 16 bytes, like Member alone (pos fills Member's padding).
type key struct {
	id  uint64
	inc uint32
	pos uint32
}

// keyLess orders keys by member, then by position, so that among duplicates of
// one member the first in view order comes first.
func keyLess(a, b key) int {
	switch {
	case a.id < b.id:
		return -1
	case a.id > b.id:
		return 1
	case a.inc < b.inc:
		return -1
	case a.inc > b.inc:
		return 1
	case a.pos < b.pos:
		return -1
	case a.pos > b.pos:
		return 1
	}
	return 0
}

// buildIndex fills idx (reused if large enough) with the members of entries
// sorted by member, or returns nil when entries is small enough to scan.
func buildIndex(idx []key, entries []Entry) []key {
	if len(entries) <= linearMax {
		return idx[:0]
	}
	if cap(idx) < len(entries) {
		idx = make([]key, 0, len(entries))
	}
	idx = idx[:0]
	for i, e := range entries {
		idx = append(idx, key{id: e.Member.ID, inc: e.Member.Inc, pos: uint32(i)})
	}
	slices.SortFunc(idx, keyLess)
	return idx
}

// find returns the position of m in entries, using idx when it is not empty.
func find(entries []Entry, idx []key, m Member) int {
	if len(idx) == 0 {
		for i := range entries {
			if entries[i].Member == m {
				return i
			}
		}
		return -1
	}
	lo, hi := 0, len(idx)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		k := &idx[mid]
		if k.id < m.ID || (k.id == m.ID && k.inc < m.Inc) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(idx) && idx[lo].id == m.ID && idx[lo].inc == m.Inc {
		return int(idx[lo].pos)
	}
	return -1
}

// Digest is an immutable list of entries, one per member, in view order. The
// zero value is the empty digest. A Digest is one pointer wide, cheap to pass
// and copy, and safe for concurrent use: nothing can change it once built.
type Digest struct {
	d *digestData
}

type digestData struct {
	entries []Entry
	idx     []key // sorted by member; empty when len(entries) <= linearMax
}

// New returns a digest holding a copy of entries, in their order. A member
// that appears more than once keeps its first entry; later ones are dropped
// (a digest never holds a member twice).
func New(entries []Entry) Digest {
	if len(entries) == 0 {
		return Digest{}
	}
	es, idx := dedupe(slices.Clone(entries), nil)
	return Digest{&digestData{entries: es, idx: idx}}
}

// dedupe removes later duplicates of a member from es, keeping view order, and
// returns es with its lookup index (built in idx's storage).
func dedupe(es []Entry, idx []key) ([]Entry, []key) {
	if len(es) <= linearMax {
		out := es[:0]
		for _, e := range es {
			if find(out, nil, e.Member) < 0 {
				out = append(out, e)
			}
		}
		return out, idx[:0]
	}
	idx = buildIndex(idx, es)
	dup := false
	for i := 1; i < len(idx); i++ {
		if idx[i].id == idx[i-1].id && idx[i].inc == idx[i-1].inc {
			dup = true
			break
		}
	}
	if !dup {
		return es, idx // the common case: one sort, no extra pass
	}
	// Mark every entry that is not the first of its member (positions in a
	// run of equal members ascend: keyLess breaks ties by position), then
	// compact.
	drop := make([]bool, len(es))
	for i := 1; i < len(idx); i++ {
		if idx[i].id == idx[i-1].id && idx[i].inc == idx[i-1].inc {
			drop[idx[i].pos] = true
		}
	}
	out := es[:0]
	for i, e := range es {
		if !drop[i] {
			out = append(out, e)
		}
	}
	return out, buildIndex(idx, out)
}

// Len returns the number of entries (members).
func (d Digest) Len() int {
	if d.d == nil {
		return 0
	}
	return len(d.d.entries)
}

// IsEmpty reports whether d has no entries.
func (d Digest) IsEmpty() bool { return d.Len() == 0 }

// At returns the i-th entry in view order. It panics if i is out of range.
func (d Digest) At(i int) Entry { return d.d.entries[i] }

// Lookup returns m's entry. It does not allocate: small digests are scanned,
// larger ones binary-search an index built once in New.
func (d Digest) Lookup(m Member) (Entry, bool) {
	if d.d == nil {
		return Entry{}, false
	}
	i := find(d.d.entries, d.d.idx, m)
	if i < 0 {
		return Entry{}, false
	}
	return d.d.entries[i], true
}

// Index returns m's position in view order, or -1 if m is not in d.
func (d Digest) Index(m Member) int {
	if d.d == nil {
		return -1
	}
	return find(d.d.entries, d.d.idx, m)
}

// Contains reports whether m has an entry in d.
func (d Digest) Contains(m Member) bool { return d.Index(m) >= 0 }

// Members returns a new slice of d's members in view order.
func (d Digest) Members() []Member {
	ms := make([]Member, d.Len())
	for i := range ms {
		ms[i] = d.d.entries[i].Member
	}
	return ms
}

// Entries returns a new slice of d's entries in view order.
func (d Digest) Entries() []Entry {
	if d.d == nil {
		return []Entry{}
	}
	return slices.Clone(d.d.entries)
}

// AppendEntries appends d's entries to dst, in view order: the non-allocating
// counterpart of Entries for a caller that reuses dst.
func (d Digest) AppendEntries(dst []Entry) []Entry {
	if d.d == nil {
		return dst
	}
	return append(dst, d.d.entries...)
}

// Equal reports whether d and o hold the same members in the same order with
// the same numbers.
func (d Digest) Equal(o Digest) bool {
	if d.Len() != o.Len() {
		return false
	}
	if d.d == o.d || d.Len() == 0 {
		return true
	}
	return slices.Equal(d.d.entries, o.d.entries)
}

// Matches checks that d covers exactly the given view members, in any order:
// every member has an entry and d has no other. A joiner checks a JoinRsp
// with it (seed 002). The error wraps ErrMismatch and is a *MismatchError
// naming the missing and the extra members.
func (d Digest) Matches(view []Member) error {
	var missing []Member
	found := 0
	for _, m := range view {
		if d.Contains(m) {
			found++
		} else if !slices.Contains(missing, m) {
			missing = append(missing, m)
		}
	}
	if len(missing) == 0 && found == d.Len() {
		return nil
	}
	var extra []Member
	for i := 0; i < d.Len(); i++ {
		if m := d.d.entries[i].Member; !slices.Contains(view, m) {
			extra = append(extra, m)
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return nil // view lists a member twice; d still covers it exactly
	}
	return &MismatchError{Missing: missing, Extra: extra}
}

// String formats d for logs as "[a.1: 0/50/52, b.1: 0/26/27]", entries in
// view order as member: low/delivered/received.
func (d Digest) String() string { return string(d.AppendText(nil)) }

// AppendText appends d's String form to b.
func (d Digest) AppendText(b []byte) []byte {
	b = append(b, '[')
	for i := 0; i < d.Len(); i++ {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = d.d.entries[i].appendText(b)
	}
	return append(b, ']')
}
