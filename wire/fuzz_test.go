package wire

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Fuzz targets, one per decoder, seeded from testdata/fuzz. Each decodes arbitrary bytes (with the type
// byte forced to its decoder's type, so every seed exercises it) and, where
// decoding succeeds, checks the round trip: re-encoding the decoded value and
// decoding again gives the same value, and for a canonical 1.0 datagram the
// very same bytes (trailer contents aside). Nothing may panic.

var decoderErrors = []error{ErrTruncated, ErrVersion, ErrForeignGroup, ErrMalformed, ErrTooManyRanges, ErrUnknownType}

func checkRoundTrip(t *testing.T, b []byte, typ Type) {
	if len(b) > 2 {
		b = bytes.Clone(b)
		b[2] = byte(typ)
	}
	m, err := decode(b)
	if err != nil {
		known := false
		for _, e := range decoderErrors {
			known = known || err == e //nolint:errorlint // sentinels are returned unwrapped
		}
		require.True(t, known, "unexpected error %v", err)
		return
	}
	out, err := encode(make([]byte, len(b)+TrailerLen), m)
	require.NoError(t, err, "decoded value must re-encode")
	m2, err := decode(out)
	require.NoError(t, err)
	require.Equal(t, m, m2)

	h, _, _ := DecodeHeader(b, testGroup)
	if h.Minor == VersionMinor && h.Len == canonicalLen(h.Type) || h.Type.Reserved() && h.Len == HeaderLen {
		n := len(b) - trailerLen(h)
		require.Equal(t, len(b), len(out))
		require.Equal(t, b[:n], out[:n], "canonical datagram re-encodes to the same bytes")
	}
}

// FuzzDecodeHeader: the common header alone, over every type.
func FuzzDecodeHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		h, body, err := DecodeHeader(b, testGroup)
		if err != nil {
			return
		}
		require.True(t, h.Type.Known())
		require.GreaterOrEqual(t, h.Len, HeaderLen+int(fixedLen[h.Type]))
		require.Equal(t, len(b)-HeaderLen-trailerLen(h), len(body))
		require.GreaterOrEqual(t, len(body), h.Len-HeaderLen)
		out := make([]byte, HeaderLen)
		require.NoError(t, PutHeader(out, h))
		require.Equal(t, b[0], out[0])
		require.Equal(t, b[2:HeaderLen], out[2:])
		h2, _, err := DecodeHeader(append(out, b[HeaderLen:]...), testGroup)
		require.NoError(t, err)
		h.Minor = VersionMinor
		require.Equal(t, h, h2)
		_, _, _, ok := Trailer(b)
		require.Equal(t, h.Auth(), ok)
	})
}

func FuzzDecodeData(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		checkRoundTrip(t, b, TypeData)
		checkDataOffsets(t, b)
		checkDataHead(t, b)
	})
}

// asData decodes the header of b with its type set to DATA (on a copy);
// ok is false when the header does not decode.
func asData(b []byte) (Header, []byte, bool) {
	if len(b) > 2 {
		b = bytes.Clone(b)
		b[2] = byte(TypeData)
	}
	h, body, err := DecodeHeader(b, testGroup)
	return h, body, err == nil
}

// checkDataHead: DecodeDataHead and Count steps of NextMsg ending at the
// body's end accept exactly what DecodeData accepts, with the same fields
// and payloads.
func checkDataHead(t *testing.T, b []byte) {
	h, body, ok := asData(b)
	if !ok {
		return
	}
	d, err := DecodeData(h, body)
	dh, herr := DecodeDataHead(h, body)
	if herr != nil {
		require.Equal(t, err, herr, "a fixed part DecodeDataHead rejects")
		return
	}
	if err == nil {
		require.Equal(t, []any{d.Origin, d.First, d.Count}, []any{dh.Origin, dh.First, dh.Count})
	}
	it := d.Messages()
	ok, at := true, dh.Start()
	for i := 0; i < dh.Count && ok; i++ {
		var off, n int
		off, n, at, ok = NextMsg(dh.Body(), at)
		if ok && err == nil {
			p, _ := it.Next()
			require.Equal(t, p, body[off:off+n], "message %d", i)
		}
	}
	require.Equal(t, err == nil, ok && at == len(dh.Body()))
}

// checkDataOffsets: DecodeDataOffsets decodes exactly what DecodeData does
// (the same Data, the same error), and its offsets delimit the payloads
// MsgIter returns.
func checkDataOffsets(t *testing.T, b []byte) {
	h, body, ok := asData(b)
	if !ok {
		return
	}
	d, err := DecodeData(h, body)
	d2, offs, err2 := DecodeDataOffsets(h, body, make([]uint32, 3))
	require.Equal(t, err, err2)
	require.Equal(t, d, d2)
	if err != nil {
		return
	}
	require.Len(t, offs, d.Count+1)
	require.Equal(t, len(body), int(offs[d.Count]))
	it := d.Messages()
	for i := range d.Count {
		p, ok := it.Next()
		require.True(t, ok)
		require.Equal(t, body[offs[i]+MsgOverhead:offs[i+1]], p, "message %d", i)
	}
	_, ok = it.Next()
	require.False(t, ok)
}

func FuzzDecodeFrag(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { checkRoundTrip(t, b, TypeFrag) })
}

func FuzzDecodeXmitReq(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { checkRoundTrip(t, b, TypeXmitReq) })
}

func FuzzDecodeMsgNotFound(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { checkRoundTrip(t, b, TypeMsgNotFound) })
}

func FuzzDecodeStable(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { checkRoundTrip(t, b, TypeStable) })
}

func FuzzDecodeStability(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { checkRoundTrip(t, b, TypeStability) })
}

func FuzzDecodeHighest(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { checkRoundTrip(t, b, TypeHighest) })
}

func FuzzDecodeHeartbeat(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { checkRoundTrip(t, b, TypeHeartbeat) })
}

// FuzzDecodeChallenge covers CHALLENGE; its seeds include ECHO datagrams,
// whose type byte the target forces to CHALLENGE (the layouts are the same).
func FuzzDecodeChallenge(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { checkRoundTrip(t, b, TypeChallenge) })
}

// FuzzDecodeEcho covers ECHO.
func FuzzDecodeEcho(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { checkRoundTrip(t, b, TypeEcho) })
}

// fuzzTargets maps each fuzz target to the type it decodes (0: all).
var fuzzTargets = map[string]Type{
	"FuzzDecodeHeader":      0,
	"FuzzDecodeData":        TypeData,
	"FuzzDecodeFrag":        TypeFrag,
	"FuzzDecodeXmitReq":     TypeXmitReq,
	"FuzzDecodeMsgNotFound": TypeMsgNotFound,
	"FuzzDecodeStable":      TypeStable,
	"FuzzDecodeStability":   TypeStability,
	"FuzzDecodeHighest":     TypeHighest,
	"FuzzDecodeHeartbeat":   TypeHeartbeat,
	"FuzzDecodeChallenge":   TypeChallenge,
	"FuzzDecodeEcho":        TypeEcho,
}

// corpusSeeds returns the named seeds committed for a type (0: the header
// target, which gets one valid datagram of every type): the valid samples of
// the type (plain, authenticated, one from a newer minor) and invalid
// variants of its smallest sample (truncated, trailing byte, wrong major,
// foreign group, corrupted fixed fields).
func corpusSeeds(typ Type) map[string][]byte {
	seeds := map[string][]byte{}
	buf := make([]byte, MaxUDPPayload)
	var small []byte
	var smallName string
	for _, s := range samples() {
		b, err := encode(buf, s.m)
		if err != nil {
			panic(err)
		}
		b = bytes.Clone(b)
		if typ == 0 {
			if !s.m.H.Auth() && len(b) < 512 {
				seeds["valid-"+s.name] = b
			}
			continue
		}
		if Type(b[2]) != typ {
			continue
		}
		seeds["valid-"+s.name] = b
		if small == nil || len(b) < len(small) {
			small, smallName = b, s.name
		}
	}
	if typ == 0 {
		hb := seeds["valid-heartbeat"]
		with := func(f func(b []byte)) []byte { b := bytes.Clone(hb); f(b); return b }
		seeds["invalid-empty"] = []byte{}
		seeds["invalid-short"] = []byte{1, 0, 8}
		seeds["invalid-unknown-type"] = with(func(b []byte) { b[2] = 12 })
		seeds["invalid-major2"] = with(func(b []byte) { b[0] = 2 })
		seeds["invalid-auth-without-trailer"] = with(func(b []byte) { b[3], b[20] = FlagAuth, 1 })
		seeds["valid-reserved-gms"] = with(func(b []byte) { b[2] = 20 })
		seeds["valid-minor3-heartbeat"] = extend(hb, 3, 8)
		return seeds
	}
	with := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(small)) }
	seeds["valid-minor3-"+smallName] = extend(small, 3, 8)
	seeds["invalid-truncated-"+smallName] = small[:len(small)-1]
	seeds["invalid-trailing-"+smallName] = with(func(b []byte) []byte { return append(b, 0) })
	seeds["invalid-major2-"+smallName] = with(func(b []byte) []byte { b[0] = 2; return b })
	seeds["invalid-group-"+smallName] = with(func(b []byte) []byte { b[4] ^= 0xff; return b })
	fixedEnd := canonicalLen(typ)
	for _, i := range []int{HeaderLen, fixedEnd - 4, fixedEnd - 1, len(small) - 1} {
		seeds[fmt.Sprintf("corrupt%03d-%s", i, smallName)] = with(func(b []byte) []byte { b[i] ^= 0xa5; return b })
	}
	return seeds
}

// TestWriteFuzzCorpus regenerates testdata/fuzz when WIRE_WRITE_CORPUS=1;
// otherwise it checks that every target has a committed corpus.
func TestWriteFuzzCorpus(t *testing.T) {
	write := os.Getenv("WIRE_WRITE_CORPUS") == "1"
	for name, typ := range fuzzTargets {
		dir := filepath.Join("testdata", "fuzz", name)
		if !write {
			ents, err := os.ReadDir(dir)
			require.NoError(t, err, "run WIRE_WRITE_CORPUS=1 go test -run TestWriteFuzzCorpus ./wire/")
			require.GreaterOrEqual(t, len(ents), 4, dir)
			continue
		}
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for seed, b := range corpusSeeds(typ) {
			data := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
			require.NoError(t, os.WriteFile(filepath.Join(dir, seed), []byte(data), 0o644))
		}
	}
}
