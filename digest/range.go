package digest

import "strconv"

// Range is an inclusive range of seqnos [From, To]: a gap, a lost run, a
// retransmission request, a cut. It is the one definition every package
// uses (ring, wire and gms alias it).
type Range struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// Len returns the number of seqnos in r (0 if From > To).
func (r Range) Len() uint64 {
	if r.From > r.To {
		return 0
	}
	return r.To - r.From + 1
}

// Valid reports whether 1 <= From <= To, the only ranges on the wire.
func (r Range) Valid() bool { return r.From >= 1 && r.From <= r.To }

// Contains reports whether From <= seq <= To.
func (r Range) Contains(seq uint64) bool { return r.From <= seq && seq <= r.To }

// String formats r as "[from,to]".
func (r Range) String() string {
	b := make([]byte, 0, 42)
	b = append(b, '[')
	b = strconv.AppendUint(b, r.From, 10)
	b = append(b, ',')
	b = strconv.AppendUint(b, r.To, 10)
	b = append(b, ']')
	return string(b)
}

// View is a view as the protocols need it: its id and its members in view
// order, the coordinator first. Views are immutable once built: never
// modify Members in place. gms's View adds each member's address.
type View struct {
	ID      ViewID
	Members []Member
}
