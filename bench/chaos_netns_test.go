package bench

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// chaosCase is one schedule TestNetnsChaos runs.
type chaosCase struct {
	name, spec string
	duration   time.Duration
}

// TestNetnsChaos runs chaos schedules on five member processes in
// namespaces (automatic membership, senders 0 and 1 paced, 3% loss on
// every member's link by nftables, the default failure detection: 5 s of
// silence and 3 probes of 150 ms): SIGKILL of two receivers and the
// restart of one once excluded (it joins the running group), a SIGSTOP
// longer than the failure detection (the member is excluded and rejoins),
// and a partition longer than it that then heals (the sides merge). Each passes
// CheckChaos: the members that stayed delivered the same sequence of each
// sender, every gap a reported lost range, and the others the same
// messages from their join points on.
func TestNetnsChaos(t *testing.T) {
	needNetns(t)
	if err := CheckNft(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	if raceEnabled {
		t.Skip("skipping under -race: the members' failure detection is timed, and the race build runs them several times slower (make test's netns-test and unit passes run it)")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	for _, tc := range []chaosCase{
		{"kill-restart", "kill:4@1s,kill:2@1s,restart:2@8s", 12 * time.Second},
		{"stop", "stop:3@1s+7s", 12 * time.Second},
		{"partition", "partition:0,1,2|3,4@1s+7s", 12 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sched, err := ParseChaos(tc.spec)
			require.NoError(t, err)
			cfg := MemberConfig{Members: 5, Senders: []int{0, 1}, MsgSize: 200, Duration: tc.duration, Rate: 2000,
				Dynamic: true, Timeout: 2 * time.Minute}
			require.NoError(t, sched.Check(cfg.Members, cfg.Senders, cfg.Duration))
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			rs, err := RunNetns(ctx, NetnsRunConfig{Member: cfg, Exe: []string{exe}, Env: []string{memberEnv + "=1"},
				Chaos: sched, LinkLoss: 0.03, Progress: func(s string) { t.Log(s) }})
			require.Empty(t, ourNamespaces(t), "namespaces left behind")
			rep := CheckChaos(rs)
			t.Logf("%s:\n%s", tc.spec, rep)
			require.NoError(t, err)
			require.Empty(t, rep.Problems)
		})
	}
}
