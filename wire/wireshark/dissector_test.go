package wireshark_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine/auth"
	"github.com/nakcast/nakcast/wire"
	"github.com/nakcast/nakcast/wire/wireshark"
	"github.com/nakcast/nakcast/wire/wireshark/wiresharktest"
)

const group uint32 = 0x6e616b63

var (
	mA    = digest.Member{ID: 0xa1, Inc: 1}
	mB    = digest.Member{ID: 0xb2, Inc: 7}
	mC    = digest.Member{ID: 0xc3, Inc: 2}
	view1 = digest.ViewID{Coord: mA, Counter: 9}
)

// fields lists every field the cases check, plus the experts.
var fields = []string{
	"nakcast.version", "nakcast.minor", "nakcast.type", "nakcast.flags", "nakcast.flags.repair",
	"nakcast.flags.auth", "nakcast.group", "nakcast.sender.id", "nakcast.sender.inc", "nakcast.keyid",
	"nakcast.hlen", "nakcast.flags.encrypted", "nakcast.flags.report", "nakcast.flags.settled", "nakcast.trailer.nonce", "nakcast.trailer.salt",
	"nakcast.trailer.counter", "nakcast.trailer.path", "nakcast.trailer.count", "nakcast.trailer.tag", "nakcast.ciphertext",
	"nakcast.data.first", "nakcast.origin.id", "nakcast.origin.inc", "nakcast.data.count",
	"nakcast.msg.seq", "nakcast.msg.len", "nakcast.msg.data",
	"nakcast.frag.seq", "nakcast.frag.index", "nakcast.frag.count", "nakcast.frag.total", "nakcast.frag.len",
	"nakcast.frag.first", "nakcast.frag.last", "nakcast.frag.data",
	"nakcast.view.coord.id", "nakcast.view.coord.inc", "nakcast.view.counter",
	"nakcast.target.id", "nakcast.target.inc", "nakcast.xmit.delivered", "nakcast.xmit.count",
	"nakcast.range.from", "nakcast.range.to", "nakcast.challenge.nonce", "nakcast.challenge.kind", "nakcast.challenge.count",
	"nakcast.requester.id", "nakcast.missing.from", "nakcast.missing.to", "nakcast.low", "nakcast.highest",
	"nakcast.digest.count", "nakcast.entry.member.id", "nakcast.entry.member.inc", "nakcast.entry.low",
	"nakcast.entry.delivered", "nakcast.entry.received", "nakcast.extension",
}

// tcase is one datagram of the capture and what tshark must decode from it.
type tcase struct {
	name     string
	b        []byte
	dst      netip.AddrPort // zero: wiresharktest.Dst
	captured int            // bytes of the frame captured; 0: all
	want     map[string][]string
	// verdict is what the dissector must flag: "" (nothing), "malformed"
	// (malformed or truncated), "capture", "unknown", or "absent" (not
	// decoded as nakcast at all).
	verdict string
}

func hdr(sender digest.Member) wire.Header { return wire.Header{Group: group, Sender: sender} }

func member(m digest.Member) (id, inc string) {
	return fmt.Sprintf("0x%016x", m.ID), strconv.FormatUint(uint64(m.Inc), 10)
}

func u(vs ...uint64) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = strconv.FormatUint(v, 10)
	}
	return out
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return append([]byte(nil), b...)
}

func bundle(h wire.Header, origin digest.Member, first uint64, msgs ...[]byte) []byte {
	var w wire.DataWriter
	if err := w.Reset(make([]byte, 65507), h, origin, first); err != nil {
		panic(err)
	}
	for _, m := range msgs {
		if !w.Append(m) {
			panic("bundle: message does not fit")
		}
	}
	return append([]byte(nil), w.Finish()...)
}

// seal signs and encrypts datagram b, to be sent on path p, with the
// engine's sealer, under key 7 with nonce salt 0x01020304.
func seal(b []byte, p auth.Path) (signed, encrypted []byte) {
	key, err := auth.NewKey(7, bytes.Repeat([]byte{0x5a}, 32))
	if err != nil {
		panic(err)
	}
	ring, err := auth.NewKeyring(group, []auth.Key{key})
	if err != nil {
		panic(err)
	}
	nonces := auth.NewNonceSource(time.Unix(1700000000, 0), 0x01020304)
	buf := append(append([]byte(nil), b...), make([]byte, wire.TrailerLen)...)
	signed, err = auth.NewSealer(ring, nonces, false).Sign(buf, len(b), p)
	if err != nil {
		panic(err)
	}
	encrypted, err = auth.NewSealer(ring, nonces, true).Encrypt(make([]byte, len(b)+wire.TrailerLen), b, p)
	if err != nil {
		panic(err)
	}
	return signed, encrypted
}

func entries() wire.EntrySlice {
	return wire.EntrySlice{
		{Member: mA, Low: 10, Delivered: 20, Received: 30},
		{Member: mB, Low: 0, Delivered: 5, Received: 9},
	}
}

// cases builds one datagram of every type with the wire encoders, and the
// datagrams that must be flagged.
func cases() []tcase {
	buf := make([]byte, 65507)
	aID, aInc := member(mA)
	bID, bInc := member(mB)
	cID, cInc := member(mC)
	viewWant := map[string][]string{"nakcast.view.coord.id": {aID}, "nakcast.view.coord.inc": {aInc}, "nakcast.view.counter": u(9)}
	with := func(base map[string][]string, more map[string][]string) map[string][]string {
		out := map[string][]string{}
		for k, v := range base {
			out[k] = v
		}
		for k, v := range more {
			out[k] = v
		}
		return out
	}
	big := bytes.Repeat([]byte("0123456789"), 30)
	ents := entries()
	entWant := map[string][]string{
		"nakcast.entry.member.id": {aID, bID}, "nakcast.entry.member.inc": {aInc, bInc},
		"nakcast.entry.low": u(10, 0), "nakcast.entry.delivered": u(20, 5), "nakcast.entry.received": u(30, 9),
	}

	signed, encrypted := seal(bundle(hdr(mA), mA, 5, []byte("secret")), auth.PathGroup)
	report, _ := seal(must(wire.EncodeStability(buf, wire.Header{Group: group, Sender: mA, Flags: wire.FlagReport}, view1, ents)),
		auth.PathUnicast)
	trailer := func(b []byte, path string) map[string][]string {
		t := b[len(b)-wire.TrailerLen:]
		ctr := binary.LittleEndian.Uint64(t[wire.NonceSaltLen:])
		return map[string][]string{
			"nakcast.flags.auth": {"1"}, "nakcast.keyid": u(7),
			"nakcast.trailer.nonce":   {hex.EncodeToString(t[:wire.NonceLen])},
			"nakcast.trailer.salt":    {"0x01020304"},
			"nakcast.trailer.counter": u(ctr),
			"nakcast.trailer.path":    {path},
			"nakcast.trailer.count":   u(ctr &^ wire.NonceUnicast),
			"nakcast.trailer.tag":     {hex.EncodeToString(t[wire.NonceLen:])},
		}
	}

	full := bundle(hdr(mA), mA, 100, []byte("abc"), big, []byte("xyz"))
	newer := must(wire.EncodeHeartbeat(buf, hdr(mB), wire.Heartbeat{View: view1}))
	newer = append(newer, 1, 2, 3, 4) // a newer minor's fixed field
	newer[1] = wire.VersionMinor + 1
	binary.LittleEndian.PutUint16(newer[22:], uint16(wire.HeartbeatOverhead+4))
	badRange := must(wire.EncodeXmitReq(buf, hdr(mB), view1, mA, 40, []wire.Range{{From: 41, To: 45}}))
	binary.LittleEndian.PutUint64(badRange[wire.XmitReqOverhead:], 46) // from > to
	unknown := must(wire.EncodeHeartbeat(buf, hdr(mB), wire.Heartbeat{View: view1}))
	unknown[2] = 200
	garbage := make([]byte, 80)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(garbage)
	garbage[0] = 0x99

	return []tcase{
		{name: "DATA bundle", b: full, want: map[string][]string{
			"nakcast.version": {"1"}, "nakcast.minor": u(uint64(wire.VersionMinor)), "nakcast.type": {"1"}, "nakcast.flags.repair": {"0"},
			"nakcast.flags.auth": {"0"}, "nakcast.flags.report": {"0"}, "nakcast.group": {"0x6e616b63"}, "nakcast.sender.id": {aID},
			"nakcast.sender.inc": {aInc}, "nakcast.keyid": {"0"}, "nakcast.hlen": {"48"},
			"nakcast.data.first": u(100), "nakcast.origin.id": {aID}, "nakcast.data.count": u(3),
			"nakcast.msg.seq": u(100, 101, 102), "nakcast.msg.len": u(3, 300, 3),
			"nakcast.msg.data": {hex.EncodeToString([]byte("abc")), hex.EncodeToString(big), hex.EncodeToString([]byte("xyz"))},
			"_ws.col.Info":     {"DATA a1.1 seq 100-102 (3 msgs)"},
		}},
		{name: "DATA repair by a peer", b: bundle(wire.Header{Group: group, Sender: mB, Flags: wire.FlagRepair}, mC, 7, nil),
			want: map[string][]string{
				"nakcast.flags.repair": {"1"}, "nakcast.sender.id": {bID}, "nakcast.origin.id": {cID},
				"nakcast.origin.inc": {cInc}, "nakcast.msg.seq": u(7), "nakcast.msg.len": u(0),
				"_ws.col.Info": {"DATA b2.7 seq 7-7 (1 msgs) origin c3.2 [REPAIR]"},
			}},
		{name: "FRAG", b: must(wire.EncodeFrag(buf, hdr(mA), wire.Frag{Origin: mA, Seq: 102, Index: 2, Count: 5, Total: 1500, Payload: big})),
			want: map[string][]string{
				"nakcast.type": {"2"}, "nakcast.hlen": {"60"}, "nakcast.frag.seq": u(102), "nakcast.origin.id": {aID},
				"nakcast.frag.index": u(2), "nakcast.frag.count": u(5), "nakcast.frag.total": u(1500),
				"nakcast.frag.len": u(300), "nakcast.frag.first": u(100), "nakcast.frag.last": u(104),
				"nakcast.frag.data": {hex.EncodeToString(big)},
			}},
		{name: "XMIT_REQ", b: must(wire.EncodeXmitReq(buf, hdr(mB), view1, mA, 40,
			[]wire.Range{{From: 41, To: 45}, {From: 50, To: 50}, {From: 60, To: 1 << 40}})),
			want: with(viewWant, map[string][]string{
				"nakcast.type": {"3"}, "nakcast.hlen": {"68"}, "nakcast.sender.id": {bID}, "nakcast.target.id": {aID},
				"nakcast.target.inc": {aInc}, "nakcast.xmit.delivered": u(40), "nakcast.xmit.count": u(3),
				"nakcast.range.from": u(41, 50, 60), "nakcast.range.to": u(45, 50, 1<<40),
				"_ws.col.Info": {"XMIT_REQ b2.7 target a1.1 ranges 41-45,50-50,60-1099511627776"},
			})},
		{name: "MSG_NOT_FOUND", b: must(wire.EncodeMsgNotFound(buf, hdr(mA), view1, mB, wire.Range{From: 51, To: 150}, 150, 200, ents)),
			want: with(with(viewWant, entWant), map[string][]string{
				"nakcast.type": {"4"}, "nakcast.hlen": {"92"}, "nakcast.requester.id": {bID},
				"nakcast.missing.from": u(51), "nakcast.missing.to": u(150), "nakcast.low": u(150),
				"nakcast.highest": u(200), "nakcast.digest.count": u(2),
			})},
		{name: "STABLE", b: must(wire.EncodeStable(buf, hdr(mB), view1, ents)),
			want: with(with(viewWant, entWant), map[string][]string{"nakcast.type": {"5"}, "nakcast.digest.count": u(2)})},
		{name: "STABILITY", b: must(wire.EncodeStability(buf, hdr(mA), view1, ents)),
			want: with(with(viewWant, entWant), map[string][]string{
				"nakcast.type": {"6"}, "nakcast.flags.report": {"0"}, "nakcast.digest.count": u(2),
				"_ws.col.Info": {"STABILITY a1.1 view a1.1#9, 2 entries"},
			})},
		{name: "STABILITY with REPORT, signed, to one member", b: report,
			want: with(with(with(viewWant, entWant), trailer(report, "1")), map[string][]string{
				"nakcast.type": {"6"}, "nakcast.flags": {"0x0a"}, "nakcast.flags.report": {"1"}, "nakcast.digest.count": u(2),
				"_ws.col.Info": {"STABILITY a1.1 view a1.1#9, 2 entries [REPORT] [AUTH]"},
			})},
		{name: "STABILITY settled", b: must(wire.EncodeStability(buf, wire.Header{Group: group, Sender: mA, Flags: wire.FlagSettled}, view1, ents)),
			want: with(with(viewWant, entWant), map[string][]string{
				"nakcast.type": {"6"}, "nakcast.flags": {"0x10"}, "nakcast.flags.settled": {"1"}, "nakcast.flags.report": {"0"},
				"_ws.col.Info": {"STABILITY a1.1 view a1.1#9, 2 entries [SETTLED]"},
			})},
		{name: "STABILITY empty", b: must(wire.EncodeStability(buf, hdr(mA), view1, wire.EntrySlice{})),
			want: with(viewWant, map[string][]string{"nakcast.type": {"6"}, "nakcast.digest.count": u(0)})},
		{name: "HIGHEST", b: must(wire.EncodeHighest(buf, hdr(mC), wire.Highest{View: view1, Low: 3, Highest: 77})),
			want: with(viewWant, map[string][]string{
				"nakcast.type": {"7"}, "nakcast.hlen": {"60"}, "nakcast.sender.id": {cID}, "nakcast.low": u(3), "nakcast.highest": u(77),
			})},
		{name: "HEARTBEAT", b: must(wire.EncodeHeartbeat(buf, hdr(mC), wire.Heartbeat{View: view1})),
			want: with(viewWant, map[string][]string{"nakcast.type": {"8"}, "nakcast.hlen": {"44"}})},
		{name: "signed DATA", b: signed, want: with(trailer(signed, "0"), map[string][]string{
			"nakcast.flags.encrypted": {"0"}, "nakcast.msg.seq": u(5),
			"nakcast.msg.data": {hex.EncodeToString([]byte("secret"))},
			"_ws.col.Info":     {"DATA a1.1 seq 5-5 (1 msgs) [AUTH]"},
		})},
		{name: "encrypted DATA", b: encrypted, want: with(trailer(encrypted, "0"), map[string][]string{
			"nakcast.flags.encrypted": {"1"}, "nakcast.type": {"1"}, "nakcast.sender.id": {aID},
			"nakcast.ciphertext": {hex.EncodeToString(encrypted[wire.HeaderLen : len(encrypted)-wire.TrailerLen])},
			"_ws.col.Info":       {"DATA a1.1 [AUTH, ENCRYPTED]"},
		})},
		{name: "CHALLENGE", b: must(wire.EncodeChallenge(buf, hdr(mB), wire.TypeChallenge, view1, mA, 0x1234, wire.ChallengeNotFound,
			wire.RangeSlice{{From: 51, To: 150}})),
			want: with(viewWant, map[string][]string{
				"nakcast.type": {"9"}, "nakcast.hlen": {"72"}, "nakcast.target.id": {aID}, "nakcast.challenge.nonce": u(0x1234),
				"nakcast.challenge.kind": u(2), "nakcast.challenge.count": u(1), "nakcast.range.from": u(51), "nakcast.range.to": u(150),
				"_ws.col.Info": {"CHALLENGE b2.7 NOT_FOUND target a1.1 ranges 51-150"},
			})},
		{name: "ECHO", b: must(wire.EncodeChallenge(buf, hdr(mA), wire.TypeEcho, view1, mA, 77, wire.ChallengeAddress, wire.RangeSlice(nil))),
			want: with(viewWant, map[string][]string{
				"nakcast.type": {"10"}, "nakcast.hlen": {"72"}, "nakcast.challenge.kind": u(1), "nakcast.challenge.count": u(0),
				"_ws.col.Info": {"ECHO a1.1 ADDRESS target a1.1"},
			})},
		{name: "heuristic on another port", b: must(wire.EncodeHeartbeat(buf, hdr(mC), wire.Heartbeat{View: view1})),
			dst: wiresharktest.OtherDst, want: map[string][]string{"nakcast.type": {"8"}, "nakcast.sender.id": {cID}}},
		{name: "newer minor", b: newer, want: with(viewWant, map[string][]string{"nakcast.minor": u(uint64(wire.VersionMinor) + 1), "nakcast.extension": {"01020304"}}),
			verdict: "newer"},
		{name: "truncated DATA", b: full[:len(full)-10], verdict: "malformed",
			want: map[string][]string{"nakcast.msg.seq": u(100, 101), "nakcast.msg.len": u(3, 300)}},
		{name: "capture shorter than the datagram", b: full, captured: wireshark.EthernetLen + wireshark.IPv4Len + wireshark.UDPLen + 60,
			verdict: "capture", want: map[string][]string{"nakcast.data.count": u(3), "nakcast.msg.seq": u(100, 101)}},
		{name: "range from > to", b: badRange, verdict: "malformed", want: map[string][]string{"nakcast.range.from": u(46)}},
		{name: "unknown type", b: unknown, verdict: "unknown", want: map[string][]string{"nakcast.type": {"200"}}},
		{name: "short header", b: full[:10], verdict: "malformed"},
		{name: "garbage on the nakcast port", b: garbage, verdict: "malformed"},
		{name: "garbage on another port", b: garbage, dst: wiresharktest.OtherDst, verdict: "absent"},
	}
}

// checkFrame checks one decoded frame against its case.
func checkFrame(t *testing.T, c tcase, f wireshark.Frame) {
	t.Helper()
	for k, v := range c.want {
		require.Equal(t, v, f[k], "%s: field %s", c.name, k)
	}
	require.Empty(t, f["nakcast.dissector_error"], "%s: the dissector failed", c.name)
	if c.verdict == "absent" {
		require.Empty(t, f["nakcast.version"], "%s: decoded as nakcast", c.name)
		return
	}
	require.NotEmpty(t, f["nakcast.version"], "%s: not decoded as nakcast", c.name)
	require.Equal(t, c.verdict == "malformed", wiresharktest.Malformed(f), "%s: malformed %v truncated %v", c.name,
		f["nakcast.malformed"], f["nakcast.truncated"])
	require.Equal(t, c.verdict == "capture", len(f["nakcast.capture_truncated"]) > 0, "%s: capture note", c.name)
	require.Equal(t, c.verdict == "unknown", len(f["nakcast.unknown_type"]) > 0, "%s: unknown type", c.name)
	require.Equal(t, c.verdict == "newer", len(f["nakcast.newer_minor"]) > 0, "%s: newer minor", c.name)
}

// decode runs the dissector over the cases' datagrams.
func decode(t *testing.T, cs []tcase) []wireshark.Frame {
	dgs := make([]wiresharktest.Datagram, len(cs))
	for i, c := range cs {
		dgs[i] = wiresharktest.Datagram{B: c.b, Dst: c.dst, Captured: c.captured}
	}
	return wiresharktest.Decode(t, dgs, append(fields, wiresharktest.Experts...))
}

// TestDissector decodes a capture of every wire type with tshark and checks
// the fields against what the encoders wrote, and the expert info of the
// datagrams that break FORMAT.md.
func TestDissector(t *testing.T) {
	cs := cases()
	frames := decode(t, cs)
	for i, c := range cs {
		checkFrame(t, c, frames[i])
	}
}

// wireVerdict decodes b with the wire package as a receiver of b's own
// group would.
func wireVerdict(b []byte) error {
	var g uint32
	if len(b) >= 8 {
		g = binary.LittleEndian.Uint32(b[4:])
	}
	h, body, err := wire.DecodeHeader(b, g)
	if err != nil {
		return err
	}
	switch h.Type {
	case wire.TypeData:
		_, err = wire.DecodeData(h, body)
	case wire.TypeFrag:
		_, err = wire.DecodeFrag(h, body)
	case wire.TypeXmitReq:
		_, err = wire.DecodeXmitReq(h, body)
	case wire.TypeMsgNotFound:
		_, err = wire.DecodeMsgNotFound(h, body)
	case wire.TypeStable:
		_, err = wire.DecodeStable(h, body)
	case wire.TypeStability:
		_, err = wire.DecodeStability(h, body)
	case wire.TypeHighest:
		_, err = wire.DecodeHighest(h, body)
	case wire.TypeHeartbeat:
		_, err = wire.DecodeHeartbeat(h, body)
	case wire.TypeChallenge, wire.TypeEcho:
		_, err = wire.DecodeChallenge(h, body)
	}
	return err
}

// mutate returns a copy of b with a few random bytes changed, cut short or
// extended, never empty.
func mutate(r *rand.Rand, b []byte) []byte {
	m := append([]byte(nil), b...)
	switch r.IntN(4) {
	case 0:
		m = m[:1+r.IntN(len(m))]
	case 1:
		m = append(m, byte(r.IntN(256)), byte(r.IntN(256)))
	}
	for range 1 + r.IntN(3) {
		// Mostly in the header and fixed part, where the rules are.
		i := r.IntN(min(len(m), 100))
		if r.IntN(2) == 0 {
			m[i] = byte(r.IntN(256))
		} else {
			m[i] ^= 1 << r.IntN(8)
		}
	}
	return m
}

// TestDissectorAgreesWithWire mutates valid datagrams of every type at
// random (a fixed seed) and checks that the dissector never fails and flags
// a datagram as malformed exactly when the wire decoders reject it (an
// unknown type: exactly when they say ErrUnknownType).
func TestDissectorAgreesWithWire(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 1))
	var valid [][]byte
	for _, c := range cases() {
		if c.verdict == "" && c.captured == 0 {
			valid = append(valid, c.b)
		}
	}
	var cs []tcase
	for i := range 400 {
		m := mutate(r, valid[i%len(valid)])
		if len(m) >= 3 && wire.Type(m[2]).Reserved() {
			continue // membership bodies: gms's test compares those with gms's decoder
		}
		if len(m) >= 4 && m[3]&(wire.FlagAuth|wire.FlagEncrypted) == wire.FlagAuth|wire.FlagEncrypted {
			continue // an encrypted body: the decoders would read ciphertext, the dissector does not
		}
		c := tcase{name: fmt.Sprintf("mutation %d: %x", i, m), b: m}
		switch err := wireVerdict(m); {
		case err == nil:
			if len(m) >= wire.HeaderLen && binary.LittleEndian.Uint16(m[22:]) > uint16(wire.HeaderLen+fixedLen(wire.Type(m[2]))) {
				c.verdict = "newer"
			}
		case errors.Is(err, wire.ErrUnknownType):
			c.verdict = "unknown"
		default:
			c.verdict = "malformed"
		}
		cs = append(cs, c)
	}
	counts := map[string]int{}
	for _, c := range cs {
		counts[c.verdict]++
	}
	t.Logf("%d mutations: %v", len(cs), counts)
	frames := decode(t, cs)
	for i, c := range cs {
		f := frames[i]
		require.Empty(t, f["nakcast.dissector_error"], "%s: the dissector failed", c.name)
		if c.verdict == "unknown" {
			require.NotEmpty(t, f["nakcast.unknown_type"], "%s: unknown type not flagged", c.name)
			continue
		}
		require.Equal(t, c.verdict == "malformed", wiresharktest.Malformed(f), "%s: wire says %v; dissector: %v %v", c.name,
			wireVerdict(c.b), f["nakcast.malformed"], f["nakcast.truncated"])
	}
}

// fixedLen is the 1.0 fixed part of the wire's own types.
func fixedLen(t wire.Type) int {
	return map[wire.Type]int{
		wire.TypeData: wire.DataFixed, wire.TypeFrag: wire.FragFixed, wire.TypeXmitReq: wire.XmitReqFixed,
		wire.TypeMsgNotFound: wire.MsgNotFoundFixed, wire.TypeStable: wire.StableFixed,
		wire.TypeStability: wire.StableFixed, wire.TypeHighest: wire.HighestFixed, wire.TypeHeartbeat: wire.HeartbeatFixed,
		wire.TypeChallenge: wire.ChallengeFixed, wire.TypeEcho: wire.ChallengeFixed,
	}[t]
}

// TestDissectorPortPreference moves the dissector to another port with the
// ports preference: garbage there is then decoded (and flagged) as nakcast,
// while valid datagrams on the old port are still found by the heuristic.
func TestDissectorPortPreference(t *testing.T) {
	garbage := bytes.Repeat([]byte{0x99}, 40)
	hb := must(wire.EncodeHeartbeat(make([]byte, 100), hdr(mC), wire.Heartbeat{View: view1}))
	moved := netip.AddrPortFrom(wiresharktest.Dst.Addr(), 46000)
	frames := wiresharktest.Decode(t, []wiresharktest.Datagram{{B: garbage, Dst: moved}, {B: garbage}, {B: hb}},
		append([]string{"nakcast.version", "nakcast.type"}, wiresharktest.Experts...), "-o", "nakcast.ports:46000")
	require.True(t, wiresharktest.Malformed(frames[0]), "garbage on the preferred port: %v", frames[0])
	require.Empty(t, frames[1]["nakcast.version"], "garbage on the old port: %v", frames[1])
	require.Equal(t, []string{"8"}, frames[2]["nakcast.type"], "heartbeat on the old port")
}
