package engine

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nakcast/nakcast/engine/transport/memtransport"
	"github.com/stretchr/testify/require"
)

// driver is the application loop of ThreadingInvoked for tests: a
// goroutine that runs DoWork on every member added to it until stopped.
type driver struct {
	ms   atomic.Pointer[[]*Member]
	stop chan struct{}
	done chan struct{}
}

func startDriver(t testing.TB) *driver {
	d := &driver{stop: make(chan struct{}), done: make(chan struct{})}
	d.ms.Store(&[]*Member{})
	go func() {
		defer close(d.done)
		for {
			select {
			case <-d.stop:
				return
			default:
			}
			work := 0
			for _, m := range *d.ms.Load() {
				work += m.DoWork()
			}
			if work == 0 {
				runtime.Gosched()
			}
		}
	}()
	t.Cleanup(d.halt)
	return d
}

func (d *driver) add(m *Member) {
	ms := append(append([]*Member(nil), *d.ms.Load()...), m)
	d.ms.Store(&ms)
}

func (d *driver) halt() {
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	<-d.done
}

// TestInvokedOneGoroutine: with ThreadingInvoked no member goroutine runs
// between Open and Close; one application goroutine runs three members'
// agents (DoWork), sends (TrySend) and polls, with 2% loss injected: every
// member delivers every message exactly once, in order. Close drains on
// its own goroutine and leaves nothing running.
func TestInvokedOneGoroutine(t *testing.T) {
	perSender := perSenderMessages
	base := nakcastGoroutines()
	const members = 3
	g := testGroup()
	ids := testMembers(members)
	ms := make([]*Member, members)
	faults := make([]*faultCounter, members)
	for i := range ms {
		c := Config{
			Group:      g,
			Self:       ids[i],
			Logger:     quietLogger(),
			Membership: MembershipConfig{Members: ids},
			Agent:      AgentConfig{Threading: ThreadingInvoked},
			Tuning:     TuningConfig{RingCapacity: 64, Window: 256},
		}
		faults[i] = overMem(&c, memtransport.Faults{Loss: 0.02, Seed: uint64(i + 20)})
		m, err := Open(context.Background(), c)
		require.NoError(t, err)
		ms[i] = m
	}
	require.Empty(t, nakcastGoroutines().since(base), "no goroutine of the members runs between Open and Close")
	sendPollOneGoroutine(t, ms, perSender, true)
	for i := range ms {
		require.NotZero(t, faults[i].counts().Dropped, "loss was injected")
	}
	for i, err := range closeAll(t, ms, 10*time.Second) {
		require.NoError(t, err, "close member %d", i)
	}
	for _, m := range ms {
		require.Zero(t, m.DoWork(), "DoWork after Close does nothing")
	}
	checkNoLeak(t, base)
}

// TestInvokedBlockingCallsDrive: with ThreadingInvoked, Send under
// back-pressure, Receive and NextEvent run the agent themselves while they
// wait, so an application with one goroutine per member cannot deadlock
// on them. The receiver is driven by its own goroutine (Receive), the
// sender (push mode) by its Send calls and a DoWork loop.
func TestInvokedBlockingCallsDrive(t *testing.T) {
	n := blockingMessages
	own := &counter{}
	ms := openBlockingPair(t, own, func(i int) memtransport.Faults {
		return []memtransport.Faults{none, {Loss: 0.1}}[i]
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, err := ms[1].NextEvent(ctx)
	require.NoError(t, err)
	require.Equal(t, EventView, e.Kind)

	got := receiveInOrder(ctx, ms[1], ms[0], n)
	for i := range n {
		require.NoError(t, ms[0].Send(ctx, payloadOf(0, i, 20+i%200)))
	}
	received := false
	d := ms[0].startDriving()
	defer d.stop()
	for !received || own.n.Load() < int64(n) {
		select {
		case err := <-got:
			require.NoError(t, err)
			received = true
		default:
			require.NoError(t, ctx.Err(), "own deliveries %d of %d", own.n.Load(), n)
			ms[0].driveOnce(&d) // the sender's repairs, stability, own deliveries
		}
	}
	require.Equal(t, int64(n), own.n.Load())
	require.NotZero(t, ms[0].Stats().BackPressureWaits, "Send waited under back-pressure")
	require.NotZero(t, ms[0].Stats().Retransmitted, "repairs went out from DoWork")
}

// TestInvokedBlockingCallLeavesAgentToLoop: once the application's own
// DoWork loop has run the agent since a blocking call's last wait step,
// the next step (driveOnce) waits for that loop's progress instead of
// taking the agent, so the loop's DoWork never finds it taken
// (AgentBusy) while the step waits; the step notes the loop's count. A
// blocking call that took turns with the loop held the agent through a
// WaitWork of up to a millisecond while the loop's DoWork (and
// TrySendBatch) found it taken and spun.
func TestInvokedBlockingCallLeavesAgentToLoop(t *testing.T) {
	ms := openGroup(t, 1, func(_ int, c *Config) { c.Agent.Threading = ThreadingInvoked })
	m := ms[0]
	m.DoWork()
	before := m.ag.appWorks.Load()
	require.NotZero(t, before, "DoWork counts the application's runs")
	d := driving{seen: before - 1} // the loop ran since the call's last step
	busy := m.ctr.agentBusy.Load()
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.driveOnce(&d)
		d.stop()
	}()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		default:
			m.DoWork()
		}
	}
	require.Equal(t, busy, m.ctr.agentBusy.Load(), "the loop's DoWork found the agent taken")
	require.GreaterOrEqual(t, d.seen, before, "the step noted the loop's count")
}

// TestInvokedBlockingCallsBesideLoop: an application runs both members'
// agents in a DoWork loop of its own (startDriver) and, on other
// goroutines, blocks in Send under back-pressure, Receive and NextEvent:
// every message arrives in order, Send waited, and NextEvent returns
// when its context ends. (That the blocking calls leave the agent to the
// loop is TestInvokedBlockingCallLeavesAgentToLoop's.)
func TestInvokedBlockingCallsBesideLoop(t *testing.T) {
	n := blockingMessages
	own := &counter{}
	ms := openBlockingPair(t, own, func(i int) memtransport.Faults {
		return memtransport.Faults{Loss: 0.05, Seed: uint64(i + 7)}
	})
	d := startDriver(t)
	d.add(ms[0])
	d.add(ms[1])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	evCtx, evCancel := context.WithCancel(ctx)
	events := make(chan error, 1)
	go func() {
		for {
			if _, err := ms[1].NextEvent(evCtx); err != nil {
				events <- err
				return
			}
		}
	}()
	got := receiveInOrder(ctx, ms[1], ms[0], n)
	for i := range n {
		require.NoError(t, ms[0].Send(ctx, payloadOf(0, i, 20+i%200)))
	}
	require.NoError(t, <-got)
	evCancel()
	require.ErrorIs(t, <-events, context.Canceled)
	require.NotZero(t, ms[0].Stats().BackPressureWaits, "Send waited under back-pressure")
}

// openBlockingPair opens the two invoked members of the blocking-call
// tests (a small ring and window): member 0 in push mode, own getting its
// own messages inside DoWork, member 1 in pull mode; faults(i) are member
// i's.
func openBlockingPair(t *testing.T, own *counter, faults func(i int) memtransport.Faults) []*Member {
	return openGroup(t, 2, func(i int, c *Config) {
		c.Agent.Threading = ThreadingInvoked
		c.Tuning.RingCapacity = 16
		c.Tuning.Window = 64
		if i == 0 {
			c.Handler = own
		}
		overMem(c, faults(i))
	})
}

// receiveInOrder receives n messages on r with Receive on a goroutine of
// its own and reports on the channel whether they were from's
// payloadOf(0, i, 20+i%200), in order (nil) or what went wrong.
func receiveInOrder(ctx context.Context, r, from *Member, n int) <-chan error {
	got := make(chan error, 1)
	go func() {
		for i := range n {
			msg, err := r.Receive(ctx)
			if err != nil {
				got <- err
				return
			}
			if want := payloadOf(0, i, 20+i%200); string(msg.Payload) != string(want) || msg.Sender != from.Self() {
				got <- errors.New("wrong message")
				return
			}
		}
		got <- nil
	}()
	return got
}

// TestInvokedDynamicMembership: Open joins a dynamic group with a
// goroutine of its own and then hands the agent to the application; the
// founder, driven by the application, admits the joiner; both exchange
// messages; the joiner leaves gracefully and the founder installs the
// smaller view.
func TestInvokedDynamicMembership(t *testing.T) {
	d := startDriver(t)
	g := testGroup()
	inv := func(i int, c *Config) { c.Agent.Threading = ThreadingInvoked }
	a := openOne(t, g, 0, inv)
	d.add(a)
	b := openOne(t, g, 1, inv)
	d.add(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitViewSizeDriven(t, ctx, a, 2)

	var mu sync.Mutex
	var got []string
	require.Zero(t, a.Poll(nil, 1), "push mode off: nothing yet")
	require.NoError(t, b.TrySend([]byte("hello from b")))
	require.NoError(t, a.TrySend([]byte("hello from a")))
	for {
		var c copier
		for a.Poll(&c, 1) == 1 {
			mu.Lock()
			got = append(got, string(c.msg.Payload))
			mu.Unlock()
		}
		if len(got) == 2 {
			break
		}
		require.NoError(t, ctx.Err(), "a got %q", got)
		runtime.Gosched()
	}
	require.ElementsMatch(t, []string{"hello from a", "hello from b"}, got)

	require.NoError(t, b.Close(ctx))
	waitViewSizeDriven(t, ctx, a, 1)
	require.NoError(t, a.Close(ctx))
	d.halt()
}

// waitViewSizeDriven is waitViewSize for a member another goroutine
// drives: NextEvent would run DoWork itself, and only one goroutine does
// at a time, so it yields while the driver runs the agent.
func waitViewSizeDriven(t testing.TB, ctx context.Context, m *Member, n int) {
	t.Helper()
	var one [1]Event
	for {
		if m.PollEvents(one[:]) == 1 && one[0].Kind == EventView && len(one[0].Members) == n {
			return
		}
		require.NoError(t, ctx.Err(), "waiting for a view of %d on %v", n, m.Self())
		runtime.Gosched()
	}
}

// TestDoWorkOnlyInvoked: DoWork does nothing unless the member runs with
// ThreadingInvoked; two goroutines calling it at once take turns.
func TestDoWorkOnlyInvoked(t *testing.T) {
	ms := openGroup(t, 2, func(i int, c *Config) {
		if i == 1 {
			c.Agent.Threading = ThreadingInvoked
		}
	})
	require.Zero(t, ms[0].DoWork())
	// Two goroutines run member 1's agent at once until its application
	// has polled member 0's message: they take turns (the race detector
	// checks that the agent's state is never shared) and between them
	// they read it.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var work atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if n := ms[1].DoWork(); n > 0 {
					work.Add(int64(n))
				} else {
					runtime.Gosched()
				}
			}
		}()
	}
	require.NoError(t, ms[0].TrySend([]byte("x")))
	var c copier
	deadline := time.Now().Add(30 * time.Second)
	for !c.got && time.Now().Before(deadline) {
		if ms[1].Poll(&c, 1) == 0 {
			runtime.Gosched()
		}
	}
	close(stop)
	wg.Wait()
	require.True(t, c.got, "member 1 never received the message")
	require.Equal(t, "x", string(c.msg.Payload))
	require.Positive(t, work.Load())
}

// TestInvokedSendBatchDirect: with ThreadingInvoked, TrySendBatch writes
// straight into the protocol's bundle when the ring is empty, and queues
// in the ring what flow control, the protocol's window or a message too
// large for a bundle (fragmented) leaves; order and exactness hold across
// both paths, with 2% loss at the receiver.
func TestInvokedSendBatchDirect(t *testing.T) {
	n := perSenderMessages
	rec := newRecorder(n) // the receiver's Handler
	own := newRecorder(n) // the sender polls its own messages
	faults := make([]*faultCounter, 2)
	ms := openGroup(t, 2, func(i int, c *Config) {
		c.Agent.Threading = ThreadingInvoked
		c.Tuning.Window = 1024
		c.Tuning.MaxDatagram = 8192
		faults[i] = overMem(c, none)
		if i == 1 {
			c.Handler = rec
			faults[i] = overMem(c, memtransport.Faults{Loss: 0.02, Seed: 7})
		}
	})
	size := func(i int) int {
		if i%997 == 5 {
			return 20000 + i%3000 // fragmented: above MaxDatagram
		}
		return 16 + i*7%300
	}
	d := startDriver(t)
	d.add(ms[1])
	recvDone := func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return rec.total >= n }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var batch [][]byte
	for i := 0; i < n; {
		batch = batch[:0]
		for k := 0; k < 1+i%23 && i+k < n; k++ {
			batch = append(batch, payloadOf(0, i+k, size(i+k)))
		}
		k, err := ms[0].TrySendBatch(batch)
		if err != nil {
			require.ErrorIs(t, err, ErrBackPressure)
		}
		i += k
		ms[0].DoWork()
		ms[0].Poll(own, 64)
		require.NoError(t, ctx.Err(), "sent %d", i)
	}
	for !recvDone() || own.total < n {
		require.NoError(t, ctx.Err(), "own deliveries %d of %d", own.total, n)
		if ms[0].DoWork()+ms[0].Poll(own, 64) == 0 {
			runtime.Gosched()
		}
	}
	d.halt()
	h := expectedHash(n, func(i int) []byte { return payloadOf(0, i, size(i)) })
	for _, r := range []*recorder{rec, own} {
		require.Empty(t, r.errs)
		require.Equal(t, n, r.count[ms[0].Self()])
		require.Equal(t, h, r.hash[ms[0].Self()])
	}
	st := ms[0].Stats()
	require.NotZero(t, st.SentDirect, "some went straight into the bundle")
	require.Less(t, st.SentDirect, uint64(n), "some went through the ring")
	require.NotZero(t, faults[1].counts().Dropped)
	t.Logf("direct %d of %d, retransmitted %d", st.SentDirect, n, st.Retransmitted)
}

// TestInvokedWaitWork: an invoked member's loop that calls WaitWork when
// DoWork found nothing to do sleeps while the group is idle (it wakes for
// timers, not thousands of times a millisecond as a spinning loop does)
// and still delivers what arrives.
func TestInvokedWaitWork(t *testing.T) {
	rec := newRecorder(2)
	ms := openGroup(t, 2, func(i int, c *Config) {
		c.Agent.Threading = ThreadingInvoked
		if i == 1 {
			c.Handler = rec
		}
	})
	d := startDriver(t)
	d.add(ms[0])
	var calls atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			calls.Add(1)
			if ms[1].DoWork() == 0 {
				ms[1].WaitWork(time.Minute)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, ms[0].TrySend([]byte("one")))
	require.NoError(t, rec.waitFor(ctx, func() bool { return rec.total == 1 }))

	// An idle window of 200 ms, measured (not waited on for anything):
	// the loop wakes for the protocol's timers (every 10 ms or less) and
	// the few control datagrams, where a spinning loop runs DoWork about
	// a million times.
	before := calls.Load()
	time.Sleep(200 * time.Millisecond)
	idle := calls.Load() - before
	t.Logf("DoWork calls in 200 ms idle: %d", idle)
	require.Less(t, idle, int64(5000))

	require.NoError(t, ms[0].TrySend([]byte("two")))
	require.NoError(t, rec.waitFor(ctx, func() bool { return rec.total == 2 }))
	require.Empty(t, rec.errs)
}

// TestInvokedStreamingFlush: an invoked member flushes its open bundle at
// the DoWork after a lone message or a trickle (no wait for a message
// sent alone), and holds it for one DoWork when the application sent a
// datagram's worth or more since the last one (streaming): full datagrams,
// not one short datagram a DoWork. The next DoWork that finds nothing new
// flushes what is held.
func TestInvokedStreamingFlush(t *testing.T) {
	ms := openGroup(t, 2, func(i int, c *Config) {
		c.Agent.Threading = ThreadingInvoked
		c.Tuning.MaxDatagram = 1500
	})
	d := startDriver(t)
	d.add(ms[1])
	m := ms[0]
	// Settle: the first DoWork calls after Open carry the member's own
	// control traffic; only data datagrams (Stats.Bundles) count here.
	for range 10 {
		m.DoWork()
	}
	bundles := func() uint64 { return m.Stats().Bundles }
	p := make([]byte, 64)

	b0 := bundles()
	require.NoError(t, m.TrySend(p))
	m.DoWork()
	require.Equal(t, b0+1, bundles(), "a lone message goes at the first DoWork")

	b0 = bundles()
	for range 5 {
		require.NoError(t, m.TrySend(p))
	}
	m.DoWork()
	require.Equal(t, b0+1, bundles(), "a trickle goes at the first DoWork")

	// 100 messages of 64 B fill 1500 B datagrams several times over.
	batch := make([][]byte, 100)
	for i := range batch {
		batch[i] = p
	}
	b0 = bundles()
	k, err := m.TrySendBatch(batch)
	require.NoError(t, err)
	require.Equal(t, len(batch), k)
	m.DoWork()
	full := bundles() - b0
	require.NotZero(t, full, "the full datagrams went, the rest is held")
	start := time.Now()
	m.WaitWork(30 * time.Second)
	require.Less(t, time.Since(start), 10*time.Second, "WaitWork returns at once while a bundle is held")
	m.DoWork()
	require.Equal(t, b0+full+1, bundles(), "the held bundle goes at the next DoWork that finds nothing new")
}
