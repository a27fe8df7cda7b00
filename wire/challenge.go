package wire

import (
	"encoding/binary"

	"github.com/nakcast/nakcast/digest"
)

// ChallengeOverhead is the 1.1 header length of CHALLENGE and ECHO (trailer
// excluded): a challenge carrying n ranges is ChallengeOverhead+16n bytes.
const ChallengeOverhead = HeaderLen + ChallengeFixed

// ChallengeKind says what a CHALLENGE asks its target to confirm.
type ChallengeKind uint32

// Challenge kinds. A receiver ignores a kind it does not know.
const (
	// ChallengeAddress asks the member at the datagram's destination
	// whether it is Target: the target echoes, and the challenger then
	// knows that Target receives at that address (an off-path spoofer
	// that used the address never sees the nonce). No ranges.
	ChallengeAddress ChallengeKind = 1
	// ChallengeNotFound asks Target, the original sender of the seqnos in
	// Ranges, to confirm the MSG_NOT_FOUND it (or someone using its
	// address) sent: it echoes only if it holds none of them.
	ChallengeNotFound ChallengeKind = 2
)

// Challenge is a decoded CHALLENGE or ECHO. A CHALLENGE from the header's
// Sender asks Target to confirm something (Kind) by sending back an ECHO
// with the same View, Target, Nonce, Kind and Ranges; the nonce is fresh
// and random, so only a member that received the CHALLENGE can answer it.
type Challenge struct {
	View   digest.ViewID
	Target digest.Member
	Nonce  uint64
	Kind   ChallengeKind
	Ranges RangeList
}

// Ranges is a read-only list of ranges: RangeList and RangeSlice satisfy
// it, so encoding one never allocates.
type Ranges interface {
	Len() int
	At(i int) Range
}

// RangeSlice adapts a []Range to Ranges.
type RangeSlice []Range

// Len returns len(s).
func (s RangeSlice) Len() int { return len(s) }

// At returns s[i].
func (s RangeSlice) At(i int) Range { return s[i] }

// DecodeChallenge decodes the body of a CHALLENGE or an ECHO (h.Type
// says which). It fails with ErrTooManyRanges above MaxRanges, ErrTruncated
// if the ranges overrun the body, and ErrMalformed for bytes left over, an
// invalid range, a zero Target or a zero Kind.
func DecodeChallenge(h Header, body []byte) (Challenge, error) {
	if h.Type != TypeChallenge && h.Type != TypeEcho {
		return Challenge{}, ErrMalformed
	}
	fix, rest, err := split(h, body, h.Type, ChallengeFixed)
	if err != nil {
		return Challenge{}, err
	}
	c := Challenge{
		View:   getViewID(fix),
		Target: getMember(fix[20:]),
		Nonce:  binary.LittleEndian.Uint64(fix[32:]),
		Kind:   ChallengeKind(binary.LittleEndian.Uint32(fix[40:])),
	}
	if c.Ranges, err = decodeRanges(binary.LittleEndian.Uint32(fix[44:]), rest); err != nil {
		return Challenge{}, err
	}
	if c.Target.IsZero() || c.Kind == 0 {
		return Challenge{}, ErrMalformed
	}
	return c, nil
}

// EncodeChallenge writes a CHALLENGE or an ECHO (t) into buf and returns
// the datagram: an echo is the challenge's fields sent back, so it takes
// the decoded challenge's Ranges as they are. It fails with
// ErrTooManyRanges above MaxRanges, ErrMalformed for what DecodeChallenge
// rejects (or a t that is neither type) and ErrShortBuffer if buf is too
// small.
func EncodeChallenge[R Ranges](buf []byte, h Header, t Type, view digest.ViewID, target digest.Member,
	nonce uint64, kind ChallengeKind, ranges R) ([]byte, error) {
	if err := checkRanges(ranges); err != nil {
		return nil, err
	}
	if (t != TypeChallenge && t != TypeEcho) || target.IsZero() || kind == 0 {
		return nil, ErrMalformed
	}
	n := ranges.Len()
	h, err := start(buf, h, t, ChallengeOverhead, n*RangeLen)
	if err != nil {
		return nil, err
	}
	b := buf[HeaderLen:]
	putViewID(b, view)
	putMember(b[20:], target)
	binary.LittleEndian.PutUint64(b[32:], nonce)
	binary.LittleEndian.PutUint32(b[40:], uint32(kind))
	binary.LittleEndian.PutUint32(b[44:], uint32(n))
	putRanges(buf[ChallengeOverhead:], ranges)
	return finish(buf, h, ChallengeOverhead+n*RangeLen), nil
}
