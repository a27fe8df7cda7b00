package wire

import (
	"encoding/binary"
	"testing"

	"github.com/nakcast/nakcast/digest"
	"github.com/stretchr/testify/require"
)

// TestLayout pins the byte offsets that FORMAT.md documents.
func TestLayout(t *testing.T) {
	le16 := func(b []byte, off int) uint64 { return uint64(binary.LittleEndian.Uint16(b[off:])) }
	le32 := func(b []byte, off int) uint64 { return uint64(binary.LittleEndian.Uint32(b[off:])) }
	le64 := func(b []byte, off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
	sender := digest.Member{ID: 0x1111111111111111, Inc: 0x22222222}
	origin := digest.Member{ID: 0x3333333333333333, Inc: 0x44444444}
	view := digest.ViewID{Coord: digest.Member{ID: 0x55, Inc: 0x66}, Counter: 0x77}
	h := Header{Flags: FlagAuth | FlagRepair, Group: 0xabcdef01, Sender: sender, KeyID: 0x0102}
	buf := make([]byte, 4096)
	type field struct {
		off, size int
		want      uint64
	}
	check := func(t *testing.T, b []byte, typ Type, hlen int, fields []field) {
		t.Helper()
		common := []field{
			{0, 1, 1}, {1, 1, uint64(VersionMinor)}, {2, 1, uint64(typ)}, {3, 1, 3}, {4, 4, 0xabcdef01},
			{8, 8, sender.ID}, {16, 4, uint64(sender.Inc)}, {20, 2, 0x0102}, {22, 2, uint64(hlen)},
		}
		for _, f := range append(common, fields...) {
			var got uint64
			switch f.size {
			case 1:
				got = uint64(b[f.off])
			case 2:
				got = le16(b, f.off)
			case 4:
				got = le32(b, f.off)
			case 8:
				got = le64(b, f.off)
			}
			require.Equal(t, f.want, got, "offset %d", f.off)
		}
	}
	viewFields := []field{{24, 8, 0x55}, {32, 4, 0x66}, {36, 8, 0x77}}

	t.Run("data", func(t *testing.T) {
		var w DataWriter
		require.NoError(t, w.Reset(buf, h, origin, 0x99))
		w.Append([]byte{0xee, 0xef})
		w.Append(nil)
		b := w.Finish()
		require.Len(t, b, 48+2+2+2+TrailerLen)
		check(t, b, TypeData, 48, []field{{24, 8, 0x99}, {32, 8, origin.ID}, {40, 4, uint64(origin.Inc)},
			{44, 4, 2}, {48, 2, 2}, {50, 1, 0xee}, {51, 1, 0xef}, {52, 2, 0}})
	})
	t.Run("frag", func(t *testing.T) {
		b, err := EncodeFrag(buf, h, Frag{Origin: origin, Seq: 0x99, Index: 3, Count: 5, Total: 1000, Payload: []byte{0xee}})
		require.NoError(t, err)
		require.Len(t, b, 61+TrailerLen)
		check(t, b, TypeFrag, 60, []field{{24, 8, 0x99}, {32, 8, origin.ID}, {40, 4, uint64(origin.Inc)},
			{44, 4, 3}, {48, 4, 5}, {52, 4, 1000}, {56, 4, 1}, {60, 1, 0xee}})
	})
	t.Run("xmit", func(t *testing.T) {
		b, err := EncodeXmitReq(buf, h, view, origin, 0x88, []Range{{From: 0x10, To: 0x20}})
		require.NoError(t, err)
		require.Len(t, b, 68+16+TrailerLen)
		check(t, b, TypeXmitReq, 68, append(viewFields, field{44, 8, origin.ID}, field{52, 4, uint64(origin.Inc)},
			field{56, 8, 0x88}, field{64, 4, 1}, field{68, 8, 0x10}, field{76, 8, 0x20}))
	})
	entry := digest.Entry{Member: origin, Low: 0xa, Delivered: 0xb, Received: 0xc}
	entryAt := func(off int) []field {
		return []field{{off, 8, origin.ID}, {off + 8, 4, uint64(origin.Inc)}, {off + 12, 8, 0xa}, {off + 20, 8, 0xb}, {off + 28, 8, 0xc}}
	}
	t.Run("msg-not-found", func(t *testing.T) {
		b, err := EncodeMsgNotFound(buf, h, view, origin, Range{From: 0x10, To: 0x20}, 0x30, 0x40, EntrySlice{entry})
		require.NoError(t, err)
		require.Len(t, b, 92+36+TrailerLen)
		fs := append(viewFields, field{44, 8, origin.ID}, field{52, 4, uint64(origin.Inc)}, field{56, 8, 0x10},
			field{64, 8, 0x20}, field{72, 8, 0x30}, field{80, 8, 0x40}, field{88, 4, 1})
		check(t, b, TypeMsgNotFound, 92, append(fs, entryAt(92)...))
	})
	for _, typ := range []Type{TypeStable, TypeStability} {
		t.Run(typ.String(), func(t *testing.T) {
			var b []byte
			var err error
			if typ == TypeStable {
				b, err = EncodeStable(buf, h, view, EntrySlice{entry})
			} else {
				b, err = EncodeStability(buf, h, view, EntrySlice{entry})
			}
			require.NoError(t, err)
			require.Len(t, b, 48+36+TrailerLen)
			check(t, b, typ, 48, append(append(viewFields, field{44, 4, 1}), entryAt(48)...))
		})
	}
	t.Run("highest", func(t *testing.T) {
		b, err := EncodeHighest(buf, h, Highest{View: view, Low: 0x30, Highest: 0x40})
		require.NoError(t, err)
		require.Len(t, b, 60+TrailerLen)
		check(t, b, TypeHighest, 60, append(viewFields, field{44, 8, 0x30}, field{52, 8, 0x40}))
	})
	t.Run("heartbeat", func(t *testing.T) {
		b, err := EncodeHeartbeat(buf, h, Heartbeat{View: view})
		require.NoError(t, err)
		require.Len(t, b, 44+TrailerLen)
		check(t, b, TypeHeartbeat, 44, viewFields)
	})
	t.Run("challenge", func(t *testing.T) {
		for _, typ := range []Type{TypeChallenge, TypeEcho} {
			b, err := EncodeChallenge(buf, h, typ, view, origin, 0x8877665544332211, ChallengeNotFound, RangeSlice{{From: 0x10, To: 0x20}})
			require.NoError(t, err)
			require.Len(t, b, 72+16+TrailerLen)
			check(t, b, typ, 72, append(viewFields, field{44, 8, origin.ID}, field{52, 4, uint64(origin.Inc)},
				field{56, 8, 0x8877665544332211}, field{64, 4, 2}, field{68, 4, 1}, field{72, 8, 0x10}, field{80, 8, 0x20}))
		}
	})
}
