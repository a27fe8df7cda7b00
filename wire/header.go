package wire

import (
	"encoding/binary"
	"math"

	"github.com/nakcast/nakcast/digest"
)

// Version written by this package. See the package comment for the rule a
// receiver follows with other versions.
const (
	VersionMajor uint8 = 1
	VersionMinor uint8 = 1
)

// Sizes of the common parts, in bytes.
const (
	// HeaderLen is the size of the common header that starts every datagram.
	HeaderLen = 24
	// NonceLen and TagLen are the parts of the authentication trailer.
	NonceLen = 12
	TagLen   = 16
	// TrailerLen is the size of the authentication trailer (nonce then tag)
	// that ends a datagram whose header has FlagAuth.
	TrailerLen = NonceLen + TagLen
	// MaxHeaderLen is the largest header length the uint16 field can carry.
	MaxHeaderLen = math.MaxUint16
	// MaxUDPPayload is the largest UDP payload over IPv4.
	MaxUDPPayload = 65507
)

// Type is a message type, byte 2 of the common header.
type Type uint8

// Message types of version 1.0.
const (
	TypeData        Type = 1 // a bundle of messages with a contiguous run of seqnos
	TypeFrag        Type = 2 // one fragment of a large message, with its own seqno
	TypeXmitReq     Type = 3 // retransmission request: ranges of one sender's seqnos
	TypeMsgNotFound Type = 4 // original sender: requested seqnos are purged
	TypeStable      Type = 5 // member -> coordinator: delivered digest
	TypeStability   Type = 6 // coordinator -> all: stable digest, purge below
	TypeHighest     Type = 7 // idle sender: its highest seqno
	TypeHeartbeat   Type = 8 // liveness

	// Types of version 1.1 (an older member drops them as unknown: see
	// FORMAT.md for why that is harmless).
	TypeChallenge Type = 9  // asks a member to confirm an address or a MSG_NOT_FOUND, with a fresh nonce
	TypeEcho      Type = 10 // the answer to a CHALLENGE: its fields sent back

	// TypeGMSFirst..TypeGMSLast are reserved for membership messages (join
	// request and response, view, view ack, leave, discovery, merge...).
	TypeGMSFirst Type = 16
	TypeGMSLast  Type = 31
	// TypeStateFirst..TypeStateLast are reserved for state transfer.
	TypeStateFirst Type = 32
	TypeStateLast  Type = 39
)

// Known reports whether t is a type DecodeHeader accepts: one defined by
// this package or one of the reserved ranges.
func (t Type) Known() bool { return t.Reserved() || fixedLen[t] > 0 }

// Reserved reports whether t is in a range reserved for membership or state
// transfer, whose bodies this package does not decode.
func (t Type) Reserved() bool { return t >= TypeGMSFirst && t <= TypeStateLast }

var typeNames = [...]string{
	TypeData: "DATA", TypeFrag: "FRAG", TypeXmitReq: "XMIT_REQ",
	TypeMsgNotFound: "MSG_NOT_FOUND", TypeStable: "STABLE",
	TypeStability: "STABILITY", TypeHighest: "HIGHEST", TypeHeartbeat: "HEARTBEAT",
	TypeChallenge: "CHALLENGE", TypeEcho: "ECHO",
}

// String returns the protocol name of t ("DATA", "GMS(17)", "TYPE(200)").
func (t Type) String() string {
	switch {
	case int(t) < len(typeNames) && typeNames[t] != "":
		return typeNames[t]
	case t >= TypeGMSFirst && t <= TypeGMSLast:
		return "GMS(" + itoa(uint64(t)) + ")"
	case t >= TypeStateFirst && t <= TypeStateLast:
		return "STATE(" + itoa(uint64(t)) + ")"
	}
	return "TYPE(" + itoa(uint64(t)) + ")"
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

// Flags, byte 3 of the common header. Receivers ignore bits they do not know.
const (
	// FlagRepair marks DATA and FRAG datagrams that are retransmissions.
	FlagRepair uint8 = 1 << 0
	// FlagAuth says the datagram ends with a TrailerLen-byte authentication
	// trailer; the header's KeyID is then non-zero (and zero without it).
	FlagAuth uint8 = 1 << 1
	// FlagReport on a STABILITY asks the member it is sent to (unicast, by
	// the coordinator) for its STABLE now: the stability round in progress
	// lacks its report.
	FlagReport uint8 = 1 << 3
	// FlagSettled on a STABILITY says that its round found every member
	// holding all that any member reported of every sender: no member
	// lacks a message another has. A closing member of a fixed view waits
	// for settled rounds before it goes (engine), so that it does not
	// leave without a tail it never heard of, stalling the others' drain.
	FlagSettled uint8 = 1 << 4
)

// Sizes of the type-specific fixed parts in version 1.0 (the header length
// of a 1.0 datagram is HeaderLen plus one of these) and of list elements.
const (
	DataFixed        = 24 // first seqno, origin, count
	FragFixed        = 36 // seqno, origin, index, count, total, payload length
	XmitReqFixed     = 44 // view id, target, delivered, range count
	MsgNotFoundFixed = 68 // view id, requester, missing range, low, highest sent, entry count
	StableFixed      = 24 // view id, entry count (STABLE and STABILITY)
	HighestFixed     = 36 // view id, low, highest
	HeartbeatFixed   = 20 // view id
	ChallengeFixed   = 48 // view id, target, nonce, kind, range count (CHALLENGE and ECHO, 1.1)

	MemberLen = 12 // member: id uint64, incarnation uint32
	ViewIDLen = 20 // view id: coordinator member, counter uint64
	RangeLen  = 16 // range: from uint64, to uint64
	EntryLen  = 36 // digest entry: member, low, delivered, received
)

var fixedLen = [256]uint16{
	TypeData:        DataFixed,
	TypeFrag:        FragFixed,
	TypeXmitReq:     XmitReqFixed,
	TypeMsgNotFound: MsgNotFoundFixed,
	TypeStable:      StableFixed,
	TypeStability:   StableFixed,
	TypeHighest:     HighestFixed,
	TypeHeartbeat:   HeartbeatFixed,
	TypeChallenge:   ChallengeFixed,
	TypeEcho:        ChallengeFixed,
}

// Header is the common header of a datagram.
//
// Decoding fills every field. Encoders take Flags, Group, Sender and KeyID
// from the Header they are given and set the rest themselves: they always
// write VersionMajor.VersionMinor, their own Type and the 1.0 header length.
type Header struct {
	Minor  uint8         // minor version of the sender
	Type   Type          // message type
	Flags  uint8         // FlagRepair, FlagAuth, unknown bits
	Group  uint32        // group id: datagrams of other groups are dropped
	Sender digest.Member // the member that sent this datagram (never zero)
	KeyID  uint16        // authentication key id; 0 = no trailer
	Len    int           // header length: common header + type's fixed part
}

// Auth reports whether the datagram carries an authentication trailer.
func (h Header) Auth() bool { return h.Flags&FlagAuth != 0 }

// Repair reports whether FlagRepair is set.
func (h Header) Repair() bool { return h.Flags&FlagRepair != 0 }

// DecodeHeader decodes the common header of datagram b, which must belong to
// group. It returns the body: the bytes after the common header (the type's
// fixed part, then its variable part), without the authentication trailer
// when FlagAuth is set. Type decoders take the header and this body.
//
// It checks, in this order: the major version (ErrVersion; only b[0] needs to
// be present), the length of the common header (ErrTruncated), the group
// (ErrForeignGroup), the type (ErrUnknownType), a zero sender, the header
// length against the type's 1.0 minimum and FlagAuth against KeyID
// (ErrMalformed), and the datagram length against header length and trailer
// (ErrTruncated). On ErrForeignGroup, ErrUnknownType and ErrMalformed the
// returned Header holds the decoded fields, for logs and counters.
func DecodeHeader(b []byte, group uint32) (Header, []byte, error) {
	if len(b) == 0 {
		return Header{}, nil, ErrTruncated
	}
	if b[0] != VersionMajor {
		return Header{}, nil, ErrVersion
	}
	if len(b) < HeaderLen {
		return Header{}, nil, ErrTruncated
	}
	h := Header{
		Minor:  b[1],
		Type:   Type(b[2]),
		Flags:  b[3],
		Group:  binary.LittleEndian.Uint32(b[4:]),
		Sender: getMember(b[8:]),
		KeyID:  binary.LittleEndian.Uint16(b[20:]),
		Len:    int(binary.LittleEndian.Uint16(b[22:])),
	}
	if h.Group != group {
		return h, nil, ErrForeignGroup
	}
	if !h.Type.Known() {
		return h, nil, ErrUnknownType
	}
	if h.Sender.IsZero() || h.Len < HeaderLen+int(fixedLen[h.Type]) || h.Auth() != (h.KeyID != 0) {
		return h, nil, ErrMalformed
	}
	end := len(b)
	if h.Auth() {
		end -= TrailerLen
	}
	if end < h.Len {
		return h, nil, ErrTruncated
	}
	return h, b[HeaderLen:end:end], nil
}

// PutHeader writes h as a common header at the start of buf, with
// VersionMajor.VersionMinor and h's Type and Len as given. It is what the
// encoders of this package use, exported for the owners of the reserved
// types. It fails with ErrShortBuffer if buf is shorter than HeaderLen and
// with ErrMalformed for a header DecodeHeader would reject (zero sender,
// FlagAuth without KeyID or the reverse, Len outside [HeaderLen,
// MaxHeaderLen] or below the type's minimum, a type that is not Known).
func PutHeader(buf []byte, h Header) error {
	if err := checkHeader(h); err != nil {
		return err
	}
	if !h.Type.Known() || h.Len < HeaderLen+int(fixedLen[h.Type]) || h.Len > MaxHeaderLen {
		return ErrMalformed
	}
	if len(buf) < HeaderLen {
		return ErrShortBuffer
	}
	putHeader(buf, h)
	return nil
}

// checkHeader validates the fields an encoder takes from the caller.
func checkHeader(h Header) error {
	if h.Sender.IsZero() || h.Auth() != (h.KeyID != 0) {
		return ErrMalformed
	}
	return nil
}

func putHeader(b []byte, h Header) {
	_ = b[HeaderLen-1]
	b[0] = VersionMajor
	b[1] = VersionMinor
	b[2] = byte(h.Type)
	b[3] = h.Flags
	binary.LittleEndian.PutUint32(b[4:], h.Group)
	putMember(b[8:], h.Sender)
	binary.LittleEndian.PutUint16(b[20:], h.KeyID)
	binary.LittleEndian.PutUint16(b[22:], uint16(h.Len))
}

// Trailer splits an authenticated datagram (FlagAuth set) into the bytes the
// tag covers (everything before the trailer: header and body; they are the
// AEAD's additional data, the AEAD's plaintext is empty), the nonce and the
// tag. The slices alias datagram, so a sender fills nonce and tag in place
// after encoding (encoders leave the trailer zeroed). ok is false if the
// datagram is too short or FlagAuth is not set.
func Trailer(datagram []byte) (signed, nonce, tag []byte, ok bool) {
	if len(datagram) < HeaderLen+TrailerLen || datagram[3]&FlagAuth == 0 {
		return nil, nil, nil, false
	}
	t := len(datagram) - TrailerLen
	return datagram[:t:t], datagram[t : t+NonceLen : t+NonceLen], datagram[t+NonceLen:], true
}

// finish appends the zeroed trailer when h asks for one; end is the length
// of header and body. The caller has checked that buf can hold it.
func finish(buf []byte, h Header, end int) []byte {
	if h.Auth() {
		clear(buf[end : end+TrailerLen])
		end += TrailerLen
	}
	return buf[:end:end]
}

// trailerLen is TrailerLen when h has FlagAuth, else 0.
func trailerLen(h Header) int {
	if h.Auth() {
		return TrailerLen
	}
	return 0
}

// split checks that h is of type t and cuts body (from DecodeHeader) into
// the fixed part (at least fixed bytes; a newer minor's extra fixed bytes are
// included and ignored) and the variable part.
func split(h Header, body []byte, t Type, fixed int) (fix, rest []byte, err error) {
	if h.Type != t {
		return nil, nil, ErrMalformed
	}
	n := h.Len - HeaderLen
	if n < fixed {
		return nil, nil, ErrMalformed
	}
	if n > len(body) {
		return nil, nil, ErrTruncated
	}
	return body[:n:n], body[n:], nil
}

func getMember(b []byte) digest.Member {
	_ = b[MemberLen-1]
	return digest.Member{ID: binary.LittleEndian.Uint64(b), Inc: binary.LittleEndian.Uint32(b[8:])}
}

func putMember(b []byte, m digest.Member) {
	_ = b[MemberLen-1]
	binary.LittleEndian.PutUint64(b, m.ID)
	binary.LittleEndian.PutUint32(b[8:], m.Inc)
}

func getViewID(b []byte) digest.ViewID {
	_ = b[ViewIDLen-1]
	return digest.ViewID{Coord: getMember(b), Counter: binary.LittleEndian.Uint64(b[MemberLen:])}
}

func putViewID(b []byte, v digest.ViewID) {
	_ = b[ViewIDLen-1]
	putMember(b, v.Coord)
	binary.LittleEndian.PutUint64(b[MemberLen:], v.Counter)
}
