package examples_test

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/nakcast/nakcast/wire/wireshark"
	"github.com/nakcast/nakcast/wire/wireshark/wiresharktest"
)

// readmeCapture returns the datagrams of the README's tshark output: member
// a1.1 multicasts the hello program's two messages in one DATA bundle, and
// member b2.7 at 10.199.0.2, which got only the first, asks a1.1 for the
// second.
func readmeCapture(t *testing.T) [][]byte {
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
	return [][]byte{data, req}
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
// the wire encoders; on a mismatch the test prints the output to paste.
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
	dir := t.TempDir()
	var pcap bytes.Buffer
	pw, err := wireshark.NewPcapWriter(&pcap, 0)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1700000000, 0)
	srcs := []netip.AddrPort{wiresharktest.Src, netip.MustParseAddrPort("10.199.0.2:40000")}
	for i, d := range readmeCapture(t) {
		if err := pw.WriteUDP(ts.Add(time.Duration(i)*time.Millisecond), srcs[i], wiresharktest.Dst, d, -1); err != nil {
			t.Fatal(err)
		}
	}
	if err := pw.Flush(); err != nil {
		t.Fatal(err)
	}
	capture := filepath.Join(dir, "readme.pcap")
	if err := os.WriteFile(capture, pcap.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	script, err := wireshark.WriteDissector(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := wireshark.Verbose(ctx, script, capture, "", "-O", "nakcast")
	if err != nil {
		t.Fatal(err)
	}
	if keep := os.Getenv("NAKCAST_DISSECTOR_KEEP"); keep != "" {
		if err := os.WriteFile(filepath.Join(keep, "readme.pcap"), pcap.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if nakcastLines(out) != nakcastLines(shown.text) && *update {
		replace(t, *shown, strings.TrimRight(out, "\n")+"\n")
	} else if nakcastLines(out) != nakcastLines(shown.text) {
		t.Errorf("README.md:%d: the tshark output differs from the dissector's; it prints (between the lines):\n-----\n%s-----", shown.line, out)
	}
}
