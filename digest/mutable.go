package digest

import "slices"

// MutableDigest is a digest under construction over a fixed list of members,
// typically a new view's. Every entry starts unset (an explicit flag: seqnos
// are unsigned, so there is no -1), and Complete refuses to build a Digest
// while any entry is still unset, so a coordinator can never hand out a digest
// that silently says 0 for a member it knows nothing about (seed 002).
//
// Entries for members outside the list are ignored. The zero value is a
// MutableDigest over no members (complete, and empty). A MutableDigest is not
// safe for concurrent use. Set, Merge, IsSet and Lookup do not allocate.
type MutableDigest struct {
	entries []Entry // in member order; Member always set
	set     []bool
	nunset  int
	idx     []key
}

// NewMutable returns a MutableDigest over members, in their order, with every
// entry unset. A member listed twice is kept once, at its first place.
func NewMutable(members []Member) *MutableDigest {
	md := &MutableDigest{}
	md.Reset(members)
	return md
}

// Reset makes md a fresh MutableDigest over members, every entry unset,
// reusing md's storage: a coordinator that retries filling a digest can keep
// one MutableDigest.
func (md *MutableDigest) Reset(members []Member) {
	md.entries = md.entries[:0]
	for _, m := range members {
		md.entries = append(md.entries, Entry{Member: m})
	}
	md.entries, md.idx = dedupe(md.entries, md.idx)
	md.set = slices.Grow(md.set[:0], len(md.entries))[:len(md.entries)]
	clear(md.set)
	md.nunset = len(md.entries)
}

// Len returns the number of members md is built over.
func (md *MutableDigest) Len() int { return len(md.entries) }

// Members returns a new slice of md's members in order.
func (md *MutableDigest) Members() []Member {
	ms := make([]Member, len(md.entries))
	for i := range ms {
		ms[i] = md.entries[i].Member
	}
	return ms
}

// Set replaces e.Member's entry with e and marks it set. It returns false,
// and changes nothing, if e.Member is not one of md's members.
func (md *MutableDigest) Set(e Entry) bool {
	i := find(md.entries, md.idx, e.Member)
	if i < 0 {
		return false
	}
	md.entries[i] = e
	md.mark(i)
	return true
}

// Merge folds e into e.Member's entry: an unset entry takes e's numbers, a set
// one takes the maximum of each number (Low, Delivered, Received separately).
// It returns false, and changes nothing, if e.Member is not one of md's
// members.
func (md *MutableDigest) Merge(e Entry) bool {
	i := find(md.entries, md.idx, e.Member)
	if i < 0 {
		return false
	}
	if !md.set[i] {
		md.entries[i] = e
		md.mark(i)
		return true
	}
	cur := &md.entries[i]
	cur.Low = max(cur.Low, e.Low)
	cur.Delivered = max(cur.Delivered, e.Delivered)
	cur.Received = max(cur.Received, e.Received)
	return true
}

// MergeDigest merges every entry of d (see Merge); entries of non-members are
// ignored. It returns how many entries were merged.
func (md *MutableDigest) MergeDigest(d Digest) int {
	n := 0
	for i := 0; i < d.Len(); i++ {
		if md.Merge(d.d.entries[i]) {
			n++
		}
	}
	return n
}

// SetDigest sets every entry of d (see Set); entries of non-members are
// ignored. It returns how many entries were set.
func (md *MutableDigest) SetDigest(d Digest) int {
	n := 0
	for i := 0; i < d.Len(); i++ {
		if md.Set(d.d.entries[i]) {
			n++
		}
	}
	return n
}

func (md *MutableDigest) mark(i int) {
	if !md.set[i] {
		md.set[i] = true
		md.nunset--
	}
}

// IsSet reports whether m is one of md's members and its entry is set.
func (md *MutableDigest) IsSet(m Member) bool {
	i := find(md.entries, md.idx, m)
	return i >= 0 && md.set[i]
}

// Lookup returns m's entry and whether it is set. An unset or unknown member
// returns the zero Entry and false.
func (md *MutableDigest) Lookup(m Member) (Entry, bool) {
	i := find(md.entries, md.idx, m)
	if i < 0 || !md.set[i] {
		return Entry{}, false
	}
	return md.entries[i], true
}

// NumUnset returns how many members are still unset.
func (md *MutableDigest) NumUnset() int { return md.nunset }

// Unset returns the members still unset, in order (nil when none).
func (md *MutableDigest) Unset() []Member {
	if md.nunset == 0 {
		return nil
	}
	ms := make([]Member, 0, md.nunset)
	for i, ok := range md.set {
		if !ok {
			ms = append(ms, md.entries[i].Member)
		}
	}
	return ms
}

// Complete returns md's entries as a Digest once every entry is set. While any
// entry is unset it returns the zero Digest and an *IncompleteError, wrapping
// ErrIncomplete, that names every unset member. md stays usable either way.
func (md *MutableDigest) Complete() (Digest, error) {
	if md.nunset > 0 {
		return Digest{}, &IncompleteError{Unset: md.Unset(), Total: len(md.entries)}
	}
	if len(md.entries) == 0 {
		return Digest{}, nil
	}
	// Members are already unique: copy entries and index without a dedupe.
	return Digest{&digestData{
		entries: slices.Clone(md.entries),
		idx:     slices.Clone(md.idx),
	}}, nil
}

// String formats md like a Digest, unset entries as "member: unset".
func (md *MutableDigest) String() string {
	b := []byte{'['}
	for i := range md.entries {
		if i > 0 {
			b = append(b, ", "...)
		}
		if md.set[i] {
			b = md.entries[i].appendText(b)
		} else {
			b = appendMember(b, md.entries[i].Member)
			b = append(b, ": unset"...)
		}
	}
	return string(append(b, ']'))
}
