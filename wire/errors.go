package wire

import "errors"

// Sentinel errors. Decoders return them as they are (no wrapping, so the hot
// path never allocates); callers branch with errors.Is and count drops.
var (
	// ErrTruncated: the datagram ends before a field, a length or a count
	// says it should.
	ErrTruncated = errors.New("wire: truncated datagram")
	// ErrVersion: the major version is not VersionMajor.
	ErrVersion = errors.New("wire: unsupported major version")
	// ErrForeignGroup: the datagram belongs to another group.
	ErrForeignGroup = errors.New("wire: foreign group")
	// ErrMalformed: a field is out of range or inconsistent (a header length
	// below the type's minimum, from > to, a zero member, bytes left over
	// after the last element, an authentication flag without a key id...).
	ErrMalformed = errors.New("wire: malformed datagram")
	// ErrTooManyRanges: an XMIT_REQ carries more than MaxRanges ranges.
	ErrTooManyRanges = errors.New("wire: too many ranges")
	// ErrUnknownType: the message type is neither defined nor reserved.
	ErrUnknownType = errors.New("wire: unknown message type")
	// ErrShortBuffer: an encoder's buffer cannot hold the datagram.
	ErrShortBuffer = errors.New("wire: buffer too small")
)
