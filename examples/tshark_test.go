package examples_test

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/nakcast/nakcast/wire/wireshark/wiresharktest"
)

// readmeCapture returns the datagrams of the README's tshark output: member
// a1.1 multicasts the hello program's two messages in one DATA bundle, and
// member b2.7 at 10.199.0.2, which got only the first, asks a1.1 for the
// second.
func readmeCapture(t *testing.T) []wiresharktest.Datagram {
	t.Helper()
	a, b := digest.Member{ID: 0xa1, Inc: 1}, digest.Member{ID: 0xb2, Inc: 7}
	const group = 0x6e616b63
	var w wire.DataWriter
	if err := w.Reset(make([]byte, 1472), wire.Header{Group: group, Sender: a}, a, 1); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"hello", "multicast"} {
		if !w.Append([]byte(m)) {
			t.Fatal("message does not fit")
		}
	}
	data := append([]byte(nil), w.Finish()...)
	req, err := wire.EncodeXmitReq(make([]byte, 1472), wire.Header{Group: group, Sender: b},
		digest.ViewID{Coord: a, Counter: 2}, a, 1, []wire.Range{{From: 2, To: 2}})
	if err != nil {
		t.Fatal(err)
	}
	return []wiresharktest.Datagram{{B: data}, {B: req, Src: netip.MustParseAddrPort("10.199.0.2:40000")}}
}

// summaryLayer reports whether a line of tshark's output is a layer below
// nakcast (frame, Ethernet, IP, UDP): its wording is tshark's own, which
// may change with its version, so the comparison skips those lines.
func summaryLayer(line string) bool {
	for _, p := range []string{"Frame ", "Ethernet II", "Internet Protocol", "User Datagram Protocol"} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

// nakcastLines returns tshark's output without the layers below nakcast
// and without trailing blanks.
func nakcastLines(s string) string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if !summaryLayer(l) {
			out = append(out, strings.TrimRight(l, " "))
		}
	}
	return strings.Join(out, "\n")
}

// TestReadmeTshark checks the README's `tshark -V` output against what the
// dissector prints for the same datagrams today. The capture is built with
// the wire encoders; on a mismatch the test prints the output (-update
// writes it into the README).
func TestReadmeTshark(t *testing.T) {
	wiresharktest.Require(t)
	var shown *block
	for _, b := range blocks(t, filepath.Join(root, "README.md")) {
		if b.marker == "<!-- tshark: examples/tshark_test.go TestReadmeTshark -->" {
			shown = &b
		}
	}
	if shown == nil {
		t.Fatal("README.md has no block marked <!-- tshark: examples/tshark_test.go TestReadmeTshark -->")
	}
	out := wiresharktest.Verbose(t, readmeCapture(t), "-O", "nakcast")
	switch {
	case nakcastLines(out) == nakcastLines(shown.text):
	case *update:
		replace(t, *shown, strings.TrimRight(out, "\n")+"\n")
	default:
		t.Errorf("README.md:%d: the tshark output differs from the dissector's; it prints (between the lines):\n-----\n%s-----", shown.line, out)
	}
}
