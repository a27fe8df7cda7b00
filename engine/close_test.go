package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCloseBoundedWhenPeersNeverRun: a member of a static group whose
// other member never runs cannot have its message stable; Close with
// context.Background() ends after Tuning.DrainTimeout with an error
// wrapping ErrDrainTimeout that names the sender and the seqnos not
// stable, instead of waiting for ever.
func TestCloseBoundedWhenPeersNeverRun(t *testing.T) {
	ids := testMembers(2)
	c := Config{Group: testGroup(), Self: ids[0], Logger: quietLogger(), Membership: MembershipConfig{Members: ids}}
	overMem(&c, none)
	c.Tuning.DrainTimeout = 50 * time.Millisecond
	m, err := Open(context.Background(), c)
	require.NoError(t, err)
	require.NoError(t, m.Send(context.Background(), []byte("never stable")))
	closed := make(chan error, 1)
	go func() { closed <- m.Close(context.Background()) }()
	select {
	case err = <-closed:
	case <-time.After(time.Minute):
		t.Fatal("Close did not return within a minute (Tuning.DrainTimeout 50ms)")
	}
	require.ErrorIs(t, err, ErrDrainTimeout)
	require.ErrorContains(t, err, "not stable: "+ids[0].String()+" seqnos 1..1")
}

// TestDrainTimeoutDefault: the bound docs/config.md states.
func TestDrainTimeoutDefault(t *testing.T) {
	c := Config{Group: testGroup(), Logger: quietLogger()}
	overMem(&c, none)
	m, err := Open(context.Background(), c)
	require.NoError(t, err)
	defer m.Close(context.Background())
	require.Equal(t, DefaultDrainTimeout, m.Config().Tuning.DrainTimeout)
	require.Equal(t, 5*time.Second, DefaultDrainTimeout)
}
