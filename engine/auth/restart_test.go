package auth

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

// sealChildEnv makes the test binary act as a sending process: it seals
// sealChildCount heartbeats of alice (one static member, the same
// incarnation every run) with the process-wide nonce source and prints
// them in hex, one a line.
const (
	sealChildEnv   = "NAKCAST_AUTH_SEAL_CHILD"
	sealChildCount = 50
)

func TestMain(m *testing.M) {
	if os.Getenv(sealChildEnv) != "" {
		if err := sealChild(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// restartKeyring is the keyring of the sending processes and the test.
func restartKeyring() (*Keyring, error) {
	k, err := NewKey(9, bytes.Repeat([]byte{0x5a}, 32))
	if err != nil {
		return nil, err
	}
	return NewKeyring(testGroup, []Key{k})
}

func sealChild() error {
	r, err := restartKeyring()
	if err != nil {
		return err
	}
	s := NewSealer(r, ProcessNonces(), false)
	w := bufio.NewWriter(os.Stdout)
	for i := range sealChildCount {
		buf := make([]byte, wire.HeartbeatOverhead+wire.TrailerLen)
		d, err := wire.EncodeHeartbeat(buf, wire.Header{Group: testGroup, Sender: alice},
			wire.Heartbeat{View: digest.ViewID{Coord: alice, Counter: uint64(i + 1)}})
		if err != nil {
			return err
		}
		out, err := s.Sign(buf, len(d), PathGroup)
		if err != nil {
			return err
		}
		fmt.Fprintln(w, hex.EncodeToString(out))
	}
	return w.Flush()
}

// runSealChild runs one sending process and returns its datagrams.
func runSealChild(t *testing.T) [][]byte {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), sealChildEnv+"=1")
	out, err := cmd.Output()
	require.NoError(t, err)
	var ds [][]byte
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		d, err := hex.DecodeString(sc.Text())
		require.NoError(t, err)
		ds = append(ds, d)
	}
	require.Len(t, ds, sealChildCount)
	return ds
}

// TestRestartedProcessStartsAboveItsPredecessor runs a static member's
// sending side as two processes, one after the other, with the same member
// and incarnation: the second's counters start above every counter of the
// first (no nonce repeats under the shared subkey), a receiver that heard
// the first accepts every datagram of the second, and the first's
// datagrams replayed afterwards are refused.
func TestRestartedProcessStartsAboveItsPredecessor(t *testing.T) {
	first, second := runSealChild(t), runSealChild(t)
	r, err := restartKeyring()
	require.NoError(t, err)
	v := NewVerifier(r)
	var top uint64
	for _, d := range first {
		sl, _ := wire.SplitSealed(d)
		top = max(top, wire.NonceCounter(sl.Nonce))
		require.Equal(t, OK, v.Open(bytes.Clone(d), at(0)))
	}
	for _, d := range second {
		sl, _ := wire.SplitSealed(d)
		require.Greater(t, wire.NonceCounter(sl.Nonce), top, "the restarted process reuses no counter")
		require.Equal(t, OK, v.Open(bytes.Clone(d), at(0)))
	}
	for _, d := range first {
		got := v.Open(bytes.Clone(d), at(0))
		require.Contains(t, []Reason{Replay, TooOld}, got)
	}
}
