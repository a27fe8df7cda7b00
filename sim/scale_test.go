package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// scaleRun is one scale scenario: one sender, receivers receivers, and
// either shared loss (dropped near the sender, for everyone) or independent
// loss per receiver.
type scaleRun struct {
	name      string
	receivers int
	net       NetConfig
	messages  int
}

// runScale runs sc and returns the sender's loss figures.
func runScale(t *testing.T, sc scaleRun, seed uint64) LossFigures {
	t.Helper()
	g, err := NewGroup(GroupConfig{Seed: seed, Members: sc.receivers + 1, Net: sc.net})
	require.NoError(t, err)
	sender := GroupMember(0)
	lt := NewLossTracker(g.Sim, 1, sender)
	_, err = g.StartTraffic(0, Traffic{
		Count: sc.messages, MinSize: 8, MaxSize: 64, Burst: 1,
		Interval: 200 * time.Microsecond,
	})
	require.NoError(t, err)
	start := time.Now()
	err = g.RunToQuiescence(120*time.Second, true)
	require.NoError(t, err, "replay: go test ./sim/ -run 'TestScale/%s' -sim.scale=%d", sc.name, sc.receivers)
	f := lt.Figures()
	st := g.Nodes[0].P.Stats()
	t.Logf("%s: %d receivers, %d messages, %v; sender got %d XMIT_REQ, repaired %d messages (%d skipped by linger); %d XMIT_REQ sent in all; virtual %v, wall %v, %d events",
		sc.name, sc.receivers, sc.messages, f, st.NakReceived, st.Retransmitted, st.RepairsSkipped, g.Meter.XmitReqs(),
		g.Sim.Now(), time.Since(start).Round(time.Millisecond), g.Sim.Steps())
	return f
}

// TestScale is issue 3's "scale by simulation": 200 receivers (50 under
// -race; -sim.scale=N for more), over at least 1,000 lost ranges (fewer
// under -race). Shared loss must be repaired with few requests per lost
// range (mean <= 3, p99 <= 10) and few repairs per lost message (mean <=
// 1/(1-p) + 0.2); under independent loss the figures are recorded and every
// gap must close. nakack runs with its default Config (NakDelay 2ms,
// NakJitter 4ms, NakInterval 20ms, RepairLinger 5ms) on a 50µs-latency
// network with 100µs jitter.
func TestScale(t *testing.T) {
	n := scaleReceivers()
	const p = 0.1
	sharedMsgs, indepMsgs := 11000, 1300
	if raceEnabled {
		sharedMsgs, indepMsgs = 3000, 400
	}
	t.Run("shared", func(t *testing.T) {
		t.Parallel()
		f := runScale(t, scaleRun{name: "shared", receivers: n, messages: sharedMsgs,
			net: NetConfig{Jitter: 100 * time.Microsecond, SharedLoss: p}}, 1)
		if !raceEnabled {
			require.GreaterOrEqual(t, f.LostRanges, 1000)
		}
		require.LessOrEqual(t, f.RequestsMean, 3.0, "requests reaching the sender per lost range, mean")
		require.LessOrEqual(t, f.RequestsP99, 10, "requests reaching the sender per lost range, p99")
		require.LessOrEqual(t, f.RepairsPerLost, 1/(1-p)+0.2, "repairs per lost message")
	})
	t.Run("independent", func(t *testing.T) {
		t.Parallel()
		f := runScale(t, scaleRun{name: "independent", receivers: n, messages: indepMsgs,
			net: NetConfig{Jitter: 100 * time.Microsecond, Loss: 0.01}}, 2)
		if !raceEnabled {
			require.GreaterOrEqual(t, f.LostRanges, 1000)
		}
		// No bound on the figures: the ideal grows with the group. Every gap
		// closed: RunToQuiescence checked that everything was delivered
		// without a lost range.
		require.Zero(t, f.Unrepaired)
	})
}
