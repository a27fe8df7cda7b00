package engine

import (
	"context"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine/transport/memtransport"
	"github.com/stretchr/testify/require"
)

// TestSteppedStaticGroup: two stepped members of a fixed view on an
// in-memory network, on a clock the test advances: no goroutine runs
// them, and each delivers the other's messages in order.
func TestSteppedStaticGroup(t *testing.T) {
	var now time.Duration
	clock := func() time.Duration { return now }
	net := memtransport.NewNetwork()
	g, ids := testGroup(), testMembers(2)
	recs := []*recorder{newRecorder(-1), newRecorder(-1)}
	var ms []*Member
	for i, self := range ids {
		c := Config{Group: g, Self: self, Logger: quietLogger(), Handler: recs[i],
			Membership: MembershipConfig{Members: ids}}
		c.Transport.Open = net.Open
		m, err := OpenStepped(c, Stepping{Now: clock, Seed: uint64(i)})
		require.NoError(t, err)
		t.Cleanup(func() { m.abort() })
		ms = append(ms, m)
	}
	const n = 50
	for k := range n {
		for _, m := range ms {
			require.NoError(t, m.TrySend([]byte{byte(k)}))
		}
	}
	for now = 0; now < 5*time.Second; now += time.Millisecond {
		for _, m := range ms {
			_, _, err := m.Step()
			require.NoError(t, err)
		}
		if recs[0].delivered(ids[1]) == n && recs[1].delivered(ids[0]) == n {
			require.Empty(t, recs[0].errs)
			require.Empty(t, recs[1].errs)
			return
		}
	}
	t.Fatalf("not delivered by 5s of the test's clock: %d, %d", recs[0].delivered(ids[1]), recs[1].delivered(ids[0]))
}

func (r *recorder) delivered(s digest.Member) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[s]
}

// TestSteppedRefusals: OpenStepped needs a clock; Step needs a stepped
// member.
func TestSteppedRefusals(t *testing.T) {
	_, err := OpenStepped(Config{Group: testGroup()}, Stepping{})
	require.ErrorIs(t, err, ErrInvalidConfig)
	ids := testMembers(1)
	c := Config{Group: testGroup(), Self: ids[0], Logger: quietLogger(), Membership: MembershipConfig{Members: ids}}
	c.Transport.Open = memtransport.NewNetwork().Open
	m, err := Open(context.Background(), c)
	require.NoError(t, err)
	defer m.Close(context.Background())
	_, _, err = m.Step()
	require.ErrorIs(t, err, ErrNotStepped)
	require.ErrorIs(t, m.StepClose(), ErrNotStepped)
	require.False(t, m.StepClosed())
}
