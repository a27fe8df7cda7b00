package gms

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

var (
	mA = digest.Member{ID: 0xa, Inc: 1}
	mB = digest.Member{ID: 0xb, Inc: 2}
	mC = digest.Member{ID: 0xc, Inc: 3}
)

// sampleMsgs has one message of every type, with every section used
// somewhere.
func sampleMsgs() []*msg {
	v := View{ID: digest.ViewID{Coord: mA, Counter: 9}, Members: []Peer{{mA, "10.0.0.1:7800"}, {mB, "b"}, {mC, ""}}}
	d := digest.New([]digest.Entry{{Member: mA, Low: 1, Delivered: 5, Received: 7}, {Member: mB, Delivered: 3, Received: 3}, {Member: mC}})
	return []*msg{
		(&msg{typ: typeDiscovery}).withAddr("joiner:1"),
		(&msg{typ: typeDiscovery, kind: 1, view: v.ID}).withPeer(v.Members[0]),
		(&msg{typ: typeJoinReq}).withAddr("c"),
		(&msg{typ: typeJoinRsp, view: v.ID, member: mC}).withView(v).withDigest(d),
		(&msg{typ: typeJoinRsp, kind: 1, member: mC}).withPeer(v.Members[0]),
		(&msg{typ: typeView, view: v.ID}).withView(v),
		(&msg{typ: typeView, kind: 1, view: v.ID, id: 77}).withView(v).withDigest(d),
		{typ: typeViewAck, view: v.ID},
		{typ: typeViewAck, kind: 1, view: v.ID, a: 12},
		{typ: typeLeave, view: v.ID, a: 1234},
		{typ: typeLeave, kind: 1},
		(&msg{typ: typeHeartbeat, kind: 1, view: v.ID}).withAddr("a"),
		(&msg{typ: typeProbe, id: 5}).withAddr("a"),
		{typ: typeProbe, kind: 1, id: 5},
		(&msg{typ: typeSuspect, view: v.ID}).withMembers([]digest.Member{mB, mC}),
		(&msg{typ: typeMergeReq, id: 3, view: v.ID}).withAddr("a"),
		(&msg{typ: typeMergeRsp, id: 3}).withView(v).withDigest(d),
		{typ: typeMergeRsp, kind: 1, id: 3},
		{typ: typeMergeDone, id: 3},
		{typ: typeCutReq, view: v.ID, member: mC},
		(&msg{typ: typeCutReport, view: v.ID, member: mC, a: 4, b: 20, c: 1}).withRanges([]Range{{From: 5, To: 6}, {From: 9, To: 20}}),
		(&msg{typ: typeCut, view: v.ID, member: mC, a: 20}).withRanges([]Range{{From: 7, To: 8}}),
		{typ: typeCut, kind: 1, view: v.ID, member: mC},
		{typ: typeCutAck, view: v.ID, member: mC},
		(&msg{typ: typeStateReq, id: 99}).withAddr("c"),
		(&msg{typ: typeStateChunk, id: 99, a: 0, b: 3}).withDigest(d).withData([]byte{1, 2, 3}),
		{typ: typeStateAck, id: 99, a: 3},
		{typ: typeStateDone, id: 99},
	}
}

func TestMsgRoundTrip(t *testing.T) {
	for _, m := range sampleMsgs() {
		t.Run(fmt.Sprintf("%v/%d", m.typ, m.kind), func(t *testing.T) {
			b, err := m.encode(7, mB)
			require.NoError(t, err)
			h, _, err := wire.DecodeHeader(b, 7)
			require.NoError(t, err)
			require.Equal(t, wire.HeaderLen+FixedLen, h.Len)
			got, err := decode(b, 7)
			require.NoError(t, err)
			require.Equal(t, mB, got.sender)
			require.Equal(t, m.typ, got.typ)
			require.Equal(t, m.kind, got.kind)
			require.Equal(t, m.view, got.view)
			require.Equal(t, [4]uint64{m.id, m.a, m.b, m.c}, [4]uint64{got.id, got.a, got.b, got.c})
			require.Equal(t, m.member, got.member)
			require.Equal(t, m.secs, got.secs)
			require.Equal(t, m.addr, got.addr)
			require.Equal(t, m.peer, got.peer)
			require.True(t, m.v.Equal(got.v), "view %v != %v", m.v, got.v)
			require.True(t, m.dig.Equal(got.dig))
			require.Equal(t, len(m.ranges), len(got.ranges))
			require.Equal(t, len(m.members), len(got.members))
			require.Equal(t, len(m.data), len(got.data))
			// Every truncation fails cleanly.
			for n := 0; n < len(b); n++ {
				_, err := decode(b[:n], 7)
				require.Error(t, err, "truncated to %d", n)
			}
			_, err = decode(b, 8)
			require.ErrorIs(t, err, wire.ErrForeignGroup)
		})
	}
}

func TestMsgDecodeRejects(t *testing.T) {
	good, err := (&msg{typ: typeCut, member: mC, a: 3}).withRanges([]Range{{From: 1, To: 2}}).encode(7, mA)
	require.NoError(t, err)
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"data type", mut(func(b []byte) []byte { b[2] = byte(wire.TypeHeartbeat); return b })},
		{"reserved type not ours", mut(func(b []byte) []byte { b[2] = 39; return b })},
		{"short fixed part", mut(func(b []byte) []byte { binary.LittleEndian.PutUint16(b[22:], wire.HeaderLen+10); return b })},
		{"unknown section", mut(func(b []byte) []byte { b[wire.HeaderLen+1] |= 0x80; return b })},
		{"range from > to", mut(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[len(b)-16:], 5); return b })},
		{"range count too big", mut(func(b []byte) []byte { binary.LittleEndian.PutUint16(b[wire.HeaderLen+FixedLen:], 2); return b })},
		{"trailing bytes", mut(func(b []byte) []byte { return append(b, 0) })},
		{"zero sender", mut(func(b []byte) []byte { clear(b[8:20]); return b })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decode(tc.b, 7)
			require.Error(t, err)
		})
	}
	// A newer minor may append fixed fields and sections: skipped.
	newer := append([]byte(nil), good[:wire.HeaderLen+FixedLen]...)
	newer = append(newer, 0xde, 0xad)
	newer = append(newer, good[wire.HeaderLen+FixedLen:]...)
	newer = append(newer, 0xbe, 0xef)
	newer[1] = wire.VersionMinor + 1
	binary.LittleEndian.PutUint16(newer[22:], wire.HeaderLen+FixedLen+2)
	m, err := decode(newer, 7)
	require.NoError(t, err)
	require.Equal(t, []Range{{From: 1, To: 2}}, m.ranges)
}

// FuzzDecode: decode never panics, and what it accepts re-encodes to a
// datagram that decodes to the same message.
func FuzzDecode(f *testing.F) {
	for _, m := range sampleMsgs() {
		b, err := m.encode(7, mB)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decode(b, 7)
		if err != nil {
			return
		}
		if m.secs&^secAll != 0 {
			return // a newer minor's sections are skipped, not re-encoded
		}
		out, err := m.encode(7, m.sender)
		if err != nil {
			return
		}
		m2, err := decode(out, 7)
		require.NoError(t, err)
		require.Equal(t, m.secs, m2.secs)
		require.True(t, m.v.Equal(m2.v))
		require.True(t, m.dig.Equal(m2.dig))
		require.Equal(t, m.ranges, m2.ranges)
	})
}

// TestWriteFuzzCorpus regenerates the committed seed corpus when
// GMS_WRITE_CORPUS=1: every sample message plus invalid variants.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("GMS_WRITE_CORPUS") == "" {
		t.Skip("set GMS_WRITE_CORPUS=1 to regenerate testdata/fuzz/FuzzDecode")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	write := func(name string, b []byte) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", b), 0o644))
	}
	for i, m := range sampleMsgs() {
		b, err := m.encode(7, mB)
		require.NoError(t, err)
		write(fmt.Sprintf("valid-%02d-type%d-kind%d", i, m.typ, m.kind), b)
		write(fmt.Sprintf("truncated-%02d", i), b[:len(b)*2/3])
		bad := append([]byte(nil), b...)
		bad[wire.HeaderLen+1] = 0xff
		write(fmt.Sprintf("badsections-%02d", i), bad)
	}
	write("empty", nil)
	write("header-only", make([]byte, wire.HeaderLen))
}
