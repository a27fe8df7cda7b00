package digest

import (
	"errors"
	"strconv"
)

// ErrIncomplete is wrapped by MutableDigest.Complete when some member of the
// view still has no entry: a view and its digest must match (seed 002).
var ErrIncomplete = errors.New("digest incomplete")

// ErrMismatch is wrapped by Digest.Matches when a digest does not cover
// exactly a view's members.
var ErrMismatch = errors.New("digest does not match view")

// IncompleteError is the error MutableDigest.Complete returns. It names every
// member still unset, in view order, and unwraps to ErrIncomplete.
type IncompleteError struct {
	Unset []Member // members with no entry, in view order
	Total int      // members in the view
}

// Error names every unset member, e.g.
// "digest incomplete: 2 of 4 members unset: [c.1 d.1]".
func (e *IncompleteError) Error() string {
	b := append([]byte(nil), ErrIncomplete.Error()...)
	b = append(b, ": "...)
	b = strconv.AppendInt(b, int64(len(e.Unset)), 10)
	b = append(b, " of "...)
	b = strconv.AppendInt(b, int64(e.Total), 10)
	b = append(b, " members unset: "...)
	b = appendMembers(b, e.Unset)
	return string(b)
}

// Unwrap returns ErrIncomplete.
func (e *IncompleteError) Unwrap() error { return ErrIncomplete }

// MismatchError is the error Digest.Matches returns. It unwraps to
// ErrMismatch.
type MismatchError struct {
	Missing []Member // view members without an entry, in view order
	Extra   []Member // entries for members not in the view, in digest order
}

// Error names the missing and extra members, e.g.
// "digest does not match view: missing [c.1], extra [e.2]".
func (e *MismatchError) Error() string {
	b := append([]byte(nil), ErrMismatch.Error()...)
	b = append(b, ": missing "...)
	b = appendMembers(b, e.Missing)
	b = append(b, ", extra "...)
	b = appendMembers(b, e.Extra)
	return string(b)
}

// Unwrap returns ErrMismatch.
func (e *MismatchError) Unwrap() error { return ErrMismatch }

func appendMembers(b []byte, ms []Member) []byte {
	b = append(b, '[')
	for i, m := range ms {
		if i > 0 {
			b = append(b, ' ')
		}
		b = appendMember(b, m)
	}
	return append(b, ']')
}
