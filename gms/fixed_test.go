package gms

import (
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/stretchr/testify/require"
)

// fixedListener records a Fixed's events.
type fixedListener struct {
	views []View
	lefts []error
}

func (l *fixedListener) ViewInstalled(v View)      { l.views = append(l.views, v) }
func (l *fixedListener) Left(err error)            { l.lefts = append(l.lefts, err) }
func (l *fixedListener) StateInstalled(error)      {}
func (l *fixedListener) Suspected(digest.Member)   {}
func (l *fixedListener) Unsuspected(digest.Member) {}

// TestFixedView: Join installs the fixed view with one protocol at once;
// Leave ends after the linger, at a Tick, with Left(nil); membership
// datagrams are refused; nothing is ever sent.
func TestFixedView(t *testing.T) {
	a, b := digest.Member{ID: 1, Inc: 1}, digest.Member{ID: 2, Inc: 1}
	view := View{ID: digest.ViewID{Coord: a, Counter: 1}, Members: []Peer{{Member: a}, {Member: b}}}
	var l fixedListener
	var fp *fakeProto
	f, err := NewFixed(FixedConfig{Self: b, View: view, Listener: &l, Linger: 30 * time.Millisecond,
		NewProtocol: func(self digest.Member, now time.Duration) (Protocol, error) {
			fp = newFakeProto(self, nil, now)
			return fp, nil
		}})
	require.NoError(t, err)
	require.Equal(t, StatusIdle, f.Status())
	require.ErrorIs(t, f.Leave(0), ErrNotMember)

	require.NoError(t, f.Join(5))
	require.Equal(t, StatusMember, f.Status())
	require.True(t, fp.view.Equal(view), "the protocol has the view")
	require.Equal(t, []View{view}, l.views)
	require.ErrorIs(t, f.Join(6), ErrBusy)
	require.Equal(t, Never, f.NextDeadline())
	require.ErrorIs(t, f.Receive([]byte{1, 2, 3}, 7), ErrFixedView)
	require.ErrorIs(t, f.RequestState(7), ErrNoState)

	require.NoError(t, f.Leave(10))
	require.Equal(t, StatusLeaving, f.Status())
	require.Equal(t, 10+30*time.Millisecond, f.NextDeadline())
	f.Tick(20)
	require.Empty(t, l.lefts, "still lingering")
	f.Tick(f.NextDeadline())
	require.Equal(t, []error{nil}, l.lefts)
	require.Equal(t, StatusIdle, f.Status())
	require.Nil(t, f.Protocol())
	require.Empty(t, f.Outbox())
	require.Equal(t, Stats{ViewsInstalled: 1, Refused: 1}, f.Stats())

	_, err = NewFixed(FixedConfig{Self: digest.Member{ID: 3, Inc: 1}, View: view, NewProtocol: func(digest.Member, time.Duration) (Protocol, error) { return nil, nil }})
	require.Error(t, err, "self outside the view")
}
