//go:build linux

package engine_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nakcast/nakcast/engine"
	"github.com/stretchr/testify/require"
)

// The multi-process tests of issue 5: one member process per network
// namespace on a bridge (veth, MTU 1500), joined through gms, 5% loss
// injected at every member's receive path. They need root with
// CAP_NET_ADMIN and CAP_SYS_ADMIN and iproute2, and skip otherwise. The
// harness is in harness_netns_test.go, the member process in
// member_netns_test.go.

// netnsCount is the number of messages per sender: modest, since up to
// five (race-instrumented, under -race) processes share two cores.
func netnsCount() int {
	if testing.Short() {
		return min(engine.NetnsMessages, 1000)
	}
	return engine.NetnsMessages
}

// netnsRate is a sender's payload rate that spreads n messages over about
// d (sizes average about 230 bytes).
func netnsRate(n int, d time.Duration) int64 {
	return int64(float64(n*230) / d.Seconds())
}

// TestNetnsExactDelivery: four members, three of them sending, 5% loss at
// every member: every member delivers every message of every sender
// exactly once, in order (count and order-sensitive hash per sender).
func TestNetnsExactDelivery(t *testing.T) {
	const members, senders = 4, 3
	n := netnsCount()
	r := newNetnsRun(t, members)
	ctx, cancel := context.WithTimeout(context.Background(), engine.NetnsTimeout)
	defer cancel()
	ps := r.startJoined(ctx, r.configs(senders, n, 0, nil)...)
	res := r.deliverExactly(ctx, ps, senders, n)
	requireInjected(t, res)
}

// TestNetnsReceiverKilled: four members, two of them sending (paced over
// about two seconds, with a small window so that they wait for every
// member's stability), 5% loss; a receiver is killed with SIGKILL mid-run.
// The others suspect and exclude it (a view without it at every survivor)
// and finish exactly: every message of both senders once, in order.
func TestNetnsReceiverKilled(t *testing.T) {
	const members, senders, victim = 4, 2, 3
	n := netnsCount()
	r := newNetnsRun(t, members)
	ctx, cancel := context.WithTimeout(context.Background(), engine.NetnsTimeout)
	defer cancel()
	cfgs := r.configs(senders, n, 2*time.Second, func(_ int, c *netnsMemberConfig) { c.Window = 256 })
	ps := r.startJoined(ctx, cfgs...)
	r.waitView(ctx, ps)
	for _, p := range ps[:senders] {
		p.command(r, "go")
	}
	r.waitFor(ctx, ps[victim], "a quarter of the messages delivered", func(st *netnsState) bool {
		return st.counts[r.ids[0]]+st.counts[r.ids[1]] >= senders*n/4
	})
	r.kill(ps[victim])
	survivors := ps[:victim]
	for _, p := range survivors {
		p.mu.Lock()
		require.False(t, p.st.done, "member %d finished before the kill: nothing was tested", p.i)
		p.mu.Unlock()
	}
	id, view := r.waitView(ctx, survivors)
	require.NotContains(t, view, r.ids[victim])
	t.Logf("view %v without the killed receiver installed at every survivor", id)
	for _, p := range survivors {
		r.waitFor(ctx, p, "every message delivered", func(st *netnsState) bool { return st.done })
	}
	res := r.finish(ctx, survivors)
	for k := range senders {
		r.requireExact(res, k, n, false)
	}
	requireInjected(t, res)
	var suspicions uint64
	for _, x := range res {
		suspicions += x.Stats.Suspicions
	}
	require.NotZero(t, suspicions, "the killed member was suspected")
}

// TestNetnsSenderKilled: four members; member 0 sends a fixed stream,
// member 2 sends without end (paced) and is killed with SIGKILL once
// every survivor has some of its messages; 5% loss. The survivors exclude
// it, complete its messages from each other up to one cut (closed once
// every survivor holds and delivered everything up to it), and end with
// the same prefix of its messages: same count, same lost ranges (if no
// survivor had some message) and same order-sensitive hash, equal to the
// hash of its first messages; member 0's stream arrives exactly.
func TestNetnsSenderKilled(t *testing.T) {
	const members, victim = 4, 2
	n := netnsCount()
	r := newNetnsRun(t, members)
	ctx, cancel := context.WithTimeout(context.Background(), engine.NetnsTimeout)
	defer cancel()
	cfgs := r.configs(1, n, 2*time.Second, func(i int, c *netnsMemberConfig) {
		if i == victim {
			// Small messages: seqno = index+1, so a lost range maps to
			// message indices.
			c.Send, c.Small, c.RateLimit = -1, true, netnsRate(n, 2*time.Second)
		}
	})
	ps := r.startJoined(ctx, cfgs...)
	r.waitView(ctx, ps)
	ps[0].command(r, "go")
	ps[victim].command(r, "go")
	var survivors []*netnsProc
	for i, p := range ps {
		if i == victim {
			continue
		}
		survivors = append(survivors, p)
		r.waitFor(ctx, p, "some of the doomed sender's messages", func(st *netnsState) bool {
			return st.counts[r.ids[victim]] >= n/10
		})
	}
	r.kill(ps[victim])
	id, view := r.waitView(ctx, survivors)
	require.NotContains(t, view, r.ids[victim])
	t.Logf("view %v without the killed sender installed at every survivor", id)
	// The coordinator closes the cut once every survivor acknowledged it:
	// each holds and delivered everything of the killed sender up to it.
	coord := slices.IndexFunc(ps, func(p *netnsProc) bool { return r.ids[p.i] == id.Coord.ID })
	require.GreaterOrEqual(t, coord, 0)
	r.waitFor(ctx, ps[coord], "the killed sender's cut closed", func(st *netnsState) bool { return st.cutsClosed >= 1 })
	for _, p := range survivors {
		r.waitFor(ctx, p, "every message of member 0 delivered", func(st *netnsState) bool { return st.done })
	}
	res := r.finish(ctx, survivors)
	r.requireExact(res, 0, n, false)
	requireInjected(t, res)
	first, err := res[0].sender(r.ids[victim])
	require.NoError(t, err)
	for _, x := range res {
		s, err := x.sender(r.ids[victim])
		require.NoError(t, err)
		require.Empty(t, s.Errs, "member %d: order of the killed sender's messages", x.Index)
		require.Equal(t, first.Count, s.Count, "member %d: the same prefix of the killed sender's messages", x.Index)
		require.Equal(t, first.Last, s.Last, "member %d: the same prefix", x.Index)
		require.Equal(t, first.Lost, s.Lost, "member %d: the same lost ranges", x.Index)
		require.Equal(t, first.Hash, s.Hash, "member %d: the same prefix (hash)", x.Index)
	}
	want, count := netnsExpectedHash(victim, int(first.Last), true, func(i int) bool {
		seq := uint64(i + 1)
		return !slices.ContainsFunc(first.Lost, func(l [2]uint64) bool { return l[0] <= seq && seq <= l[1] })
	})
	require.Equal(t, count, first.Count)
	require.Equal(t, want, first.Hash, "the prefix is the killed sender's first messages")
	require.GreaterOrEqual(t, first.Count, n/10)
	t.Logf("survivors delivered the same %d messages of the killed sender (up to seqno %d, lost ranges %v)", first.Count, first.Last, first.Lost)
}

// TestNetnsLateJoinerState: three members, two of them sending (paced
// over about three seconds), 5% loss; a fourth joins mid-stream and
// fetches the replicated state (per sender: count and order-sensitive
// hash of the messages applied) during Open. The state it installed plus
// what it delivered after equals every other member's state: all messages
// of both senders, same hash.
func TestNetnsLateJoinerState(t *testing.T) {
	const members, senders, joiner = 4, 2, 3
	n := netnsCount()
	r := newNetnsRun(t, members)
	ctx, cancel := context.WithTimeout(context.Background(), engine.NetnsTimeout)
	defer cancel()
	cfgs := r.configs(senders, n, 3*time.Second, func(i int, c *netnsMemberConfig) { c.FetchState = i == joiner })
	ps := r.startJoined(ctx, cfgs[:joiner]...)
	r.waitView(ctx, ps)
	for _, p := range ps[:senders] {
		p.command(r, "go")
	}
	r.waitFor(ctx, ps[joiner-1], "a fifth of the messages", func(st *netnsState) bool {
		return st.counts[r.ids[0]]+st.counts[r.ids[1]] >= senders*n/5
	})
	ps = append(ps, r.startJoined(ctx, cfgs[joiner])...)
	r.waitView(ctx, ps)
	for _, p := range ps {
		r.waitFor(ctx, p, "every message delivered", func(st *netnsState) bool { return st.done })
	}
	res := r.finish(ctx, ps)
	for k := range senders {
		r.requireExact(res, k, n, false)
	}
	requireInjected(t, res)
	j := res[joiner]
	require.Equal(t, 1, j.Installs, "the joiner installed one state")
	require.Equal(t, uint64(1), j.Stats.Membership.StateInstalled)
	inState := j.State[r.ids[0]] + j.State[r.ids[1]]
	require.Positive(t, inState, "part of the stream came in the state")
	require.Less(t, inState, senders*n, "part of the stream was delivered after the state")
	require.Equal(t, senders*n-inState, j.After, "the joiner applied after the state exactly what the state did not hold")
	// Messages delivered between the join and the state's installation
	// are superseded by the state (Config.Membership.SetState).
	t.Logf("the joiner's state held %d messages; it applied %d after it (delivered %d in all)", inState, j.After, j.Stats.Delivered)
}
