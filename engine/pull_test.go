package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine/transport/memtransport"
	"github.com/stretchr/testify/require"
)

// TestTrySendPollOneGoroutine drives three pull-mode members from a single
// goroutine with the documented pattern (TrySend; on ErrBackPressure, Poll
// and retry), with rings and windows small enough that back-pressure
// happens all the time, and checks that it never deadlocks and that every
// member delivers every message exactly once, in order.
func TestTrySendPollOneGoroutine(t *testing.T) {
	perSender := pollMessages
	const members = 3
	ms := openGroup(t, members, func(i int, c *Config) {
		c.Tuning.RingCapacity = 64
		c.Tuning.Window = 256
		overMem(c, memtransport.Faults{Loss: 0.02, Seed: uint64(i + 10)})
	})
	sendPollOneGoroutine(t, ms, perSender, false)
	var bp uint64
	for _, m := range ms {
		bp += m.Stats().BackPressure
	}
	require.NotZero(t, bp, "the test must exercise back-pressure")
	t.Logf("TrySend back-pressure refusals: %d", bp)
}

// sendPollOneGoroutine has every member of ms send perSender messages of
// 16..295 bytes with TrySend and poll its deliveries, all on the calling
// goroutine (which runs the members' agents too, DoWork, when doWork is
// set), until every member delivered every message; then it checks each
// sender's count and order-sensitive hash at every member.
func sendPollOneGoroutine(t *testing.T, ms []*Member, perSender int, doWork bool) {
	t.Helper()
	members := len(ms)
	recs := make([]*recorder, members)
	for i := range recs {
		recs[i] = newRecorder(members * perSender)
	}
	next := make([]int, members)
	buf := make([]byte, 300)
	deadline := time.Now().Add(60 * time.Second)
	done := func() bool {
		for _, r := range recs {
			if r.total < members*perSender {
				return false
			}
		}
		return true
	}
	for !done() {
		require.True(t, time.Now().Before(deadline), "no progress: delivered %d of %d at member 0", recs[0].total, members*perSender)
		work := 0
		for k, m := range ms {
			if next[k] < perSender {
				p := buf[:16+next[k]%280]
				fillPayload(p, k, next[k])
				switch err := m.TrySend(p); {
				case err == nil:
					next[k]++
					work++
				case errors.Is(err, ErrBackPressure):
				default:
					require.NoError(t, err)
				}
			}
			if doWork {
				work += m.DoWork()
			}
			work += m.Poll(recs[k], 64)
		}
		if work == 0 {
			runtime.Gosched()
		}
	}
	for k := range ms {
		h := expectedHash(perSender, func(i int) []byte { return payloadOf(k, i, 16+i%280) })
		for i, r := range recs {
			require.Empty(t, r.errs)
			require.Equal(t, perSender, r.count[ms[k].Self()], "member %d sender %d", i, k)
			require.Equal(t, h, r.hash[ms[k].Self()], "member %d sender %d", i, k)
		}
	}
}

func TestPollInPushModeReturnsZero(t *testing.T) {
	ms := openGroup(t, 1, func(_ int, c *Config) {
		c.Handler = HandlerFunc(func(digest.Member, uint64, []byte) {})
	})
	require.NoError(t, ms[0].TrySend([]byte("x")))
	require.Zero(t, ms[0].Poll(newRecorder(1), 10))
}

// TestClaimCommitAbort writes messages in place with TryClaim, aborts one,
// and checks that exactly the committed ones are delivered, in order.
func TestClaimCommitAbort(t *testing.T) {
	rec := newRecorder(3)
	ms := openGroup(t, 1, func(_ int, c *Config) { c.Handler = rec })
	m := ms[0]
	for i, s := range []string{"one", "skip", "two", "three-is-longer-than-inline"} {
		n := len(s)
		if i == 3 {
			n = 1000 // above InlineSize: out-of-line buffer
		}
		c, err := m.TryClaim(n)
		require.NoError(t, err)
		require.Len(t, c.Buf, n)
		copy(c.Buf, s)
		if s == "skip" {
			c.Abort()
		} else {
			c.Commit()
		}
	}
	<-rec.cond
	require.Equal(t, 3, rec.count[m.Self()])
	require.Empty(t, rec.errs)
	require.Equal(t, uint64(3), rec.last[m.Self()], "an aborted claim uses no protocol seqno")
	// The agent skipped the aborted slot and returned the out-of-line
	// buffer before it delivered what followed: its per-run passes are
	// off again (logBuffer.aborts, bigOut).
	require.Zero(t, m.q.aborts.Load())
	require.Zero(t, m.q.bigOut.Load())
	_, err := m.TryClaim(m.Config().Tuning.MaxMessage + 1)
	require.ErrorIs(t, err, ErrTooLarge)
	require.ErrorIs(t, m.TrySend(make([]byte, m.Config().Tuning.MaxMessage+1)), ErrTooLarge)
}

// counter is a Handler that only counts.
type counter struct{ n atomic.Int64 }

func (c *counter) Deliver(digest.Member, uint64, []byte) { c.n.Add(1) }
func (c *counter) Lost(digest.Member, uint64, uint64)    {}

// TestZeroAllocsPerMessage sends batches from one member to another (push
// delivery at both, or Poll of the delivery ring in pull mode) and checks that, in steady state, the whole path (copy
// into the ring, agent, bundling, sendmmsg, recvmmsg, receive, deliver)
// allocates nothing per message: AllocsPerRun counts every goroutine's
// allocations, agents included.
func TestZeroAllocsPerMessage(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	for _, tc := range []struct {
		size  int
		thr   Threading
		batch bool   // SendBatch in batches of 64 instead of TrySend
		excl  bool   // Config.Agent.ExclusiveSender
		auth  string // "", "signed" (Config.Keys) or "encrypted" (and Config.Encrypt)
		pull  bool   // pull mode: both members Poll their delivery ring
	}{{64, ThreadingShared, false, false, "", false}, {1024, ThreadingShared, false, false, "", false}, {64, ThreadingDedicated, false, false, "", false}, {1024, ThreadingDedicated, false, false, "", false},
		{64, ThreadingShared, true, false, "", false}, {1024, ThreadingDedicated, true, false, "", false},
		{64, ThreadingInvoked, false, false, "", false}, {64, ThreadingInvoked, true, false, "", false},
		{64, ThreadingShared, false, true, "", false}, {64, ThreadingShared, true, true, "", false},
		{64, ThreadingShared, false, false, "signed", false}, {1024, ThreadingShared, false, false, "encrypted", false},
		{64, ThreadingDedicated, false, false, "encrypted", false}, {64, ThreadingInvoked, true, false, "signed", false},
		{64, ThreadingShared, false, false, "", true}, {1024, ThreadingShared, false, false, "", true},
		{64, ThreadingDedicated, false, false, "", true}, {1024, ThreadingInvoked, false, false, "", true}} {
		size := tc.size
		name := map[int]string{64: "64B", 1024: "1KiB"}[size] + "/" + tc.thr.String()
		if tc.batch {
			name += "/batch"
		}
		if tc.excl {
			name += "/exclusive"
		}
		if tc.auth != "" {
			name += "/" + tc.auth
		}
		if tc.pull {
			name += "/pull"
		}
		t.Run(name, func(t *testing.T) {
			cs := []*counter{{}, {}}
			keys := testKeys(t, 1)
			ms := openGroup(t, 2, func(i int, c *Config) {
				if !tc.pull {
					c.Handler = cs[i]
				}
				c.Agent.Threading = tc.thr
				c.Agent.ExclusiveSender = tc.excl
				if tc.auth != "" {
					c.Keys, c.Encrypt = keys, tc.auth == "encrypted"
				}
			})
			payload := make([]byte, size)
			const batch = 5000
			ps := make([][]byte, 64)
			for i := range ps {
				ps[i] = payload
			}
			sent := int64(0)
			// wait is the test goroutine's idle step; with
			// ThreadingInvoked it runs both members' agents, in pull
			// mode it polls both.
			wait := func() {
				if tc.pull && ms[0].Poll(cs[0], 1024)+ms[1].Poll(cs[1], 1024) > 0 {
					return
				}
				if tc.thr == ThreadingInvoked && ms[0].DoWork()+ms[1].DoWork() > 0 {
					return
				}
				runtime.Gosched()
			}
			run := func() {
				if tc.batch {
					for i := 0; i < batch; i += len(ps) {
						if _, err := ms[0].SendBatch(context.Background(), ps[:min(len(ps), batch-i)]); err != nil {
							t.Error(err)
							return
						}
					}
				} else {
					for range batch {
						for ms[0].TrySend(payload) != nil {
							wait()
						}
					}
				}
				sent += batch
				for cs[1].n.Load() < sent || cs[0].n.Load() < sent {
					wait()
				}
			}
			for range 30 { // warm pools, windows and free lists
				run()
			}
			// Like testing.AllocsPerRun, but the buffer pools' growth is
			// accounted apart: a new retention high-water mark (it depends
			// on when stability rounds fall) makes a pool allocate a
			// datagram buffer (2 allocations), bounded by Config.Tuning.PoolBytes
			// and reused for ever after: memory bounded by config, not an
			// allocation per message.
			// The same holds for the other structures that grow only at a
			// new high-water mark: the pools' free lists and the
			// protocol's datagram references (one allocation each).
			growth := func() (buffers, other uint64) {
				for _, m := range ms {
					st := m.pool.Stats()
					buffers += st.Allocs
					other += st.ListGrowth
					m.mu.Lock()
					other += m.proto.GrowthAllocs()
					m.mu.Unlock()
				}
				return buffers, other
			}
			const runs = 10
			// The pool's count is read inside the MemStats window, so every
			// buffer it counts was allocated inside it too (the agents keep
			// running around the reads; read outside, a buffer grown
			// between the reads made the difference negative).
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b0, o0 := growth()
			for range runs {
				run()
			}
			b1, o1 := growth()
			grown, other := b1-b0, o1-o0
			runtime.ReadMemStats(&after)
			// Signed: the growth counters once exceeded the heap objects
			// counted (under load; not explained), and an unsigned
			// difference wraps below zero.
			allocs := (float64(after.Mallocs-before.Mallocs) - float64(2*grown+other)) / runs
			perMsg := allocs / batch
			t.Logf("%.1f allocations per batch of %d besides %d pool buffers and %d other high-water marks grown: %.4f per message", allocs, batch, grown, other, perMsg)
			require.Less(t, perMsg, 0.001)
		})
	}
}

// TestSendWaitingWhenClosed checks that a Send blocked under back-pressure
// returns ErrClosed when the member closes.
func TestSendWaitingWhenClosed(t *testing.T) {
	ids := testMembers(2)
	// Member 1 never starts: nothing becomes stable, so a small window
	// fills and Send waits.
	m, err := Open(context.Background(), Config{
		Group:      testGroup(),
		Self:       ids[0],
		Logger:     quietLogger(),
		Handler:    HandlerFunc(func(digest.Member, uint64, []byte) {}),
		Membership: MembershipConfig{Members: ids},
		Tuning:     TuningConfig{Window: 64, RingCapacity: 2},
	})
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		for {
			if err := m.Send(context.Background(), []byte("x")); err != nil {
				errc <- err
				return
			}
		}
	}()
	for m.Stats().BackPressureWaits == 0 {
		runtime.Gosched()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, m.Close(ctx), context.DeadlineExceeded)
	require.ErrorIs(t, <-errc, ErrClosed)
}

// TestReceiveAndMessages uses the convenience API: Messages over two
// pull-mode members.
func TestReceiveAndMessages(t *testing.T) {
	ms := openGroup(t, 2, nil)
	for i := range 100 {
		require.NoError(t, ms[0].Send(context.Background(), []byte(fmt.Sprint(i))))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range ms {
		i := 0
		for msg, err := range m.Messages(ctx) {
			require.NoError(t, err)
			require.Equal(t, ms[0].Self(), msg.Sender)
			require.Equal(t, uint64(i+1), msg.Seq)
			require.Equal(t, fmt.Sprint(i), string(msg.Payload))
			if i++; i == 100 {
				break
			}
		}
	}
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	_, err := ms[1].Receive(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	push := openGroup(t, 1, func(_ int, c *Config) { c.Handler = HandlerFunc(func(digest.Member, uint64, []byte) {}) })
	_, err = push[0].Receive(ctx)
	require.ErrorIs(t, err, ErrPushMode)
}
