// Package wiresharktest runs the nakcast dissector over captures that tests
// build from datagrams, for the tests of the packages that own encoders
// (wire, gms). It skips a test where tshark is missing, except in CI (the
// CI environment variable set), where a missing tshark fails it: .ci/run
// installs tshark, so its absence there is a broken install.
package wiresharktest

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nakcast/nakcast/wire/wireshark"
)

// Addresses of the datagrams in test captures.
var (
	Src = netip.MustParseAddrPort("10.199.0.1:40000")
	// Dst is the engine's default group: the dissector's port.
	Dst = netip.MustParseAddrPort("239.255.0.1:45588")
	// OtherDst is on a port the dissector is not registered on: only its
	// heuristic decodes there.
	OtherDst = netip.MustParseAddrPort("239.255.0.1:50123")
)

// Experts are the dissector's expert-info fields (and Info's column): add
// them to the fields a test asks for to use Flagged.
var Experts = []string{
	"nakcast.malformed", "nakcast.truncated", "nakcast.capture_truncated", "nakcast.unknown_type",
	"nakcast.newer_minor", "nakcast.dissector_error", "_ws.col.Info",
}

// Datagram is one UDP datagram of a test capture.
type Datagram struct {
	B        []byte
	Src      netip.AddrPort // zero: Src
	Dst      netip.AddrPort // zero: Dst
	Captured int            // bytes of the frame in the capture; 0: all
}

// Require skips t without tshark, or fails it in CI.
func Require(t testing.TB) {
	t.Helper()
	if _, err := wireshark.Tshark(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v: .ci/run installs it, so CI must have it", err)
		}
		t.Skipf("%v; skipping the dissector test outside CI", err)
	}
}

// Decode writes dgs into a capture, decodes it with tshark and the
// dissector and returns, per datagram, the values of fields. opts go to
// tshark. With NAKCAST_DISSECTOR_KEEP set to a directory, the capture is
// also copied there as <test name>.pcap (to look at it in Wireshark).
func Decode(t testing.TB, dgs []Datagram, fields []string, opts ...string) []wireshark.Frame {
	t.Helper()
	script, path := capture(t, dgs)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	frames, err := wireshark.Decode(ctx, script, path, fields, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != len(dgs) {
		t.Fatalf("tshark decoded %d frames of %d", len(frames), len(dgs))
	}
	return frames
}

// Verbose writes dgs into a capture and returns tshark's detailed (-V)
// output of it with the dissector; opts go to tshark. The capture is kept
// as Decode's is.
func Verbose(t testing.TB, dgs []Datagram, opts ...string) string {
	t.Helper()
	script, path := capture(t, dgs)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := wireshark.Verbose(ctx, script, path, "", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// capture writes dgs and the dissector into a temporary directory (and
// the capture to NAKCAST_DISSECTOR_KEEP) and returns their paths. It skips
// t without tshark.
func capture(t testing.TB, dgs []Datagram) (script, path string) {
	t.Helper()
	Require(t)
	dir := t.TempDir()
	path = filepath.Join(dir, "nakcast.pcap")
	if err := writeCapture(path, dgs); err != nil {
		t.Fatal(err)
	}
	script, err := wireshark.WriteDissector(dir)
	if err != nil {
		t.Fatal(err)
	}
	if keep := os.Getenv("NAKCAST_DISSECTOR_KEEP"); keep != "" {
		b, err := os.ReadFile(path)
		if err == nil {
			err = os.WriteFile(filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_")+".pcap"), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return script, path
}

func writeCapture(path string, dgs []Datagram) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w, err := wireshark.NewPcapWriter(f, 0)
	if err != nil {
		return err
	}
	ts := time.Unix(1700000000, 0)
	for i, d := range dgs {
		src, dst, captured := d.Src, d.Dst, -1
		if !src.IsValid() {
			src = Src
		}
		if !dst.IsValid() {
			dst = Dst
		}
		if d.Captured > 0 {
			captured = d.Captured
		}
		if err := w.WriteUDP(ts.Add(time.Duration(i)*time.Millisecond), src, dst, d.B, captured); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// Malformed reports whether the dissector flagged f as malformed or
// truncated (Experts must be among the decoded fields).
func Malformed(f wireshark.Frame) bool {
	return len(f["nakcast.malformed"])+len(f["nakcast.truncated"]) > 0
}
