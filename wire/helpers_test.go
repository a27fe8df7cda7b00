package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/nakcast/nakcast/digest"
)

const testGroup uint32 = 0x6e616b63

var (
	mA    = digest.Member{ID: 0xa1, Inc: 1}
	mB    = digest.Member{ID: 0xb2, Inc: 7}
	mC    = digest.Member{ID: 0xc3, Inc: 2}
	view1 = digest.ViewID{Coord: mA, Counter: 9}
)

func hdr(sender digest.Member) Header {
	return Header{Group: testGroup, Sender: sender}
}

func authHdr(sender digest.Member, key uint16) Header {
	return Header{Group: testGroup, Sender: sender, Flags: FlagAuth, KeyID: key}
}

// The normalized forms of every message type: what a test expects to get
// back from decoding, comparable with require.Equal. Empty slices are nil.
type (
	dataMsg struct {
		Origin digest.Member
		First  uint64
		Msgs   [][]byte
	}
	xmitMsg struct {
		View      digest.ViewID
		Target    digest.Member
		Delivered uint64
		Ranges    []Range
	}
	notFoundMsg struct {
		View        digest.ViewID
		Requester   digest.Member
		Missing     Range
		Low         uint64
		HighestSent uint64
		Entries     []digest.Entry
	}
	stableMsg struct {
		View    digest.ViewID
		Entries []digest.Entry
	}
	stabilityMsg struct {
		View    digest.ViewID
		Entries []digest.Entry
	}
	challengeMsg struct {
		Type   Type // TypeChallenge or TypeEcho
		View   digest.ViewID
		Target digest.Member
		Nonce  uint64
		Kind   ChallengeKind
		Ranges []Range
	}
	// reservedMsg is a type this package only passes through.
	reservedMsg struct {
		Type Type
		Body []byte
	}
)

// msg is one datagram's content: the header fields an encoder takes and the
// normalized body.
type msg struct {
	H    Header // Flags, Group, Sender, KeyID (Minor, Type, Len zero)
	Body any
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// encode writes m into buf with the package's encoders.
func encode(buf []byte, m msg) ([]byte, error) {
	switch v := m.Body.(type) {
	case dataMsg:
		var w DataWriter
		if err := w.Reset(buf, m.H, v.Origin, v.First); err != nil {
			return nil, err
		}
		for _, p := range v.Msgs {
			if !w.Append(p) {
				return nil, ErrShortBuffer
			}
		}
		if b := w.Finish(); b != nil {
			return b, nil
		}
		return nil, ErrMalformed
	case Frag:
		return EncodeFrag(buf, m.H, v)
	case xmitMsg:
		return EncodeXmitReq(buf, m.H, v.View, v.Target, v.Delivered, v.Ranges)
	case notFoundMsg:
		return EncodeMsgNotFound(buf, m.H, v.View, v.Requester, v.Missing, v.Low, v.HighestSent, EntrySlice(v.Entries))
	case stableMsg:
		return EncodeStable(buf, m.H, v.View, EntrySlice(v.Entries))
	case stabilityMsg:
		return EncodeStability(buf, m.H, v.View, EntrySlice(v.Entries))
	case Highest:
		return EncodeHighest(buf, m.H, v)
	case Heartbeat:
		return EncodeHeartbeat(buf, m.H, v)
	case challengeMsg:
		return EncodeChallenge(buf, m.H, v.Type, v.View, v.Target, v.Nonce, v.Kind, RangeSlice(v.Ranges))
	case reservedMsg:
		h := m.H
		h.Type, h.Len = v.Type, HeaderLen
		end := HeaderLen + len(v.Body)
		if len(buf) < end+trailerLen(h) {
			return nil, ErrShortBuffer
		}
		if err := PutHeader(buf, h); err != nil {
			return nil, err
		}
		copy(buf[HeaderLen:], v.Body)
		return finish(buf, h, end), nil
	}
	panic(fmt.Sprintf("encode: unexpected body %T", m.Body))
}

// decode decodes datagram b of testGroup into its normalized form.
func decode(b []byte) (msg, error) {
	h, body, err := DecodeHeader(b, testGroup)
	if err != nil {
		return msg{}, err
	}
	m := msg{H: Header{Flags: h.Flags, Group: h.Group, Sender: h.Sender, KeyID: h.KeyID}}
	switch h.Type {
	case TypeData:
		d, err := DecodeData(h, body)
		if err != nil {
			return msg{}, err
		}
		v := dataMsg{Origin: d.Origin, First: d.First}
		it := d.Messages()
		for p, ok := it.Next(); ok; p, ok = it.Next() {
			v.Msgs = append(v.Msgs, nilIfEmpty(p))
		}
		m.Body = v
	case TypeFrag:
		f, err := DecodeFrag(h, body)
		if err != nil {
			return msg{}, err
		}
		f.Payload = nilIfEmpty(f.Payload)
		m.Body = f
	case TypeXmitReq:
		x, err := DecodeXmitReq(h, body)
		if err != nil {
			return msg{}, err
		}
		m.Body = xmitMsg{View: x.View, Target: x.Target, Delivered: x.Delivered, Ranges: x.Ranges.AppendTo(nil)}
	case TypeMsgNotFound:
		x, err := DecodeMsgNotFound(h, body)
		if err != nil {
			return msg{}, err
		}
		m.Body = notFoundMsg{View: x.View, Requester: x.Requester, Missing: x.Missing,
			Low: x.Low, HighestSent: x.HighestSent, Entries: x.Digest.AppendTo(nil)}
	case TypeStable:
		x, err := DecodeStable(h, body)
		if err != nil {
			return msg{}, err
		}
		m.Body = stableMsg{View: x.View, Entries: x.Digest.AppendTo(nil)}
	case TypeStability:
		x, err := DecodeStability(h, body)
		if err != nil {
			return msg{}, err
		}
		m.Body = stabilityMsg{View: x.View, Entries: x.Digest.AppendTo(nil)}
	case TypeHighest:
		x, err := DecodeHighest(h, body)
		if err != nil {
			return msg{}, err
		}
		m.Body = x
	case TypeHeartbeat:
		x, err := DecodeHeartbeat(h, body)
		if err != nil {
			return msg{}, err
		}
		m.Body = x
	case TypeChallenge, TypeEcho:
		x, err := DecodeChallenge(h, body)
		if err != nil {
			return msg{}, err
		}
		m.Body = challengeMsg{Type: h.Type, View: x.View, Target: x.Target, Nonce: x.Nonce, Kind: x.Kind, Ranges: x.Ranges.AppendTo(nil)}
	default:
		m.Body = reservedMsg{Type: h.Type, Body: nilIfEmpty(body[h.Len-HeaderLen:])}
	}
	return m, nil
}

// canonicalLen returns the 1.0 header length of type t.
func canonicalLen(t Type) int { return HeaderLen + int(fixedLen[t]) }

// extend turns a 1.0 datagram into what a newer minor might send: extra
// bytes appended to the fixed part, header length and minor raised.
func extend(b []byte, minor uint8, extra int) []byte {
	hl := int(binary.LittleEndian.Uint16(b[22:]))
	out := make([]byte, 0, len(b)+extra)
	out = append(out, b[:hl]...)
	for i := range extra {
		out = append(out, byte(0xe0+i))
	}
	out = append(out, b[hl:]...)
	out[1] = minor
	binary.LittleEndian.PutUint16(out[22:], uint16(hl+extra))
	return out
}

// sample returns one valid message of every type, with and without
// authentication, named.
func samples() []struct {
	name string
	m    msg
} {
	entries := []digest.Entry{
		{Member: mA, Low: 150, Delivered: 200, Received: 201},
		{Member: mB, Low: 10, Delivered: 50, Received: 201},
		{Member: mC, Low: 0, Delivered: 0, Received: 3},
	}
	msgs := make([][]byte, 64)
	for i := range msgs {
		msgs[i] = bytes.Repeat([]byte{byte(i)}, 64)
	}
	type s = struct {
		name string
		m    msg
	}
	plain := []s{
		{"data-64x64", msg{hdr(mA), dataMsg{Origin: mA, First: 1, Msgs: msgs}}},
		{"data-one-empty", msg{hdr(mA), dataMsg{Origin: mA, First: 7, Msgs: [][]byte{nil}}}},
		{"data-repair-of-peer", msg{Header{Group: testGroup, Sender: mB, Flags: FlagRepair}, dataMsg{Origin: mA, First: 151, Msgs: [][]byte{[]byte("x"), nil, []byte("hello")}}}},
		{"frag", msg{hdr(mA), Frag{Origin: mA, Seq: 12, Index: 2, Count: 4, Total: 4000, Payload: bytes.Repeat([]byte{0x5a}, 1000)}}},
		{"frag-repair", msg{Header{Group: testGroup, Sender: mA, Flags: FlagRepair}, Frag{Origin: mA, Seq: 1, Index: 0, Count: 2, Total: 3, Payload: []byte("ab")}}},
		{"xmit-req", msg{hdr(mB), xmitMsg{View: view1, Target: mA, Delivered: 50, Ranges: []Range{{From: 51, To: 200}, {From: 205, To: 205}}}}},
		{"msg-not-found", msg{hdr(mA), notFoundMsg{View: view1, Requester: mB, Missing: Range{From: 51, To: 150}, Low: 150, HighestSent: 201, Entries: entries}}},
		{"stable", msg{hdr(mB), stableMsg{View: view1, Entries: entries}}},
		{"stable-empty", msg{hdr(mB), stableMsg{View: view1}}},
		{"stability", msg{hdr(mA), stabilityMsg{View: view1, Entries: entries}}},
		{"highest", msg{hdr(mA), Highest{View: view1, Low: 150, Highest: 201}}},
		{"heartbeat", msg{hdr(mC), Heartbeat{View: view1}}},
		{"challenge-not-found", msg{hdr(mB), challengeMsg{Type: TypeChallenge, View: view1, Target: mA, Nonce: 0x0123456789abcdef, Kind: ChallengeNotFound, Ranges: []Range{{From: 51, To: 150}}}}},
		{"challenge-address", msg{hdr(mB), challengeMsg{Type: TypeChallenge, View: view1, Target: mA, Nonce: 7, Kind: ChallengeAddress}}},
		{"echo-not-found", msg{hdr(mA), challengeMsg{Type: TypeEcho, View: view1, Target: mA, Nonce: 0x0123456789abcdef, Kind: ChallengeNotFound, Ranges: []Range{{From: 51, To: 99}, {From: 121, To: 150}}}}},
	}
	out := plain
	for _, p := range plain {
		a := p
		a.name += "-auth"
		a.m.H.Flags |= FlagAuth
		a.m.H.KeyID = 3
		out = append(out, a)
	}
	return out
}

// randMsg returns a random valid message of type t.
func randMsg(r *rand.Rand, t Type) msg {
	member := func() digest.Member {
		return digest.Member{ID: r.Uint64() | 1, Inc: r.Uint32()}
	}
	seq := func() uint64 {
		if r.IntN(4) == 0 {
			return r.Uint64()/2 + 1
		}
		return r.Uint64N(1<<20) + 1
	}
	viewID := func() digest.ViewID { return digest.ViewID{Coord: member(), Counter: r.Uint64()} }
	payload := func(max int) []byte {
		n := r.IntN(max + 1)
		if n == 0 {
			return nil
		}
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		return p
	}
	entries := func() []digest.Entry {
		n := r.IntN(20)
		if n == 0 {
			return nil
		}
		es := make([]digest.Entry, n)
		for i := range es {
			es[i] = digest.Entry{Member: member(), Low: r.Uint64(), Delivered: r.Uint64(), Received: r.Uint64()}
		}
		return es
	}
	h := Header{Group: testGroup, Sender: member(), Flags: uint8(r.IntN(2)) * FlagRepair}
	if r.IntN(2) == 0 {
		h.Flags |= FlagAuth
		h.KeyID = uint16(r.IntN(65535) + 1)
	}
	m := msg{H: h}
	switch t {
	case TypeData:
		d := dataMsg{Origin: member(), First: seq()}
		for range r.IntN(100) + 1 {
			d.Msgs = append(d.Msgs, payload(200))
		}
		m.Body = d
	case TypeFrag:
		count := uint32(r.IntN(100) + 1)
		idx := uint32(r.IntN(int(count)))
		p := payload(3000)
		m.Body = Frag{Origin: member(), Seq: seq() + uint64(idx), Index: idx, Count: count,
			Total: uint32(len(p)) + uint32(r.IntN(100000)), Payload: p}
	case TypeXmitReq:
		x := xmitMsg{View: viewID(), Target: member(), Delivered: r.Uint64()}
		for range r.IntN(MaxRanges) + 1 {
			from := seq()
			x.Ranges = append(x.Ranges, Range{From: from, To: from + r.Uint64N(1000)})
		}
		m.Body = x
	case TypeMsgNotFound:
		from := seq()
		low, highest := r.Uint64(), r.Uint64()
		if low > highest {
			low, highest = highest, low
		}
		m.Body = notFoundMsg{View: viewID(), Requester: member(), Missing: Range{From: from, To: from + r.Uint64N(100)},
			Low: low, HighestSent: highest, Entries: entries()}
	case TypeStable:
		m.Body = stableMsg{View: viewID(), Entries: entries()}
	case TypeStability:
		m.Body = stabilityMsg{View: viewID(), Entries: entries()}
	case TypeHighest:
		low := r.Uint64N(1 << 40)
		m.Body = Highest{View: viewID(), Low: low, Highest: low + r.Uint64N(1<<40)}
	case TypeHeartbeat:
		m.Body = Heartbeat{View: viewID()}
	case TypeChallenge, TypeEcho:
		c := challengeMsg{Type: t, View: viewID(), Target: member(), Nonce: r.Uint64(), Kind: ChallengeKind(r.Uint32() | 1)}
		for range r.IntN(4) {
			from := seq()
			c.Ranges = append(c.Ranges, Range{From: from, To: from + r.Uint64N(1000)})
		}
		m.Body = c
	default:
		m.Body = reservedMsg{Type: t, Body: payload(100)}
	}
	return m
}

var allTypes = []Type{TypeData, TypeFrag, TypeXmitReq, TypeMsgNotFound, TypeStable,
	TypeStability, TypeHighest, TypeHeartbeat, TypeChallenge, TypeEcho, TypeGMSFirst, TypeGMSLast, TypeStateFirst, TypeStateLast}
