package auth

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

// fuzzSeeds returns datagrams sealed deterministically under the fuzz
// keyring (a signed and an encrypted bundle, a signed heartbeat to the
// group and one to a member), by name, and some that must fail (unsealed,
// forged, truncated, wrong key).
func fuzzSeeds(t testing.TB) (r *Keyring, valid, invalid map[string][]byte) {
	r = ring(t, key(t, 3, 32, 9), key(t, 4, 16, 1))
	valid, invalid = map[string][]byte{}, map[string][]byte{}
	sign := NewSealer(r, NewNonceSource(time.Unix(1000, 0), 1), false)
	enc := NewSealer(r, NewNonceSource(time.Unix(2000, 0), 2), true)
	buf, n := bundle(t, alice, 3, 17)
	valid["valid-signed-bundle"] = seal(t, sign, buf, n)
	valid["valid-encrypted-bundle"] = seal(t, enc, buf, n)
	hb := make([]byte, wire.HeartbeatOverhead+wire.TrailerLen)
	d, err := wire.EncodeHeartbeat(hb, wire.Header{Group: testGroup, Sender: bob}, wire.Heartbeat{View: digest.ViewID{Coord: bob, Counter: 3}})
	if err != nil {
		t.Fatal(err)
	}
	valid["valid-signed-heartbeat"] = seal(t, sign, hb, len(d))
	valid["valid-signed-unicast-heartbeat"] = sealOn(t, sign, hb, len(d), PathUnicast)
	invalid["invalid-no-trailer"] = bytes.Clone(buf[:n])
	forged := bytes.Clone(valid["valid-signed-bundle"])
	forged[30] ^= 0x40
	invalid["invalid-flipped-body-bit"] = forged
	invalid["invalid-truncated"] = valid["valid-encrypted-bundle"][:n]
	other := NewSealer(ring(t, key(t, 3, 32, 10)), NewNonceSource(time.Unix(3000, 0), 3), false)
	invalid["invalid-wrong-secret"] = seal(t, other, buf, n)
	return r, valid, invalid
}

// FuzzOpen feeds arbitrary datagrams to a fresh verifier: it never
// panics, and accepts only the seeds sealed under its keys, unchanged.
func FuzzOpen(f *testing.F) {
	r, valid, invalid := fuzzSeeds(f)
	for _, d := range valid {
		f.Add(d)
	}
	for _, d := range invalid {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= wire.HeaderLen {
			if _, _, err := wire.DecodeHeader(b, testGroup); err != nil {
				return // the engine verifies only what DecodeHeader accepts
			}
		}
		v := NewVerifier(r)
		got := v.Open(bytes.Clone(b), at(0))
		if got != OK {
			if v.Stats().Senders != 0 {
				t.Fatalf("refused (%v) but kept state", got)
			}
			return
		}
		for _, d := range valid {
			if bytes.Equal(b, d) {
				return
			}
		}
		t.Fatalf("accepted a datagram nobody sealed: %x", b)
	})
}

// TestWriteFuzzCorpus rewrites testdata/fuzz/FuzzOpen from fuzzSeeds when
// NAKCAST_WRITE_CORPUS is set (the committed corpus is its output).
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("NAKCAST_WRITE_CORPUS") == "" {
		t.Skip("set NAKCAST_WRITE_CORPUS=1 to rewrite testdata/fuzz/FuzzOpen")
	}
	_, valid, invalid := fuzzSeeds(t)
	dir := filepath.Join("testdata", "fuzz", "FuzzOpen")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, set := range []map[string][]byte{valid, invalid} {
		for name, d := range set {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", d)
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
