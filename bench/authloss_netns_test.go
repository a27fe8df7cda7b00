package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNetnsKeyedLossRefusesNothing: a keyed group of three member
// processes, member 0 sending for a few seconds, 30% of its datagrams
// dropped at each receiver by nftables, and nobody else on the bridge: no
// member refuses a single datagram of another (every Stats.Drops.Auth
// counter zero). Under this load a receiver's group socket holds
// thousands of datagrams while the coordinator's unicast STABILITY, read
// from the unicast socket, overtakes them; the replay windows are per path
// (engine/auth) so that none of them reads as too old.
func TestNetnsKeyedLossRefusesNothing(t *testing.T) {
	needNetns(t)
	if err := CheckNft(); err != nil {
		t.Skipf("skipping: %v (.ci/run installs it)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, exe := lossyGroup(ctx, t, 3)
	defer ns.Close()
	rs, err := runLossyGroup(ctx, t, ns, exe, 6*time.Second, false)
	require.NoError(t, err)
	require.Empty(t, Verify(rs), "delivery exact and complete")
	var repaired uint64
	for _, r := range rs {
		t.Logf("member %d: %d delivered from the sender, %d repaired, auth drops %+v",
			r.Index, r.Senders[0].Delivered, r.Stats.Retransmitted, r.Stats.Drops.Auth)
		require.True(t, r.Complete, "member %d", r.Index)
		require.Equal(t, "signed", r.Stats.Auth.Mode)
		require.Zero(t, r.Stats.Drops.Auth, "member %d refused datagrams of the group", r.Index)
		repaired += r.Stats.Retransmitted
	}
	require.Positive(t, repaired, "the loss was repaired")
}
