package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine/transport"
	"github.com/nakcast/nakcast/wire"
)

// TestSenderDoesNotReadOwnData checks the group socket's kernel filter: a
// sender's own data datagrams never reach its agent (the protocol would
// count them as Drops.Self), while the other member gets every message.
func TestSenderDoesNotReadOwnData(t *testing.T) {
	const n = 2000
	rec := newRecorder(n)
	ms := openGroup(t, 2, func(i int, c *Config) {
		if i == 1 {
			c.Handler = rec
		}
	})
	sendAndWait(t, ms[0], rec, n)
	s := ms[0].Stats()
	require.Positive(t, s.Bundles)
	require.Zero(t, s.Drops.Self, "the sender read its own data datagrams")
}

// TestSelfFilterFollowsIncarnation checks selfFilter on a real group socket
// whose filter is replaced, as newProtocol does for a new incarnation: the
// new incarnation's protocol datagrams (DATA, FRAG, HIGHEST, CHALLENGE,
// ECHO) are dropped in the kernel; the old incarnation's, another member's,
// and the new incarnation's wire HEARTBEAT and membership datagrams pass.
func TestSelfFilterFollowsIncarnation(t *testing.T) {
	const gid = 7
	old := digest.Member{ID: 0x1122334455667788, Inc: 1}
	cur := digest.Member{ID: old.ID, Inc: 2}
	other := digest.Member{ID: 0x99, Inc: 2}
	u, err := transport.Open(transport.Config{Group: testGroup(), BatchSize: 16, GroupFilter: selfFilter(old)})
	require.NoError(t, err)
	defer u.Close()
	plain, err := transport.Open(transport.Config{Group: u.Group(), BatchSize: 16})
	require.NoError(t, err)
	defer plain.Close()
	require.NoError(t, u.SetGroupFilter(selfFilter(cur)))

	data := func(from digest.Member, seq uint64) []byte {
		var w wire.DataWriter
		require.NoError(t, w.Reset(make([]byte, 256), wire.Header{Group: gid, Sender: from}, from, seq))
		require.True(t, w.Append([]byte("payload")))
		return w.Finish()
	}
	frag := func(from digest.Member) []byte {
		d, err := wire.EncodeFrag(make([]byte, 256), wire.Header{Group: gid, Sender: from},
			wire.Frag{Origin: from, Seq: 1, Count: 2, Total: 8, Payload: []byte("half")})
		require.NoError(t, err)
		return d
	}
	beat := func(from digest.Member) []byte {
		d, err := wire.EncodeHeartbeat(make([]byte, 256), wire.Header{Group: gid, Sender: from}, wire.Heartbeat{})
		require.NoError(t, err)
		return d
	}
	highest := func(from digest.Member) []byte {
		d, err := wire.EncodeHighest(make([]byte, 256), wire.Header{Group: gid, Sender: from}, wire.Highest{Low: 1, Highest: 5})
		require.NoError(t, err)
		return d
	}
	challenge := func(from digest.Member, typ wire.Type) []byte {
		d, err := wire.EncodeChallenge(make([]byte, 256), wire.Header{Group: gid, Sender: from}, typ, digest.ViewID{}, other, 7,
			wire.ChallengeAddress, wire.RangeSlice(nil))
		require.NoError(t, err)
		return d
	}
	membership := func(from digest.Member) []byte {
		d := data(from, 1)
		d[2] = 22 // a gms type (heartbeat): the filter looks at the type byte only
		return d
	}
	type dg struct {
		name string
		b    []byte
		pass bool
	}
	dgs := []dg{
		{"new incarnation DATA", data(cur, 1), false},
		{"old incarnation DATA", data(old, 1), true},
		{"new incarnation FRAG", frag(cur), false},
		{"other member DATA", data(other, 1), true},
		{"old incarnation FRAG", frag(old), true},
		{"new incarnation HEARTBEAT", beat(cur), true},
		{"other member FRAG", frag(other), true},
		{"new incarnation HIGHEST", highest(cur), false},
		{"old incarnation HIGHEST", highest(old), true},
		{"new incarnation membership datagram", membership(cur), true},
		{"other member HIGHEST", highest(other), true},
		{"new incarnation CHALLENGE", challenge(cur, wire.TypeChallenge), false},
		{"new incarnation ECHO", challenge(cur, wire.TypeEcho), false},
		{"other member CHALLENGE", challenge(other, wire.TypeChallenge), true},
	}
	bufs := make([][]byte, len(dgs))
	var want []string
	for i, d := range dgs {
		bufs[i] = d.b
		if d.pass {
			want = append(want, string(d.b))
		}
	}
	n, err := u.WriteBatch(bufs, nil)
	require.NoError(t, err)
	require.Equal(t, len(bufs), n)
	// The unfiltered socket gets every datagram; by then the filtered one
	// has all it will get.
	read := func(tr *transport.UDP, block bool) []string {
		rb := make([][]byte, 16)
		for i := range rb {
			rb[i] = make([]byte, 512)
		}
		sizes := make([]int, len(rb))
		var got []string
		for {
			var k int
			if block {
				require.NoError(t, tr.SetReadDeadline(time.Now().Add(10*time.Second)))
				k, err = tr.ReadBatch(rb, sizes, nil)
			} else {
				k, err = tr.TryReadBatch(rb, sizes, nil)
			}
			require.NoError(t, err)
			for i := range k {
				got = append(got, string(rb[i][:sizes[i]]))
			}
			if k == 0 || (block && len(got) >= len(dgs)) {
				return got
			}
		}
	}
	require.Len(t, read(plain, true), len(dgs))
	got := read(u, false)
	for _, d := range dgs {
		require.Equal(t, d.pass, slices.Contains(got, string(d.b)), "%s: passed", d.name)
	}
	require.Equal(t, want, got, "in order")
}
