package wire

import (
	"encoding/binary"
	"math"

	"github.com/nakcast/nakcast/digest"
)

// FragOverhead is the number of bytes of a 1.0 FRAG datagram before its
// payload (trailer not included).
const FragOverhead = HeaderLen + FragFixed

// MaxFragPayload returns the largest fragment payload that fits in a FRAG
// datagram of datagram bytes (subtract TrailerLen first when authenticating).
func MaxFragPayload(datagram int) int { return datagram - FragOverhead }

// Frag is a decoded FRAG datagram: fragment Index (from 0) of the Count
// fragments of one message of Total bytes sent by Origin. Every fragment has
// its own seqno Seq, so the message's fragments hold the seqnos FirstSeq() ..
// LastSeq() and a lost fragment is repaired alone. Payload aliases the
// datagram.
type Frag struct {
	Origin  digest.Member
	Seq     uint64
	Index   uint32
	Count   uint32
	Total   uint32
	Payload []byte
}

// FirstSeq returns the seqno of the message's first fragment, Seq-Index.
func (f *Frag) FirstSeq() uint64 { return f.Seq - uint64(f.Index) }

// LastSeq returns the seqno of the message's last fragment.
func (f *Frag) LastSeq() uint64 { return f.FirstSeq() + uint64(f.Count) - 1 }

// check enforces what DecodeFrag and EncodeFrag agree on.
func (f *Frag) check() error {
	if f.Origin.IsZero() || f.Count == 0 || f.Index >= f.Count || f.Seq <= uint64(f.Index) ||
		f.Seq-uint64(f.Index)-1 > math.MaxUint64-uint64(f.Count) || uint64(len(f.Payload)) > uint64(f.Total) {
		return ErrMalformed
	}
	return nil
}

// DecodeFrag decodes the body of a FRAG datagram. The payload length field
// must match the body exactly (ErrTruncated if short, ErrMalformed if bytes
// are left over); Index < Count, the message's seqnos FirstSeq..LastSeq must
// lie in 1..MaxUint64, the payload must not exceed Total, and Origin must not
// be zero (ErrMalformed).
func DecodeFrag(h Header, body []byte) (Frag, error) {
	fix, rest, err := split(h, body, TypeFrag, FragFixed)
	if err != nil {
		return Frag{}, err
	}
	f := Frag{
		Seq:    binary.LittleEndian.Uint64(fix),
		Origin: getMember(fix[8:]),
		Index:  binary.LittleEndian.Uint32(fix[20:]),
		Count:  binary.LittleEndian.Uint32(fix[24:]),
		Total:  binary.LittleEndian.Uint32(fix[28:]),
	}
	n := binary.LittleEndian.Uint32(fix[32:])
	if uint64(n) > uint64(len(rest)) {
		return Frag{}, ErrTruncated
	}
	if uint64(n) < uint64(len(rest)) {
		return Frag{}, ErrMalformed
	}
	f.Payload = rest
	if err := f.check(); err != nil {
		return Frag{}, err
	}
	return f, nil
}

// EncodeFrag writes a FRAG datagram for f into buf (copying f.Payload) and
// returns it. It fails with ErrMalformed for a fragment DecodeFrag would
// reject and with ErrShortBuffer if buf is too small.
func EncodeFrag(buf []byte, h Header, f Frag) ([]byte, error) {
	if err := checkHeader(h); err != nil {
		return nil, err
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	end := FragOverhead + len(f.Payload)
	if len(buf)-trailerLen(h) < end {
		return nil, ErrShortBuffer
	}
	h.Type, h.Len = TypeFrag, FragOverhead
	putHeader(buf, h)
	b := buf[HeaderLen:FragOverhead]
	binary.LittleEndian.PutUint64(b, f.Seq)
	putMember(b[8:], f.Origin)
	binary.LittleEndian.PutUint32(b[20:], f.Index)
	binary.LittleEndian.PutUint32(b[24:], f.Count)
	binary.LittleEndian.PutUint32(b[28:], f.Total)
	binary.LittleEndian.PutUint32(b[32:], uint32(len(f.Payload)))
	copy(buf[FragOverhead:], f.Payload)
	return finish(buf, h, end), nil
}
