package gms

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/nakcast/nakcast/wire/wireshark/wiresharktest"
	"github.com/stretchr/testify/require"
)

// dissectorFields are the fields of a membership datagram.
var dissectorFields = []string{
	"nakcast.type", "nakcast.sender.id", "nakcast.gms.kind", "nakcast.gms.sections",
	"nakcast.view.coord.id", "nakcast.view.coord.inc", "nakcast.view.counter",
	"nakcast.gms.id", "nakcast.gms.a", "nakcast.gms.b", "nakcast.gms.c", "nakcast.gms.member.id", "nakcast.gms.member.inc",
	"nakcast.gms.addr", "nakcast.gms.peer.member.id", "nakcast.gms.peer.member.inc", "nakcast.gms.peer.addr",
	"nakcast.gms.view.coord.id", "nakcast.gms.view.counter", "nakcast.gms.view.count", "nakcast.gms.count",
	"nakcast.gms.entry.member.id", "nakcast.gms.entry.low", "nakcast.gms.entry.delivered", "nakcast.gms.entry.received",
	"nakcast.gms.range.from", "nakcast.gms.range.to", "nakcast.gms.members.id", "nakcast.gms.data.len", "nakcast.gms.data",
}

func hexID(id uint64) string { return fmt.Sprintf("0x%016x", id) }

func dec(v uint64) string { return strconv.FormatUint(v, 10) }

// dissectorWant is what the dissector must show for m: every field of the
// fixed part and of the sections m carries, in wire order.
func dissectorWant(m *msg) map[string][]string {
	w := map[string][]string{
		"nakcast.type": {dec(uint64(m.typ))}, "nakcast.sender.id": {hexID(mB.ID)}, "nakcast.gms.kind": {dec(uint64(m.kind))},
		"nakcast.gms.sections": {fmt.Sprintf("0x%02x", m.secs)}, "nakcast.view.coord.id": {hexID(m.view.Coord.ID)},
		"nakcast.view.coord.inc": {dec(uint64(m.view.Coord.Inc))}, "nakcast.view.counter": {dec(m.view.Counter)},
		"nakcast.gms.id": {dec(m.id)}, "nakcast.gms.a": {dec(m.a)}, "nakcast.gms.b": {dec(m.b)}, "nakcast.gms.c": {dec(m.c)},
		"nakcast.gms.member.id": {hexID(m.member.ID)}, "nakcast.gms.member.inc": {dec(uint64(m.member.Inc))},
	}
	add := func(k string, v ...string) { w[k] = append(w[k], v...) }
	peer := func(p Peer) {
		add("nakcast.gms.peer.member.id", hexID(p.Member.ID))
		add("nakcast.gms.peer.member.inc", dec(uint64(p.Member.Inc)))
		add("nakcast.gms.peer.addr", p.Addr)
	}
	if m.has(secAddr) {
		add("nakcast.gms.addr", m.addr)
	}
	if m.has(secPeer) {
		peer(m.peer)
	}
	if m.has(secView) {
		add("nakcast.gms.view.coord.id", hexID(m.v.ID.Coord.ID))
		add("nakcast.gms.view.counter", dec(m.v.ID.Counter))
		add("nakcast.gms.view.count", strconv.Itoa(len(m.v.Members)))
		for _, p := range m.v.Members {
			peer(p)
		}
	}
	if m.has(secDigest) {
		add("nakcast.gms.count", strconv.Itoa(m.dig.Len()))
		for i := range m.dig.Len() {
			e := m.dig.At(i)
			add("nakcast.gms.entry.member.id", hexID(e.Member.ID))
			add("nakcast.gms.entry.low", dec(e.Low))
			add("nakcast.gms.entry.delivered", dec(e.Delivered))
			add("nakcast.gms.entry.received", dec(e.Received))
		}
	}
	if m.has(secRanges) {
		add("nakcast.gms.count", strconv.Itoa(len(m.ranges)))
		for _, r := range m.ranges {
			add("nakcast.gms.range.from", dec(r.From))
			add("nakcast.gms.range.to", dec(r.To))
		}
	}
	if m.has(secMembers) {
		add("nakcast.gms.count", strconv.Itoa(len(m.members)))
		for _, x := range m.members {
			add("nakcast.gms.members.id", hexID(x.ID))
		}
	}
	if m.has(secData) {
		add("nakcast.gms.data.len", strconv.Itoa(len(m.data)))
		add("nakcast.gms.data", hex.EncodeToString(m.data))
	}
	return w
}

// normalize drops empty values: tshark prints an empty string field as
// nothing, so a list of addresses with an empty one is shorter.
func normalize(vs []string) []string {
	var out []string
	for _, v := range vs {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// TestDissectorMembership decodes one datagram of every membership and
// state-transfer type (sampleMsgs: every section used somewhere) with
// tshark and checks every field against the message encoded.
func TestDissectorMembership(t *testing.T) {
	msgs := sampleMsgs()
	dgs := make([]wiresharktest.Datagram, len(msgs))
	for i, m := range msgs {
		b, err := m.encode(7, mB)
		require.NoError(t, err)
		dgs[i] = wiresharktest.Datagram{B: b}
	}
	frames := wiresharktest.Decode(t, dgs, append(dissectorFields, wiresharktest.Experts...))
	for i, m := range msgs {
		f := frames[i]
		name := fmt.Sprintf("%d: type %d kind %d", i, m.typ, m.kind)
		for k, v := range dissectorWant(m) {
			require.Equal(t, normalize(v), normalize(f[k]), "%s: field %s", name, k)
		}
		require.False(t, wiresharktest.Malformed(f), "%s: flagged %v", name, f)
		require.Empty(t, f["nakcast.dissector_error"], "%s", name)
		require.Empty(t, f["nakcast.unknown_type"], "%s", name)
		require.NotEmpty(t, f["_ws.col.Info"], "%s", name)
		require.False(t, strings.HasPrefix(f["_ws.col.Info"][0], "GMS("), "%s: a type without a name: %v", name, f["_ws.col.Info"])
	}
}

// TestDissectorAgreesWithGMS mutates membership datagrams at random (a
// fixed seed) and checks that the dissector flags one as malformed exactly
// when gms's decoder rejects it.
func TestDissectorAgreesWithGMS(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 2))
	var valid [][]byte
	for _, m := range sampleMsgs() {
		b, err := m.encode(7, mB)
		require.NoError(t, err)
		valid = append(valid, b)
	}
	var dgs []wiresharktest.Datagram
	var verdicts []error
	for i := range 600 {
		b := append([]byte(nil), valid[i%len(valid)]...)
		switch r.IntN(4) {
		case 0:
			b = b[:1+r.IntN(len(b))]
		case 1:
			b = append(b, byte(r.IntN(256)))
		}
		for range 1 + r.IntN(3) {
			j := r.IntN(len(b))
			if j == 2 || j == 3 || (j >= 4 && j < 8) {
				continue // type, flags and group: wire's test covers the header
			}
			b[j] ^= 1 << r.IntN(8)
		}
		_, err := decode(b, 7)
		dgs = append(dgs, wiresharktest.Datagram{B: b})
		verdicts = append(verdicts, err)
	}
	frames := wiresharktest.Decode(t, dgs, append(dissectorFields, wiresharktest.Experts...))
	bad := 0
	for i, f := range frames {
		require.Empty(t, f["nakcast.dissector_error"], "%x", dgs[i].B)
		require.Equal(t, verdicts[i] != nil, wiresharktest.Malformed(f), "%x: gms says %v; dissector: %v %v",
			dgs[i].B, verdicts[i], f["nakcast.malformed"], f["nakcast.truncated"])
		if verdicts[i] != nil {
			bad++
		}
	}
	t.Logf("%d mutations, %d rejected", len(frames), bad)
}
