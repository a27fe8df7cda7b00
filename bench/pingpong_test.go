package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nakcast/nakcast/engine"
)

func TestRunRawPingPong(t *testing.T) {
	count := pingPongRounds
	tests := []struct {
		name string
		cfg  PingPongConfig
	}{
		{"blocking unicast", PingPongConfig{}},
		{"busy-poll unicast", PingPongConfig{BusyPoll: true}},
		{"blocking multicast", PingPongConfig{Multicast: true}},
		{"busy-poll multicast", PingPongConfig{Multicast: true, BusyPoll: true}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Group = testGroup(byte(10 + i))
			tt.cfg.Count = count
			res, err := RunRawPingPong(context.Background(), tt.cfg)
			require.NoError(t, err)
			t.Log(res)
			require.Equal(t, count, res.Count)
			require.Positive(t, res.Min)
			require.LessOrEqual(t, res.Min, res.P50)
			require.LessOrEqual(t, res.P50, res.P99)
			require.LessOrEqual(t, res.P99, res.P999)
			require.LessOrEqual(t, res.P999, res.Max)
		})
	}
}

func TestRunRawPingPongCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := RunRawPingPong(ctx, PingPongConfig{Group: testGroup(20), Count: 1000})
	require.ErrorIs(t, err, context.Canceled)
}

func TestPingPongConfigErrors(t *testing.T) {
	tests := []struct {
		name  string
		cfg   PingPongConfig
		field string
	}{
		{"message too small for the sequence number", PingPongConfig{MsgSize: 4}, "MsgSize"},
		{"negative count", PingPongConfig{Count: -1}, "Count"},
		{"negative warmup", PingPongConfig{Warmup: -1}, "Warmup"},
		{"negative timeout", PingPongConfig{Timeout: -time.Second}, "Timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := RunRawPingPong(context.Background(), tt.cfg)
			require.ErrorContains(t, err, tt.field)
		})
	}
}

func TestPercentile(t *testing.T) {
	samples := make([]time.Duration, 100)
	for i := range samples {
		samples[i] = time.Duration(100 - i) // reversed: summarize sorts
	}
	r := summarize(samples)
	require.Equal(t, PingPongResult{Count: 100, Min: 1, P50: 50, P99: 99, P999: 100, Max: 100, Mean: 50}, r)
	tests := []struct {
		p    float64
		want time.Duration
	}{
		{50, 1}, {99, 2}, {100, 2}, {0.1, 1},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, percentile([]time.Duration{1, 2}, tt.p), "p%v", tt.p)
	}
	require.Equal(t, PingPongResult{}, summarize(nil))
}

// TestRunEnginePingPongInvoked: with engine.ThreadingInvoked the pinging
// goroutine and one other run the two members' agents; every round trip
// completes and is measured.
func TestRunEnginePingPongInvoked(t *testing.T) {
	for _, idle := range []engine.IdleStrategy{engine.IdleYield, engine.IdleSpin} {
		r, err := RunEnginePingPong(context.Background(), EnginePingPongConfig{Count: 300, Idle: idle, Threading: engine.ThreadingInvoked})
		require.NoError(t, err, "%v", idle)
		require.Equal(t, int64(300), r.Count)
		require.Positive(t, r.RTT.P50Ns)
		require.LessOrEqual(t, r.RTT.P50Ns, r.RTT.P99Ns)
	}
}
