package gms

import (
	"encoding/binary"
	"errors"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

// Message types, in the ranges wire reserves for membership (16..31) and
// state transfer (32..39).
const (
	typeDiscovery  wire.Type = 16 // kind 0 request (multicast), 1 answer (unicast)
	typeJoinReq    wire.Type = 17 // joiner -> coordinator
	typeJoinRsp    wire.Type = 18 // coordinator -> joiner: view + digest, or a redirect
	typeView       wire.Type = 19 // install a view; kind 1: merge view with digest; 2: exclusion notice
	typeViewAck    wire.Type = 20 // member -> coordinator
	typeLeave      wire.Type = 21 // kind 0 LEAVE (member -> coordinator), 1 leave done
	typeHeartbeat  wire.Type = 22 // multicast liveness; a coordinator's carries its view id
	typeProbe      wire.Type = 23 // kind 0 probe, 1 answer
	typeSuspect    wire.Type = 24 // member -> coordinator: members suspected
	typeMergeReq   wire.Type = 25 // merge leader -> other coordinator
	typeMergeRsp   wire.Type = 26 // kind 0 view + captured digest, 1 refused
	typeMergeDone  wire.Type = 27 // kind 0 committed, 1 cancelled: release the capture
	typeCutReq     wire.Type = 28 // coordinator -> survivors: report on a departed sender
	typeCutReport  wire.Type = 29 // survivor -> coordinator: delivered, received, gaps
	typeCut        wire.Type = 30 // kind 0 cut fixed (with lost ranges), 1 close the window; id the fix's number
	typeCutAck     wire.Type = 31 // survivor holds everything up to the cut of the fix id names
	typeStateReq   wire.Type = 32 // requester -> provider
	typeStateChunk wire.Type = 33 // provider -> requester; the first carries the digest
	typeStateAck   wire.Type = 34 // requester -> provider: bytes received in order
	typeStateDone  wire.Type = 35 // kind 0 installed (release), 1 aborted
)

// IsMembership reports whether t is a type gms handles: the driver routes
// such datagrams to GMS.Receive and every other one to the protocol.
func IsMembership(t wire.Type) bool { return t >= typeDiscovery && t <= typeStateDone }

// FixedLen is the size of the fixed part of every membership body:
//
//	0  kind uint8         1 sections uint8 (bit per optional section)
//	2  reserved uint16    4 view id (coordinator member 12 B, counter 8 B)
//	24 id uint64          32 a uint64     40 b uint64     48 c uint64
//	56 member (id uint64, incarnation uint32)
//
// The header length is wire.HeaderLen+FixedLen; a receiver skips fixed bytes
// beyond FixedLen (a newer minor's). The optional sections follow, in this
// order, each present when its bit is set:
//
//	addr    (1)  uint16 length, bytes
//	peer    (2)  member, uint16 length, address bytes
//	view    (4)  view id, uint16 count, count × (member, uint16 length, address)
//	digest  (8)  uint16 count, count × (member, low, delivered, received uint64)
//	ranges  (16) uint16 count, count × (from, to uint64), from <= to
//	members (32) uint16 count, count × member
//	data    (64) uint32 length, bytes
const FixedLen = 68

const (
	secAddr uint8 = 1 << iota
	secPeer
	secView
	secDigest
	secRanges
	secMembers
	secData
	secAll = secData<<1 - 1
)

// Decoding limits: a membership datagram claiming more is malformed.
const (
	maxAddr    = 1024
	maxCount   = 8192
	maxChunk   = 60000
	maxDataLen = 1 << 20
)

var errMalformed = errors.New("gms: malformed message")

// msg is every membership message: which fields a type uses is listed with
// the handlers (see gms.go). Decoding copies what it keeps (addresses,
// digests, data), so a msg outlives the datagram.
type msg struct {
	typ    wire.Type
	sender digest.Member // from the common header
	kind   uint8
	view   digest.ViewID
	id     uint64
	a      uint64
	b      uint64
	c      uint64
	member digest.Member

	secs    uint8
	addr    string
	peer    Peer
	v       View
	dig     digest.Digest
	ranges  []Range
	members []digest.Member
	data    []byte
}

func (m *msg) withAddr(a string) *msg          { m.addr = a; m.secs |= secAddr; return m }
func (m *msg) withPeer(p Peer) *msg            { m.peer = p; m.secs |= secPeer; return m }
func (m *msg) withView(v View) *msg            { m.v = v; m.secs |= secView; return m }
func (m *msg) withDigest(d digest.Digest) *msg { m.dig = d; m.secs |= secDigest; return m }
func (m *msg) withRanges(r []Range) *msg       { m.ranges = r; m.secs |= secRanges; return m }
func (m *msg) withMembers(ms []digest.Member) *msg {
	m.members = ms
	m.secs |= secMembers
	return m
}
func (m *msg) withData(b []byte) *msg { m.data = b; m.secs |= secData; return m }

func (m *msg) has(s uint8) bool { return m.secs&s != 0 }

// encode returns the datagram for m sent by sender in group.
func (m *msg) encode(group uint32, sender digest.Member) ([]byte, error) {
	b := make([]byte, wire.HeaderLen+FixedLen, wire.HeaderLen+FixedLen+m.varSize())
	f := b[wire.HeaderLen:]
	f[0] = m.kind
	f[1] = m.secs
	putViewID(f[4:], m.view)
	binary.LittleEndian.PutUint64(f[24:], m.id)
	binary.LittleEndian.PutUint64(f[32:], m.a)
	binary.LittleEndian.PutUint64(f[40:], m.b)
	binary.LittleEndian.PutUint64(f[48:], m.c)
	putMember(f[56:], m.member)
	if m.has(secAddr) {
		b = appendString16(b, m.addr)
	}
	if m.has(secPeer) {
		b = appendPeer(b, m.peer)
	}
	if m.has(secView) {
		b = binary.LittleEndian.AppendUint64(appendMemberB(b, m.v.ID.Coord), m.v.ID.Counter)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(m.v.Members)))
		for _, p := range m.v.Members {
			b = appendPeer(b, p)
		}
	}
	if m.has(secDigest) {
		b = binary.LittleEndian.AppendUint16(b, uint16(m.dig.Len()))
		for i := 0; i < m.dig.Len(); i++ {
			e := m.dig.At(i)
			b = appendMemberB(b, e.Member)
			b = binary.LittleEndian.AppendUint64(b, e.Low)
			b = binary.LittleEndian.AppendUint64(b, e.Delivered)
			b = binary.LittleEndian.AppendUint64(b, e.Received)
		}
	}
	if m.has(secRanges) {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(m.ranges)))
		for _, r := range m.ranges {
			b = binary.LittleEndian.AppendUint64(b, r.From)
			b = binary.LittleEndian.AppendUint64(b, r.To)
		}
	}
	if m.has(secMembers) {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(m.members)))
		for _, x := range m.members {
			b = appendMemberB(b, x)
		}
	}
	if m.has(secData) {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(m.data)))
		b = append(b, m.data...)
	}
	if len(m.addr) > maxAddr || len(m.v.Members) > maxCount || m.dig.Len() > maxCount ||
		len(m.ranges) > maxCount || len(m.members) > maxCount || len(m.data) > maxDataLen {
		return nil, errMalformed
	}
	err := wire.PutHeader(b, wire.Header{Type: m.typ, Group: group, Sender: sender, Len: wire.HeaderLen + FixedLen})
	return b, err
}

func (m *msg) varSize() int {
	n := 2 + len(m.addr) + 14 + len(m.peer.Addr) + 22 + 2 + 36*m.dig.Len() + 2 + 16*len(m.ranges) +
		2 + 12*len(m.members) + 4 + len(m.data)
	for _, p := range m.v.Members {
		n += 14 + len(p.Addr)
	}
	return n
}

// decode parses a membership datagram of group. It never panics; every
// error wraps a wire sentinel or errMalformed.
func decode(b []byte, group uint32) (*msg, error) {
	h, body, err := wire.DecodeHeader(b, group)
	if err != nil {
		return nil, err
	}
	if !IsMembership(h.Type) {
		return nil, wire.ErrUnknownType
	}
	fixed := h.Len - wire.HeaderLen
	if fixed < FixedLen || fixed > len(body) {
		return nil, errMalformed
	}
	f := body[:fixed]
	m := &msg{
		typ:    h.Type,
		sender: h.Sender,
		kind:   f[0],
		secs:   f[1],
		view:   getViewID(f[4:]),
		id:     binary.LittleEndian.Uint64(f[24:]),
		a:      binary.LittleEndian.Uint64(f[32:]),
		b:      binary.LittleEndian.Uint64(f[40:]),
		c:      binary.LittleEndian.Uint64(f[48:]),
		member: getMember(f[56:]),
	}
	if m.secs&^secAll != 0 && h.Minor <= wire.VersionMinor {
		return nil, errMalformed
	}
	r := reader{b: body[fixed:]}
	m.decodeSections(&r)
	if !r.ok() || (len(r.b) != 0 && h.Minor <= wire.VersionMinor) {
		return nil, errMalformed
	}
	if m.view.Counter > MaxViewCounter || m.v.ID.Counter > MaxViewCounter {
		return nil, errMalformed
	}
	return m, nil
}

// decodeSections reads the sections m.secs names, in their order, from r
// (r fails on a short or inconsistent one).
func (m *msg) decodeSections(r *reader) {
	if m.has(secAddr) {
		m.addr = r.string16()
	}
	if m.has(secPeer) {
		m.peer = r.peer()
	}
	if m.has(secView) {
		m.v.ID = r.viewID()
		n := r.count()
		if r.ok() {
			m.v.Members = make([]Peer, 0, min(n, len(r.b)/14))
			for i := 0; i < n && r.ok(); i++ {
				m.v.Members = append(m.v.Members, r.peer())
			}
		}
	}
	if m.has(secDigest) {
		n := r.count()
		if r.ok() && n*(wire.MemberLen+24) <= len(r.b) {
			es := make([]digest.Entry, n)
			for i := range es {
				es[i] = digest.Entry{Member: r.member(), Low: r.u64(), Delivered: r.u64(), Received: r.u64()}
			}
			m.dig = digest.New(es)
			if m.dig.Len() != n {
				r.fail() // a member listed twice
			}
		} else {
			r.fail()
		}
	}
	if m.has(secRanges) {
		n := r.count()
		if r.ok() && n*16 <= len(r.b) {
			m.ranges = make([]Range, n)
			for i := range m.ranges {
				m.ranges[i] = Range{From: r.u64(), To: r.u64()}
				if m.ranges[i].From > m.ranges[i].To || m.ranges[i].From == 0 {
					r.fail()
				}
			}
		} else {
			r.fail()
		}
	}
	if m.has(secMembers) {
		n := r.count()
		if r.ok() && n*wire.MemberLen <= len(r.b) {
			m.members = make([]digest.Member, n)
			for i := range m.members {
				m.members[i] = r.member()
			}
		} else {
			r.fail()
		}
	}
	if m.has(secData) {
		n := int(r.u32())
		if r.ok() && n <= maxDataLen && n <= len(r.b) {
			m.data = append([]byte(nil), r.b[:n]...)
			r.b = r.b[n:]
		} else {
			r.fail()
		}
	}
}

// reader consumes little-endian fields; after the first short read it
// returns zeros and ok() is false.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) ok() bool { return !r.bad }
func (r *reader) fail()    { r.bad = true; r.b = nil }

func (r *reader) take(n int) []byte {
	if r.bad || n > len(r.b) || n < 0 {
		r.fail()
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) u16() uint16 {
	if p := r.take(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if p := r.take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if p := r.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

func (r *reader) count() int {
	n := int(r.u16())
	if n > maxCount {
		r.fail()
		return 0
	}
	return n
}

func (r *reader) member() digest.Member {
	if p := r.take(wire.MemberLen); p != nil {
		return getMember(p)
	}
	return digest.Member{}
}

func (r *reader) viewID() digest.ViewID {
	if p := r.take(wire.ViewIDLen); p != nil {
		return getViewID(p)
	}
	return digest.ViewID{}
}

func (r *reader) string16() string {
	n := int(r.u16())
	if n > maxAddr {
		r.fail()
		return ""
	}
	return string(r.take(n))
}

func (r *reader) peer() Peer {
	m := r.member()
	return Peer{Member: m, Addr: r.string16()}
}

func appendString16(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func appendPeer(b []byte, p Peer) []byte { return appendString16(appendMemberB(b, p.Member), p.Addr) }

func appendMemberB(b []byte, m digest.Member) []byte {
	b = binary.LittleEndian.AppendUint64(b, m.ID)
	return binary.LittleEndian.AppendUint32(b, m.Inc)
}

func putMember(b []byte, m digest.Member) {
	binary.LittleEndian.PutUint64(b, m.ID)
	binary.LittleEndian.PutUint32(b[8:], m.Inc)
}

func getMember(b []byte) digest.Member {
	return digest.Member{ID: binary.LittleEndian.Uint64(b), Inc: binary.LittleEndian.Uint32(b[8:])}
}

func putViewID(b []byte, v digest.ViewID) {
	putMember(b, v.Coord)
	binary.LittleEndian.PutUint64(b[12:], v.Counter)
}

func getViewID(b []byte) digest.ViewID {
	return digest.ViewID{Coord: getMember(b), Counter: binary.LittleEndian.Uint64(b[12:])}
}
