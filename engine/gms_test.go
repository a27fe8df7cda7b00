package engine

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine/transport/memtransport"
	"github.com/stretchr/testify/require"
)

// errCrashed is the Close result of a member stopped by crash.
var errCrashed = errors.New("crashed by the test")

// crash stops m abruptly, as a killed process would: no drain, no leave,
// sockets closed. The others must detect it (heartbeats) and exclude it.
func (m *Member) crash() {
	m.closeOnce.Do(func() {
		m.stopAgent()
		<-m.done
		m.tr.Close()
		m.events.close()
		m.closeErr = errCrashed
	})
}

// gmsTestConfig is a dynamic-membership config with failure detection fast
// enough for tests, and timeouts long enough for a loaded 2-core machine
// (a discovery answer later than DiscoveryTimeout makes the joiner found a
// group of its own, merged later; a member not scheduled for
// SuspectTimeout+ProbeTimeout is excluded and rejoins).
func gmsTestConfig(c *Config) {
	c.Logger = quietLogger()
	c.Membership.HeartbeatInterval = 50 * time.Millisecond
	c.Membership.SuspectTimeout = time.Second
	c.Membership.ProbeTimeout = 250 * time.Millisecond
	c.Membership.DiscoveryTimeout = 200 * time.Millisecond
}

// openJoined opens n members of a new dynamic group one by one: each Open
// returns once it has joined the members opened before it (the first
// founds the group). mod may adjust each config. At test end the members
// still open are closed, the last joined first (each leaves gracefully).
func openJoined(t testing.TB, n int, mod func(i int, c *Config)) []*Member {
	t.Helper()
	g := testGroup()
	ms := make([]*Member, 0, n)
	t.Cleanup(func() { closeInOrder(t, ms) })
	for i := range n {
		ms = append(ms, openOne(t, g, i, mod))
	}
	return ms
}

// openOne opens member i of the dynamic group g.
func openOne(t testing.TB, g netip.AddrPort, i int, mod func(i int, c *Config)) *Member {
	t.Helper()
	c := Config{Group: g}
	gmsTestConfig(&c)
	if mod != nil {
		mod(i, &c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := Open(ctx, c)
	require.NoError(t, err, "member %d", i)
	return m
}

// closeInOrder closes the members one at a time, last first: graceful
// leaves, one view change each. Crashed members are skipped.
func closeInOrder(t testing.TB, ms []*Member) {
	for i := len(ms) - 1; i >= 0; i-- {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := ms[i].Close(ctx)
		cancel()
		if err != nil && !errors.Is(err, errCrashed) {
			t.Errorf("close member %d: %v", i, err)
		}
	}
}

// waitViewSize waits, on m's events, for a view of n members and returns
// it (later events stay queued).
func waitViewSize(t testing.TB, ctx context.Context, m *Member, n int) Event {
	t.Helper()
	for {
		e, err := m.NextEvent(ctx)
		require.NoError(t, err, "waiting for a view of %d on %v", n, m.Self())
		if e.Kind == EventView && len(e.Members) == n {
			return e
		}
	}
}

// requireSameView checks that every member of ms has installed the same
// view, whose members are exactly ms (in join order, the first
// coordinating, when ordered is set: joins by discovery; a lost discovery
// answer may instead found a second group, merged later in another order).
func requireSameView(t testing.TB, ms []*Member, ordered bool) digest.ViewID {
	t.Helper()
	var ids []digest.Member
	for _, m := range ms {
		ids = append(ids, m.Self())
	}
	id0, v0 := ms[0].View()
	for i, m := range ms {
		id, v := m.View()
		require.Equal(t, id0, id, "member %d view id", i)
		require.Equal(t, v0, v, "member %d view", i)
	}
	require.ElementsMatch(t, ids, v0)
	if ordered {
		require.Equal(t, ids, v0, "join order")
		require.Equal(t, ids[0], id0.Coord, "the first member coordinates")
	}
	return id0
}

// TestJoinOneByOne: three members join one by one through multicast
// discovery; the first founds the group and coordinates; all end with the
// same view in join order.
func TestJoinOneByOne(t *testing.T) {
	base := nakcastGoroutines()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ms := openJoined(t, 3, nil)
	for _, m := range ms {
		waitViewSize(t, ctx, m, 3)
	}
	merged := false
	for _, m := range ms {
		merged = merged || m.Stats().Membership.Merges > 0
	}
	// A discovery answer later than DiscoveryTimeout (a stalled, loaded
	// machine) makes a joiner found its own group, merged at once: the
	// same members, in another order.
	id := requireSameView(t, ms, !merged)
	if merged {
		t.Log("a joiner's discovery went unanswered in time: groups merged")
	} else {
		require.Equal(t, uint64(3), id.Counter, "founding view, then one view per join")
	}
	for i, m := range ms {
		s := m.Stats()
		require.Equal(t, id, s.View, "member %d", i)
		require.Len(t, s.Members, 3)
		require.NotZero(t, s.MembershipIn)
		require.Zero(t, s.Drops.BadAddress)
	}
	require.Zero(t, ms[0].Stats().Membership.JoinAttempts, "the founder sent no JOIN_REQ")
	closeInOrder(t, ms)
	checkNoLeak(t, base)
}

// TestJoinInitialHosts joins through a static list of initial hosts (the
// founder's unicast address) instead of multicast discovery.
func TestJoinInitialHosts(t *testing.T) {
	g := testGroup()
	a := openOne(t, g, 0, nil)
	b := openOne(t, g, 1, func(_ int, c *Config) { c.Membership.InitialHosts = []netip.AddrPort{a.LocalAddr()} })
	defer closeInOrder(t, []*Member{a, b})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitViewSize(t, ctx, a, 2)
	requireSameView(t, []*Member{a, b}, true)
}

// TestJoinContextEnds: Open returns ErrJoinFailed wrapping the context's
// error when the join cannot complete in time, and leaves nothing running.
func TestJoinContextEnds(t *testing.T) {
	base := nakcastGoroutines()
	c := Config{Group: testGroup()}
	gmsTestConfig(&c)
	c.Membership.DiscoveryTimeout = 5 * time.Second // discovery outlasts the context
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	m, err := Open(ctx, c)
	require.Nil(t, m)
	require.ErrorIs(t, err, ErrJoinFailed)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	checkNoLeak(t, base)
}

// sendAll has members ms[0..senders-1] send perSender messages each
// (sizes from sizeFor) and waits until every recorder has them all.
func sendAll(t *testing.T, ctx context.Context, ms []*Member, recs []*recorder, senders, perSender int, big bool) {
	t.Helper()
	var wg sync.WaitGroup
	for k := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 200_000)
			for i := range perSender {
				p := buf[:sizeFor(i, big)]
				fillPayload(p, k, i)
				if err := ms[k].Send(ctx, p); err != nil {
					t.Errorf("sender %d message %d: %v", k, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, r := range recs {
		err := r.waitFor(ctx, func() bool {
			for k := range senders {
				if r.count[ms[k].Self()] < perSender {
					return false
				}
			}
			return true
		})
		if err != nil {
			r.mu.Lock()
			t.Fatalf("member %d: %v with counts %v", i, err, r.count)
		}
	}
	for k := range senders {
		h := expectedHash(perSender, func(i int) []byte { return payloadOf(k, i, sizeFor(i, big)) })
		for i, r := range recs {
			r.mu.Lock()
			require.Empty(t, r.errs, "member %d", i)
			require.Equal(t, perSender, r.count[ms[k].Self()], "member %d sender %d count", i, k)
			require.Equal(t, h, r.hash[ms[k].Self()], "member %d sender %d hash", i, k)
			r.mu.Unlock()
		}
	}
}

// TestExactDeliveryJoined: three members joined through gms, 5% receive
// loss (joins under loss too), every member delivers every message of
// every sender exactly once and in order; no lost range.
func TestExactDeliveryJoined(t *testing.T) {
	for _, thr := range []Threading{ThreadingShared, ThreadingDedicated} {
		t.Run(thr.String(), func(t *testing.T) { testExactDeliveryJoined(t, thr, nil) })
	}
}

// testExactDeliveryJoined is TestExactDeliveryJoined; with keys the
// members run with them, encrypted (TestKeyedExactDeliveryJoined).
func testExactDeliveryJoined(t *testing.T, thr Threading, keys []Key) {
	perSender := joinedMessages
	if testing.Short() {
		perSender = min(perSender, 2000)
	}
	base := nakcastGoroutines()
	recs := []*recorder{newRecorder(-1), newRecorder(-1), newRecorder(-1)}
	faults := make([]*faultCounter, 3)
	ms := openJoined(t, 3, func(i int, c *Config) {
		c.Handler = recs[i]
		faults[i] = overMem(c, memtransport.Faults{Loss: 0.05, Seed: uint64(i + 1)})
		c.Agent.Threading = thr
		c.Tuning.BundleBytes = 8 << 10 // enough datagrams that 5% loss drops some (64 KB bundles: ~90 in a -race run)
		c.Keys, c.Encrypt = keys, keys != nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, m := range ms {
		waitViewSize(t, ctx, m, 3)
	}
	sendAll(t, ctx, ms, recs, 3, perSender, true)
	var injected uint64
	for i, m := range ms {
		s := m.Stats()
		injected += faults[i].counts().Dropped
		require.Zero(t, s.LostRanges)
	}
	require.NotZero(t, injected)
	closeInOrder(t, ms)
	checkNoLeak(t, base)
}

// TestGracefulLeave: a member that sent messages closes; Close drains and
// leaves through gms; the others install a view without it, having
// delivered all its messages, and the leaver reports EventLeft with no
// error.
func TestGracefulLeave(t *testing.T) {
	const n = 500
	recs := []*recorder{newRecorder(-1), newRecorder(-1), newRecorder(-1)}
	ms := openJoined(t, 3, func(i int, c *Config) { c.Handler = recs[i] })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, m := range ms {
		waitViewSize(t, ctx, m, 3)
	}
	leaver := ms[1]
	self := leaver.Self()
	for i := range n {
		require.NoError(t, leaver.Send(ctx, payloadOf(1, i, 100)))
	}
	require.NoError(t, leaver.Close(ctx))
	var left Event
	for left.Kind != EventLeft {
		var err error
		left, err = leaver.NextEvent(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, left.Err, "a graceful leave")
	h := expectedHash(n, func(i int) []byte { return payloadOf(1, i, 100) })
	for _, i := range []int{0, 2} {
		e := waitViewSize(t, ctx, ms[i], 2)
		require.NotContains(t, e.Members, self)
		recs[i].mu.Lock()
		require.Equal(t, n, recs[i].count[self], "member %d", i)
		require.Equal(t, h, recs[i].hash[self], "member %d", i)
		recs[i].mu.Unlock()
	}
	requireSameView(t, []*Member{ms[0], ms[2]}, false)
	require.Zero(t, ms[0].Stats().Suspicions, "a leave is not a suspicion")
}

// TestCoordinatorLeaves: the coordinator leaves gracefully and the next
// member takes over.
func TestCoordinatorLeaves(t *testing.T) {
	ms := openJoined(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, m := range ms {
		waitViewSize(t, ctx, m, 3)
	}
	id, _ := ms[0].View()
	var rest []*Member
	for _, m := range ms {
		if m.Self() == id.Coord {
			require.NoError(t, m.Close(ctx))
		} else {
			rest = append(rest, m)
		}
	}
	require.Len(t, rest, 2)
	for _, m := range rest {
		e := waitViewSize(t, ctx, m, 2)
		require.NotEqual(t, id.Coord, e.View.Coord)
	}
	requireSameView(t, rest, false)
}

// TestCrashExcluded: a sender is killed mid-stream (no leave); the
// survivors suspect it, install a view without it, complete its messages
// from each other up to one cut and end with the same prefix of them (5%
// loss, so the survivors' windows differ when it dies).
func TestCrashExcluded(t *testing.T) {
	base := nakcastGoroutines()
	recs := []*recorder{newRecorder(-1), newRecorder(-1), newRecorder(-1)}
	ms := openJoined(t, 3, func(i int, c *Config) {
		c.Handler = recs[i]
		overMem(c, memtransport.Faults{Loss: 0.05, Seed: uint64(i + 7)})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, m := range ms {
		waitViewSize(t, ctx, m, 3)
	}
	// The victim joined second: the view change that admitted it completed
	// before the third member's could begin (one at a time), so its crash
	// is found by failure detection. A last joiner that crashes before its
	// acknowledgement of the JoinRsp arrives (5% loss) is excluded by the
	// view change's timeout instead, with no suspicion.
	victim := ms[1]
	vid := victim.Self()
	srecs := []*recorder{recs[0], recs[2]}
	stop := make(chan struct{})
	sent := make(chan int, 1)
	sendErr := make(chan error, 1)
	go func() {
		// i counts the payloads the victim accepted: it advances only when
		// TrySend returns nil, so the accepted messages are exactly
		// payloads 0..i-1, in order. stop is checked while back-pressured
		// too: once the victim has crashed nothing drains its ring.
		i := 0
		defer func() { sent <- i }()
		for {
			p := payloadOf(1, i, 16+i%200)
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := victim.TrySend(p)
				if err == nil {
					break
				}
				if err != ErrBackPressure {
					sendErr <- fmt.Errorf("victim TrySend payload %d: %w", i, err)
					return
				}
				runtime.Gosched()
			}
			i++
		}
	}()
	// Crash once both survivors have some of its messages.
	for _, r := range srecs {
		require.NoError(t, r.waitFor(ctx, func() bool { return r.count[vid] >= 300 }))
	}
	victim.crash()
	close(stop)
	total := <-sent
	require.Equal(t, vid, victim.Self(), "the victim was excluded and rejoined before the crash")
	select {
	case err := <-sendErr:
		require.NoError(t, err)
	default:
	}
	survivors := []*Member{ms[0], ms[2]}
	suspected := false
	// seen is what each survivor reported until the view without the
	// victim, with its membership counters: printed if no survivor
	// reported the suspicion, they say whether the victim was excluded
	// some other way (left behind in an older view, replaced by a new
	// incarnation, left out of a merge).
	var seen []string
	for _, m := range survivors {
		for {
			e, err := m.NextEvent(ctx)
			require.NoError(t, err, "%v: waiting for the view without the crashed member", m.Self())
			seen = append(seen, fmt.Sprintf("%v: %v %v %v", m.Self(), e.Kind, e.Sender, e.Members))
			suspected = suspected || (e.Kind == EventSuspect && e.Sender == vid)
			if e.Kind == EventView && len(e.Members) == 2 {
				require.NotContains(t, e.Members, vid)
				break
			}
		}
		seen = append(seen, fmt.Sprintf("%v: membership %+v", m.Self(), m.Stats().Membership))
	}
	require.True(t, suspected, "a survivor reported the suspicion of %v; events and counters:\n%s", vid, strings.Join(seen, "\n"))
	requireSameView(t, survivors, false)
	// The cut is closed (every survivor acknowledged it) when the crashed
	// sender's window is gone: then each has delivered up to the cut.
	for i, m := range survivors {
		require.NoError(t, pollUntil(ctx, func() bool {
			m.mu.Lock()
			defer m.mu.Unlock()
			_, open := m.proto.WindowState(vid)
			return !open
		}), "member %d: cut not closed", i)
	}
	srecs[0].mu.Lock()
	srecs[1].mu.Lock()
	n0, n1 := srecs[0].count[vid], srecs[1].count[vid]
	require.Equal(t, n0, n1, "survivors end with the same prefix")
	require.Equal(t, srecs[0].hash[vid], srecs[1].hash[vid])
	// A range that neither survivor received before the crash (5% loss
	// each, the victim gone before repairing it) is declared lost by the
	// cut (design.md, "Crashed senders"): both survivors report the same
	// lost ranges, and deliver exactly the victim's messages 1..last
	// (payload seq-1, no fragments) minus those ranges, in order.
	lost := srecs[0].lostRanges[vid]
	require.Equal(t, lost, srecs[1].lostRanges[vid], "survivors report the same lost ranges")
	var want []int
	for seq := uint64(1); len(want) < n0; seq++ {
		if !slices.ContainsFunc(lost, func(r [2]uint64) bool { return r[0] <= seq && seq <= r[1] }) {
			want = append(want, int(seq-1))
		}
	}
	for _, r := range lost {
		require.Less(t, r[1], uint64(want[len(want)-1]+1), "a lost range %v above the last delivered message", r)
	}
	require.Equal(t, expectedHash(n0, func(i int) []byte { return payloadOf(1, want[i], 16+want[i]%200) }), srecs[0].hash[vid],
		"survivors' %d messages of the victim are not its payloads 0..%d minus lost %v (accepted %d)", n0, n0-1, lost, total)
	for i, r := range srecs {
		for _, e := range r.errs {
			require.True(t, strings.HasPrefix(e, "lost "+vid.String()+" "), "survivor %d: %s", i, e)
		}
		require.Len(t, r.errs, len(lost), "survivor %d", i)
	}
	srecs[1].mu.Unlock()
	srecs[0].mu.Unlock()
	require.LessOrEqual(t, want[len(want)-1]+1, total)
	t.Logf("crashed after %d messages queued; survivors delivered %d, lost %v", total, n0, lost)
	closeInOrder(t, ms)
	checkNoLeak(t, base)
}

// pollUntil checks cond every few milliseconds until it holds or ctx ends:
// for protocol state that signals nothing when it changes.
func pollUntil(ctx context.Context, cond func() bool) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// counterApp is a replicated application for state transfer tests: per
// sender, the count of messages applied and an order-sensitive hash (the
// recorder's), serialised by GetState/SetState.
type counterApp struct{ *recorder }

func (a counterApp) getState(w io.Writer) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b []byte
	for _, s := range slices.SortedFunc(maps.Keys(a.count), func(x, y digest.Member) int { return cmp.Compare(x.ID, y.ID) }) {
		b = binary.LittleEndian.AppendUint64(b, s.ID)
		b = binary.LittleEndian.AppendUint32(b, s.Inc)
		b = binary.LittleEndian.AppendUint64(b, uint64(a.count[s]))
		b = binary.LittleEndian.AppendUint64(b, a.last[s])
		b = binary.LittleEndian.AppendUint64(b, a.hash[s])
	}
	_, err := w.Write(b)
	return err
}

func (a counterApp) setState(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if len(b)%36 != 0 {
		return errors.New("bad state")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.count)
	clear(a.last)
	clear(a.hash)
	a.total = 0
	for ; len(b) > 0; b = b[36:] {
		s := digest.Member{ID: binary.LittleEndian.Uint64(b), Inc: binary.LittleEndian.Uint32(b[8:])}
		a.count[s] = int(binary.LittleEndian.Uint64(b[12:]))
		a.last[s] = binary.LittleEndian.Uint64(b[20:])
		a.hash[s] = binary.LittleEndian.Uint64(b[28:])
		a.total += a.count[s]
	}
	a.installs++
	a.signal()
	return nil
}

// TestStateTransferLateJoiner: two members send while a third joins with
// FetchState; its state (installed mid-stream) plus what it delivers after
// equals the others' state: same count and hash per sender at the end.
func TestStateTransferLateJoiner(t *testing.T) { testStateTransferLateJoiner(t, ThreadingShared, nil) }

// TestInvokedStateTransferLateJoiner is TestStateTransferLateJoiner with
// ThreadingInvoked members, whose agents an application goroutine runs
// (the joiner's once Open has joined and installed the state on a
// goroutine of its own).
func TestInvokedStateTransferLateJoiner(t *testing.T) {
	testStateTransferLateJoiner(t, ThreadingInvoked, nil)
}

// testStateTransferLateJoiner is TestStateTransferLateJoiner; with keys
// the members run with them (TestKeyedStateTransferLateJoiner).
func testStateTransferLateJoiner(t *testing.T, thr Threading, keys []Key) {
	const perSender = 3000
	base := nakcastGoroutines()
	var d *driver
	if thr == ThreadingInvoked {
		d = startDriver(t)
	}
	open := func(g netip.AddrPort, i int, mod func(int, *Config)) *Member {
		m := openOne(t, g, i, mod)
		if d != nil {
			d.add(m)
		}
		return m
	}
	apps := []counterApp{{newRecorder(-1)}, {newRecorder(-1)}, {newRecorder(-1)}}
	mod := func(i int, c *Config) {
		c.Agent.Threading = thr
		// Paced senders (about 1s of traffic), so that the join and the
		// transfer happen while messages flow.
		c.Tuning.RateLimit = 200_000
		c.Tuning.BundleBytes = 4096
		c.Handler = apps[i]
		c.Keys = keys
		c.Membership.GetState = apps[i].getState
		c.Membership.SetState = apps[i].setState
		c.Membership.FetchState = true
	}
	g := testGroup()
	ms := []*Member{open(g, 0, mod), open(g, 1, mod)}
	defer func() { closeInOrder(t, ms) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for k := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perSender {
				if err := ms[k].Send(ctx, payloadOf(k, i, 64)); err != nil {
					t.Errorf("sender %d: %v", k, err)
					return
				}
			}
		}()
	}
	// Join while traffic flows.
	require.NoError(t, apps[0].waitFor(ctx, func() bool { return apps[0].total >= perSender/2 }))
	ms = append(ms, open(g, 2, mod))
	joinedAt := ms[2].Stats().Delivered
	wg.Wait()
	for i, a := range apps {
		err := a.waitFor(ctx, func() bool {
			return a.count[ms[0].Self()] >= perSender && a.count[ms[1].Self()] >= perSender
		})
		a.mu.Lock()
		require.NoError(t, err, "member %d counts %v", i, a.count)
		a.mu.Unlock()
	}
	for k := range 2 {
		h := expectedHash(perSender, func(i int) []byte { return payloadOf(k, i, 64) })
		for i, a := range apps {
			a.mu.Lock()
			require.Empty(t, a.errs, "member %d", i)
			require.Equal(t, perSender, a.count[ms[k].Self()], "member %d sender %d count", i, k)
			require.Equal(t, h, a.hash[ms[k].Self()], "member %d sender %d hash", i, k)
			a.mu.Unlock()
		}
	}
	s := ms[2].Stats()
	require.Equal(t, uint64(1), s.Membership.StateInstalled)
	require.Equal(t, 1, apps[2].installs)
	require.Less(t, s.Delivered, uint64(2*perSender), "part of the stream came in the state")
	require.Greater(t, s.Delivered, uint64(0), "part of the stream was delivered after the state")
	t.Logf("joiner delivered %d messages itself (%d when Open returned) of %d", s.Delivered, joinedAt, 2*perSender)
	require.NoError(t, pollUntil(ctx, func() bool {
		// Member 1 fetched the (empty) state from member 0 when it joined.
		return ms[0].Stats().Membership.StateServed+ms[1].Stats().Membership.StateServed == 2
	}), "the providers saw the transfers complete: %+v\n%+v", ms[0].Stats().Membership, ms[1].Stats().Membership)
	closeInOrder(t, ms)
	ms = nil
	if d != nil {
		d.halt()
	}
	checkNoLeak(t, base)
}
