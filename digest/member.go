package digest

import "fmt"

// Member identifies one incarnation of a group member. ID is chosen at random
// when the process starts; Inc is new on every JOIN_REQ, so a member that
// leaves and rejoins is a different Member and its seqnos restart at 1.
// Member is comparable and may be used as a map key.
type Member struct {
	ID  uint64
	Inc uint32
}

// IsZero reports whether m is the zero Member, which never names a real member.
func (m Member) IsZero() bool { return m.ID == 0 && m.Inc == 0 }

// Less orders members by ID, then incarnation.
func (m Member) Less(o Member) bool {
	if m.ID != o.ID {
		return m.ID < o.ID
	}
	return m.Inc < o.Inc
}

// String formats m as "id.inc" with the id in hex, for logs.
func (m Member) String() string { return fmt.Sprintf("%x.%d", m.ID, m.Inc) }

// ViewID names a view: the coordinator that installed it and a counter that
// grows with every view that coordinator installs. Comparable.
type ViewID struct {
	Coord   Member
	Counter uint64
}

// IsZero reports whether v is the zero ViewID (no view).
func (v ViewID) IsZero() bool { return v.Coord.IsZero() && v.Counter == 0 }

// String formats v as "coord#counter".
func (v ViewID) String() string { return fmt.Sprintf("%v#%d", v.Coord, v.Counter) }
