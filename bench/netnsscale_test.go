package bench

import (
	"context"
	"math"
	"os"
	"testing"
	"time"

	"github.com/nakcast/nakcast/engine"
	"github.com/stretchr/testify/require"
)

// netnsScale is the real run of issue 19 beside its simulated twin: twelve
// member processes, one paced sender of 64 B messages, 5% of every
// member's outgoing datagrams dropped in its namespace (nftables).
var netnsScale = struct {
	members int
	count   int64
	rate    float64
	loss    float64
}{members: 12, count: 6000, rate: 2000, loss: 0.05}

// The noise within which the real figures agree with the simulator's:
// docs/scale.md. Goodput and repairs per lost message are protocol
// figures a process scheduler barely moves; requests per lost datagram
// depend on how the receivers' NAK timers fire relative to each other
// (a descheduled receiver misses another's request and sends its own),
// and the repair time on when the processes run.
const (
	netnsGoodputNoise  = 0.10
	netnsRepairsNoise  = 0.25
	netnsRequestsNoise = 1.0
	netnsRepairSlack   = 20 * time.Millisecond
)

// TestNetnsScale: the figures of issue 19 from the counters of twelve
// member processes in namespaces with loss near every sender agree with
// those of the same group in the simulator within the stated noise; no
// receiver discards anything.
func TestNetnsScale(t *testing.T) {
	needNetns(t)
	if err := CheckNft(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	if raceEnabled {
		t.Skip("skipping under -race: the figures are timing figures")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	sc := netnsScale
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := MemberConfig{Members: sc.members, MsgSize: 64, Count: sc.count, Rate: sc.rate, Timeout: 2 * time.Minute, Config: engine.Config{Transport: engine.TransportConfig{NoGSO: true}}}
	rs, err := RunNetns(ctx, NetnsRunConfig{Member: cfg, Exe: []string{exe}, Env: []string{memberEnv + "=1"},
		EgressLoss: sc.loss, Progress: func(s string) { t.Log(s) }})
	require.NoError(t, err)
	require.Empty(t, Verify(rs))
	real, err := ScaleFiguresOf(rs, 0, sc.rate)
	require.NoError(t, err)
	twin, err := SimScaleTwin(SimTwinConfig{Members: sc.members, Count: int(sc.count), MsgSize: 64, Rate: sc.rate,
		Loss: sc.loss, Datagram: 1472, Seed: 1})
	require.NoError(t, err)
	t.Logf("netns:     %v", real)
	t.Logf("simulator: %v", twin)

	require.Positive(t, real.LostDatagrams, "no loss was injected")
	require.Zero(t, real.Discards, "window discards")
	require.Zero(t, twin.Discards, "window discards (simulator)")
	require.GreaterOrEqual(t, real.Goodput, 0.9)
	require.InDelta(t, twin.Goodput, real.Goodput, netnsGoodputNoise, "goodput")
	require.InDelta(t, twin.RepairsPerLost, real.RepairsPerLost, netnsRepairsNoise, "repairs per lost message")
	require.InDelta(t, twin.RequestsPerLost, real.RequestsPerLost, netnsRequestsNoise, "requests per lost datagram")
	require.LessOrEqual(t, real.RepairMean, twin.RepairMean+netnsRepairSlack, "gap detected to filled, mean")
	datagrams := float64(sc.count) / real.MsgsPerDatagram
	require.Less(t, math.Abs(float64(real.LostDatagrams)/datagrams-sc.loss), sc.loss/2,
		"lost data datagrams near the injected rate")
}
