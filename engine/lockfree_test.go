package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPollStatsViewTakeNoProtocolLock: the application meets the agent
// without the protocol lock. With the lock held by the test (the agent
// stuck waiting for it), Poll hands over what the agent had put in the
// delivery ring, and Stats and View return the agent's last published
// state, in every threading mode.
func TestPollStatsViewTakeNoProtocolLock(t *testing.T) {
	for _, thr := range []Threading{ThreadingShared, ThreadingDedicated, ThreadingInvoked} {
		t.Run(thr.String(), func(t *testing.T) {
			ms := openGroup(t, 1, func(_ int, c *Config) { c.Agent.Threading = thr })
			m := ms[0]
			const n = 10
			for i := range n {
				require.NoError(t, m.TrySend(payloadOf(0, i, 100)))
			}
			// Wait until the protocol has delivered all ten into the
			// ring (its window of this member shows them delivered).
			deadline := time.Now().Add(30 * time.Second)
			for {
				s := m.Stats()
				if len(s.Senders) == 1 && s.Senders[0].Delivered == n {
					break
				}
				require.True(t, time.Now().Before(deadline), "not delivered into the ring: %+v", s.Senders)
				if thr == ThreadingInvoked {
					m.DoWork()
				}
				time.Sleep(time.Millisecond) // polling the agent's progress, not synchronisation
			}
			m.mu.Lock()
			done := make(chan Stats, 1)
			rec := newRecorder(n)
			go func() {
				got := 0
				for got < n {
					got += m.Poll(rec, n)
				}
				done <- m.Stats()
			}()
			var s Stats
			select {
			case s = <-done:
			case <-time.After(30 * time.Second):
				m.mu.Unlock()
				t.Fatal("Poll or Stats waited for the protocol lock")
			}
			id, members := m.View()
			m.mu.Unlock()
			require.Empty(t, rec.errs)
			require.Equal(t, n, rec.count[m.Self()])
			require.Equal(t, uint64(n), s.Sent)
			require.Equal(t, uint64(n), s.Delivered)
			require.Equal(t, []SenderWindow{{Member: m.Self(), Low: s.Senders[0].Low, Delivered: n, Received: n}}, s.Senders)
			require.Equal(t, s.View, id)
			require.Equal(t, s.Members, members)
			require.NotZero(t, id.Counter+uint64(len(members)))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, m.Close(ctx))
		})
	}
}
