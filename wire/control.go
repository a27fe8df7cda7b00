package wire

import (
	"encoding/binary"

	"github.com/nakcast/nakcast/digest"
)

// MaxRanges bounds the ranges of one XMIT_REQ; more is ErrTooManyRanges.
const MaxRanges = 1024

// Overheads of the control messages (1.0 header length), trailer excluded.
const (
	XmitReqOverhead     = HeaderLen + XmitReqFixed
	MsgNotFoundOverhead = HeaderLen + MsgNotFoundFixed
	StableOverhead      = HeaderLen + StableFixed
	HighestOverhead     = HeaderLen + HighestFixed
	HeartbeatOverhead   = HeaderLen + HeartbeatFixed
)

// MaxXmitRanges returns how many ranges an XMIT_REQ of datagram bytes can
// carry (at most MaxRanges; subtract TrailerLen first when authenticating).
func MaxXmitRanges(datagram int) int {
	return max(0, min(MaxRanges, (datagram-XmitReqOverhead)/RangeLen))
}

// MaxDigestEntries returns how many digest entries fit in every digest
// carrying message (MSG_NOT_FOUND, the largest, STABLE, STABILITY) of
// datagram bytes (subtract TrailerLen first when authenticating).
func MaxDigestEntries(datagram int) int {
	return max(0, (datagram-MsgNotFoundOverhead)/EntryLen)
}

// Range is digest.Range: an inclusive range of seqnos [From, To].
type Range = digest.Range

// RangeList is a list of ranges read in place from a datagram.
type RangeList struct {
	b []byte
	n int
}

// Len returns the number of ranges.
func (l RangeList) Len() int { return l.n }

// At returns range i, or the zero Range if i is out of [0, Len()).
func (l RangeList) At(i int) Range {
	if uint(i) >= uint(l.n) {
		return Range{}
	}
	b := l.b[i*RangeLen : i*RangeLen+RangeLen]
	return Range{From: binary.LittleEndian.Uint64(b), To: binary.LittleEndian.Uint64(b[8:])}
}

// AppendTo appends the ranges to dst and returns it.
func (l RangeList) AppendTo(dst []Range) []Range {
	for i := range l.n {
		dst = append(dst, l.At(i))
	}
	return dst
}

// Entries is a read-only list of digest entries. digest.Digest, DigestView
// and EntrySlice satisfy it; the digest encoders are generic over it so that
// passing one never allocates.
type Entries interface {
	Len() int
	At(i int) digest.Entry
}

// EntrySlice adapts a []digest.Entry to Entries.
type EntrySlice []digest.Entry

// Len returns len(s).
func (s EntrySlice) Len() int { return len(s) }

// At returns s[i].
func (s EntrySlice) At(i int) digest.Entry { return s[i] }

// DigestView is a digest read in place from a datagram: its entries in the
// sender's order. It does not check the order of the seqnos in an entry nor
// duplicate members: that is the protocol's business.
type DigestView struct {
	b []byte
	n int
}

// Len returns the number of entries.
func (v DigestView) Len() int { return v.n }

// At returns entry i, or the zero Entry if i is out of [0, Len()).
func (v DigestView) At(i int) digest.Entry {
	if uint(i) >= uint(v.n) {
		return digest.Entry{}
	}
	b := v.b[i*EntryLen : i*EntryLen+EntryLen]
	return digest.Entry{
		Member:    getMember(b),
		Low:       binary.LittleEndian.Uint64(b[12:]),
		Delivered: binary.LittleEndian.Uint64(b[20:]),
		Received:  binary.LittleEndian.Uint64(b[28:]),
	}
}

// Lookup returns m's first entry, scanning in place without allocating.
func (v DigestView) Lookup(m digest.Member) (digest.Entry, bool) {
	for i := range v.n {
		if getMember(v.b[i*EntryLen:]) == m {
			return v.At(i), true
		}
	}
	return digest.Entry{}, false
}

// AppendTo appends the entries to dst and returns it.
func (v DigestView) AppendTo(dst []digest.Entry) []digest.Entry {
	for i := range v.n {
		dst = append(dst, v.At(i))
	}
	return dst
}

// ToDigest copies the entries into a new digest.Digest (allocates: for logs
// and the slow paths that keep a digest).
func (v DigestView) ToDigest() digest.Digest {
	return digest.New(v.AppendTo(make([]digest.Entry, 0, v.n)))
}

// decodeEntries reads count entries that must fill rest exactly.
func decodeEntries(count uint32, rest []byte) (DigestView, error) {
	if uint64(count)*EntryLen > uint64(len(rest)) {
		return DigestView{}, ErrTruncated
	}
	if uint64(count)*EntryLen < uint64(len(rest)) {
		return DigestView{}, ErrMalformed
	}
	for off := 0; off < len(rest); off += EntryLen {
		if getMember(rest[off:]).IsZero() {
			return DigestView{}, ErrMalformed
		}
	}
	return DigestView{b: rest, n: int(count)}, nil
}

// putEntries writes d's entries at b, which has room for them.
func putEntries[E Entries](b []byte, d E) error {
	for i := range d.Len() {
		e := d.At(i)
		if e.Member.IsZero() {
			return ErrMalformed
		}
		p := b[i*EntryLen : i*EntryLen+EntryLen]
		putMember(p, e.Member)
		binary.LittleEndian.PutUint64(p[12:], e.Low)
		binary.LittleEndian.PutUint64(p[20:], e.Delivered)
		binary.LittleEndian.PutUint64(p[28:], e.Received)
	}
	return nil
}

// start validates h, checks that buf holds overhead+varLen bytes plus the
// trailer, and writes the common header.
func start(buf []byte, h Header, t Type, overhead, varLen int) (Header, error) {
	if err := checkHeader(h); err != nil {
		return h, err
	}
	if len(buf)-trailerLen(h) < overhead+varLen {
		return h, ErrShortBuffer
	}
	h.Type, h.Len = t, overhead
	putHeader(buf, h)
	return h, nil
}

// XmitReq is a decoded XMIT_REQ: the header's Sender asks for the Ranges of
// Target's seqnos, in view View. Delivered is the requester's highest
// delivered seqno for Target when it sent the request; a request for
// nothing above it is stale (the protocol drops and counts it).
type XmitReq struct {
	View      digest.ViewID
	Target    digest.Member
	Delivered uint64
	Ranges    RangeList
}

// DecodeXmitReq decodes the body of an XMIT_REQ. It fails with
// ErrTooManyRanges above MaxRanges, ErrTruncated if the ranges overrun the
// body, and ErrMalformed for no ranges, bytes left over, a range with From 0
// or From > To, or a zero Target.
func DecodeXmitReq(h Header, body []byte) (XmitReq, error) {
	fix, rest, err := split(h, body, TypeXmitReq, XmitReqFixed)
	if err != nil {
		return XmitReq{}, err
	}
	x := XmitReq{
		View:      getViewID(fix),
		Target:    getMember(fix[20:]),
		Delivered: binary.LittleEndian.Uint64(fix[32:]),
	}
	if x.Ranges, err = decodeRanges(binary.LittleEndian.Uint32(fix[40:]), rest); err != nil {
		return XmitReq{}, err
	}
	if x.Ranges.Len() == 0 || x.Target.IsZero() {
		return XmitReq{}, ErrMalformed
	}
	return x, nil
}

// decodeRanges reads n ranges that must fill rest exactly: ErrTooManyRanges
// above MaxRanges, ErrTruncated if they overrun it, ErrMalformed for bytes
// left over or a range that is not 1 <= from <= to.
func decodeRanges(n uint32, rest []byte) (RangeList, error) {
	switch {
	case n > MaxRanges:
		return RangeList{}, ErrTooManyRanges
	case int(n)*RangeLen > len(rest):
		return RangeList{}, ErrTruncated
	case int(n)*RangeLen < len(rest):
		return RangeList{}, ErrMalformed
	}
	l := RangeList{b: rest, n: int(n)}
	for i := range int(n) {
		if !l.At(i).Valid() {
			return RangeList{}, ErrMalformed
		}
	}
	return l, nil
}

// checkRanges reports what an encoder must refuse in ranges:
// ErrTooManyRanges above MaxRanges, ErrMalformed for an invalid range.
func checkRanges[R Ranges](ranges R) error {
	if ranges.Len() > MaxRanges {
		return ErrTooManyRanges
	}
	for i := range ranges.Len() {
		if !ranges.At(i).Valid() {
			return ErrMalformed
		}
	}
	return nil
}

// putRanges writes ranges at b, which has room for them.
func putRanges[R Ranges](b []byte, ranges R) {
	for i := range ranges.Len() {
		r := ranges.At(i)
		binary.LittleEndian.PutUint64(b[i*RangeLen:], r.From)
		binary.LittleEndian.PutUint64(b[i*RangeLen+8:], r.To)
	}
}

// EncodeXmitReq writes an XMIT_REQ into buf and returns the datagram. It
// fails with ErrTooManyRanges above MaxRanges, ErrMalformed for what
// DecodeXmitReq rejects, and ErrShortBuffer if buf is too small.
func EncodeXmitReq(buf []byte, h Header, view digest.ViewID, target digest.Member, delivered uint64, ranges []Range) ([]byte, error) {
	if err := checkRanges(RangeSlice(ranges)); err != nil {
		return nil, err
	}
	if len(ranges) == 0 || target.IsZero() {
		return nil, ErrMalformed
	}
	h, err := start(buf, h, TypeXmitReq, XmitReqOverhead, len(ranges)*RangeLen)
	if err != nil {
		return nil, err
	}
	b := buf[HeaderLen:]
	putViewID(b, view)
	putMember(b[20:], target)
	binary.LittleEndian.PutUint64(b[32:], delivered)
	binary.LittleEndian.PutUint32(b[40:], uint32(len(ranges)))
	putRanges(buf[XmitReqOverhead:], RangeSlice(ranges))
	return finish(buf, h, XmitReqOverhead+len(ranges)*RangeLen), nil
}

// MsgNotFound is a decoded MSG_NOT_FOUND: the header's Sender, the original
// sender, tells Requester that it no longer holds Missing (part of what was
// requested, normally at or below Low; whether to believe it is nakack's
// decision). Low is the sender's purge point, HighestSent its highest seqno,
// Digest its whole digest (for the requester's diagnostics).
type MsgNotFound struct {
	View        digest.ViewID
	Requester   digest.Member
	Missing     Range
	Low         uint64
	HighestSent uint64
	Digest      DigestView
}

// DecodeMsgNotFound decodes the body of a MSG_NOT_FOUND. It fails with
// ErrTruncated if the entries overrun the body and ErrMalformed for bytes
// left over, a zero Requester or entry member, an invalid Missing range or
// Low > HighestSent.
func DecodeMsgNotFound(h Header, body []byte) (MsgNotFound, error) {
	fix, rest, err := split(h, body, TypeMsgNotFound, MsgNotFoundFixed)
	if err != nil {
		return MsgNotFound{}, err
	}
	m := MsgNotFound{
		View:        getViewID(fix),
		Requester:   getMember(fix[20:]),
		Missing:     Range{From: binary.LittleEndian.Uint64(fix[32:]), To: binary.LittleEndian.Uint64(fix[40:])},
		Low:         binary.LittleEndian.Uint64(fix[48:]),
		HighestSent: binary.LittleEndian.Uint64(fix[56:]),
	}
	if m.Requester.IsZero() || !m.Missing.Valid() || m.Low > m.HighestSent {
		return MsgNotFound{}, ErrMalformed
	}
	if m.Digest, err = decodeEntries(binary.LittleEndian.Uint32(fix[64:]), rest); err != nil {
		return MsgNotFound{}, err
	}
	return m, nil
}

// EncodeMsgNotFound writes a MSG_NOT_FOUND into buf and returns the datagram.
// It fails with ErrMalformed for what DecodeMsgNotFound rejects and with
// ErrShortBuffer if buf is too small (see MaxDigestEntries).
func EncodeMsgNotFound[E Entries](buf []byte, h Header, view digest.ViewID, requester digest.Member,
	missing Range, low, highestSent uint64, d E) ([]byte, error) {
	if requester.IsZero() || !missing.Valid() || low > highestSent {
		return nil, ErrMalformed
	}
	n := d.Len()
	h, err := start(buf, h, TypeMsgNotFound, MsgNotFoundOverhead, n*EntryLen)
	if err != nil {
		return nil, err
	}
	b := buf[HeaderLen:]
	putViewID(b, view)
	putMember(b[20:], requester)
	binary.LittleEndian.PutUint64(b[32:], missing.From)
	binary.LittleEndian.PutUint64(b[40:], missing.To)
	binary.LittleEndian.PutUint64(b[48:], low)
	binary.LittleEndian.PutUint64(b[56:], highestSent)
	binary.LittleEndian.PutUint32(b[64:], uint32(n))
	if err := putEntries(buf[MsgNotFoundOverhead:], d); err != nil {
		return nil, err
	}
	return finish(buf, h, MsgNotFoundOverhead+n*EntryLen), nil
}

// Stable is a decoded STABLE: a member's delivered digest for view View, sent
// to the coordinator.
type Stable struct {
	View   digest.ViewID
	Digest DigestView
}

// Stability is a decoded STABILITY: the coordinator's digest for view View in
// which Delivered (and Low) is the stable seqno (the minimum over the view)
// below which members may purge, and Received the minimum received over the
// view, a lower bound of what every member has read of that sender.
type Stability struct {
	View   digest.ViewID
	Digest DigestView
}

func decodeViewDigest(h Header, body []byte, t Type) (digest.ViewID, DigestView, error) {
	fix, rest, err := split(h, body, t, StableFixed)
	if err != nil {
		return digest.ViewID{}, DigestView{}, err
	}
	d, err := decodeEntries(binary.LittleEndian.Uint32(fix[20:]), rest)
	if err != nil {
		return digest.ViewID{}, DigestView{}, err
	}
	return getViewID(fix), d, nil
}

func encodeViewDigest[E Entries](buf []byte, h Header, t Type, view digest.ViewID, d E) ([]byte, error) {
	n := d.Len()
	h, err := start(buf, h, t, StableOverhead, n*EntryLen)
	if err != nil {
		return nil, err
	}
	putViewID(buf[HeaderLen:], view)
	binary.LittleEndian.PutUint32(buf[HeaderLen+20:], uint32(n))
	if err := putEntries(buf[StableOverhead:], d); err != nil {
		return nil, err
	}
	return finish(buf, h, StableOverhead+n*EntryLen), nil
}

// DecodeStable decodes the body of a STABLE. It fails with ErrTruncated if
// the entries overrun the body and ErrMalformed for bytes left over or a zero
// entry member. An empty digest is valid.
func DecodeStable(h Header, body []byte) (Stable, error) {
	v, d, err := decodeViewDigest(h, body, TypeStable)
	return Stable{View: v, Digest: d}, err
}

// EncodeStable writes a STABLE into buf and returns the datagram
// (ErrMalformed for a zero entry member, ErrShortBuffer if buf is too small).
func EncodeStable[E Entries](buf []byte, h Header, view digest.ViewID, d E) ([]byte, error) {
	return encodeViewDigest(buf, h, TypeStable, view, d)
}

// DecodeStability decodes the body of a STABILITY, with DecodeStable's rules.
func DecodeStability(h Header, body []byte) (Stability, error) {
	v, d, err := decodeViewDigest(h, body, TypeStability)
	return Stability{View: v, Digest: d}, err
}

// EncodeStability writes a STABILITY into buf and returns the datagram, with
// EncodeStable's rules.
func EncodeStability[E Entries](buf []byte, h Header, view digest.ViewID, d E) ([]byte, error) {
	return encodeViewDigest(buf, h, TypeStability, view, d)
}

// Highest is a decoded HIGHEST: an idle sender announces, in view View, its
// purge point Low and its highest seqno Highest, so receivers detect a lost
// tail without new traffic.
type Highest struct {
	View    digest.ViewID
	Low     uint64
	Highest uint64
}

// DecodeHighest decodes the body of a HIGHEST (ErrMalformed for Low >
// Highest or bytes after the fixed part).
func DecodeHighest(h Header, body []byte) (Highest, error) {
	fix, rest, err := split(h, body, TypeHighest, HighestFixed)
	if err != nil {
		return Highest{}, err
	}
	m := Highest{
		View:    getViewID(fix),
		Low:     binary.LittleEndian.Uint64(fix[20:]),
		Highest: binary.LittleEndian.Uint64(fix[28:]),
	}
	if len(rest) != 0 || m.Low > m.Highest {
		return Highest{}, ErrMalformed
	}
	return m, nil
}

// EncodeHighest writes a HIGHEST into buf and returns the datagram.
func EncodeHighest(buf []byte, h Header, m Highest) ([]byte, error) {
	if m.Low > m.Highest {
		return nil, ErrMalformed
	}
	h, err := start(buf, h, TypeHighest, HighestOverhead, 0)
	if err != nil {
		return nil, err
	}
	putViewID(buf[HeaderLen:], m.View)
	binary.LittleEndian.PutUint64(buf[HeaderLen+20:], m.Low)
	binary.LittleEndian.PutUint64(buf[HeaderLen+28:], m.Highest)
	return finish(buf, h, HighestOverhead), nil
}

// Heartbeat is a decoded HEARTBEAT: the header's Sender is alive in view View.
type Heartbeat struct {
	View digest.ViewID
}

// DecodeHeartbeat decodes the body of a HEARTBEAT (ErrMalformed for bytes
// after the fixed part).
func DecodeHeartbeat(h Header, body []byte) (Heartbeat, error) {
	fix, rest, err := split(h, body, TypeHeartbeat, HeartbeatFixed)
	if err != nil {
		return Heartbeat{}, err
	}
	if len(rest) != 0 {
		return Heartbeat{}, ErrMalformed
	}
	return Heartbeat{View: getViewID(fix)}, nil
}

// EncodeHeartbeat writes a HEARTBEAT into buf and returns the datagram.
func EncodeHeartbeat(buf []byte, h Header, m Heartbeat) ([]byte, error) {
	h, err := start(buf, h, TypeHeartbeat, HeartbeatOverhead, 0)
	if err != nil {
		return nil, err
	}
	putViewID(buf[HeaderLen:], m.View)
	return finish(buf, h, HeartbeatOverhead), nil
}
