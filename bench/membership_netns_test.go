package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNetnsDynamicKilledReceiverExcluded: five member processes in
// namespaces with automatic membership (the harness's default from the
// command line), two senders, 3% loss at the receivers; member 4 is
// SIGKILLed two seconds into the run. The group excludes it (the
// survivors' last view lacks it, and a suspicion names it), and every
// survivor delivers both senders' whole streams with the same counts and
// order hashes. With a static view (-static) the dead member would hold
// the senders' flow control for the rest of the run.
func TestNetnsDynamicKilledReceiverExcluded(t *testing.T) {
	needNetns(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	const victim = 4
	var killNs atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := MemberConfig{Members: 5, Senders: []int{0, 1}, MsgSize: 200, Duration: 8 * time.Second, Rate: 4000,
		LossRate: 0.03, Dynamic: true, Timeout: 2 * time.Minute}
	rs, err := RunNetns(ctx, NetnsRunConfig{
		Member: cfg,
		Exe:    []string{exe},
		Env:    []string{memberEnv + "=1"},
		Kill: func(i int, p *os.Process) {
			if i == victim {
				time.AfterFunc(2*time.Second, func() { killNs.Store(Nanotime()); _ = p.Kill() })
			}
		},
		Progress: func(s string) { t.Log(s) },
	})
	require.Error(t, err, "the killed member's exit is reported")
	require.Empty(t, ourNamespaces(t), "namespaces left behind")
	require.Empty(t, rs[victim].Schema, "the killed member wrote a result")
	survivors := rs[:victim]
	require.Empty(t, Verify(survivors), "survivors differ")
	dead := MemberID(survivors[0].RunID, victim).ID
	suspected := false
	for _, r := range survivors {
		require.True(t, r.Complete, "member %d: %s", r.Index, r.Error)
		require.NotEmpty(t, r.Views, "member %d recorded no view", r.Index)
		excluded := int64(0)
		for _, v := range r.Views {
			if v.Ns > killNs.Load() && len(v.Members) == 4 && !slices.Contains(v.Members, dead) && excluded == 0 {
				excluded = v.Ns
			}
		}
		require.Positive(t, excluded, "member %d never installed a view without member %d: %+v", r.Index, victim, r.Views)
		for _, e := range r.Events {
			suspected = suspected || (e.Kind == "suspect" && e.Member == dead)
		}
		var got []string
		for _, s := range r.Senders {
			got = append(got, fmt.Sprintf("sender %d: %d delivered, hash %s, lost %v", s.Index, s.Delivered, s.Hash, s.Lost))
		}
		t.Logf("member %d: %s; view without member %d %.1f s after the kill; %d views, %d events",
			r.Index, strings.Join(got, "; "), victim, float64(excluded-killNs.Load())/1e9, len(r.Views), len(r.Events))
	}
	require.True(t, suspected, "no survivor reported a suspicion of member %d", victim)
}
