package bench

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nakcast/nakcast/wire/wireshark"
	"github.com/nakcast/nakcast/wire/wireshark/wiresharktest"
)

// TestNetnsPcapDissector runs two members in namespaces with 5% loss and
// captures: each member's capture decodes with the dissector, every UDP
// frame in it is a valid nakcast datagram (GSO super-packets were split
// into their datagrams), the receiver's capture holds every seqno the
// sender sent, and the repairs' XMIT_REQs are there.
func TestNetnsPcapDissector(t *testing.T) {
	needNetns(t)
	wiresharktest.Require(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const count = 3000
	rs, err := RunNetns(ctx, NetnsRunConfig{
		Member:   MemberConfig{Members: 2, MsgSize: 100, Count: count, LossRate: 0.05, Timeout: time.Minute},
		Exe:      []string{exe},
		Env:      []string{memberEnv + "=1"},
		Pcap:     dir,
		Progress: func(s string) { t.Log(s) },
	})
	require.NoError(t, err)
	require.Empty(t, Verify(rs))
	require.Empty(t, ourNamespaces(t), "namespaces left behind")

	script := filepath.Join(dir, wireshark.DissectorFile)
	require.FileExists(t, script)
	fields := append([]string{"udp.dstport", "nakcast.version", "nakcast.type", "nakcast.msg.seq"}, wiresharktest.Experts...)
	types := map[string]int{}
	for i := range 2 {
		frames, err := wireshark.Decode(ctx, script, filepath.Join(dir, CaptureFile(i)), fields)
		require.NoError(t, err)
		seqs := map[uint64]bool{}
		nakcast := 0
		for j, f := range frames {
			if len(f["udp.dstport"]) == 0 {
				continue // ARP, IGMP, IPv6 neighbour discovery
			}
			require.NotEmpty(t, f["nakcast.version"], "member %d frame %d: UDP but not nakcast: %v", i, j+1, f)
			require.False(t, wiresharktest.Malformed(f), "member %d frame %d: %v", i, j+1, f)
			require.Empty(t, f["nakcast.dissector_error"], "member %d frame %d", i, j+1)
			nakcast++
			types[f["nakcast.type"][0]]++
			for _, s := range f["nakcast.msg.seq"] {
				n, err := strconv.ParseUint(s, 10, 64)
				require.NoError(t, err)
				seqs[n] = true
			}
		}
		t.Logf("member %d: %d frames, %d nakcast datagrams, %d seqnos", i, len(frames), nakcast, len(seqs))
		require.Len(t, seqs, count, "member %d: the capture misses seqnos", i)
	}
	t.Logf("datagrams by type: %v", types)
	require.Positive(t, types["1"], "no DATA")
	require.Positive(t, types["3"], "no XMIT_REQ although 5%% loss was injected")
}
