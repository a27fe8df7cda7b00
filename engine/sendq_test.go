package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSendQueueSlots: what the agent polls is the payload itself, in the
// small arena, the inline arena or an out-of-line buffer; an empty payload
// is not an aborted claim; an aborted claim returns its buffer; a released
// large buffer is reused.
func TestSendQueueSlots(t *testing.T) {
	q, err := newSendQueue(8, 1024, false, func() {})
	require.NoError(t, err)
	sizes := []int{0, 64, 128, 129, 1024, 1025, 5000}
	for _, n := range sizes {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(n + i)
		}
		require.True(t, q.put(p))
	}
	seq, big, ok := q.claim(3000)
	require.True(t, ok)
	q.abort(seq, big)

	got := make([][]byte, 16)
	first, k := q.pub.Poll(got)
	require.Equal(t, uint64(1), first)
	require.Equal(t, len(sizes)+1, k)
	for i, n := range sizes {
		require.False(t, isAborted(got[i]), "size %d", n)
		require.Len(t, got[i], n)
		for j, b := range got[i] {
			require.Equal(t, byte(n+j), b)
		}
		require.Equal(t, n > 1024, q.isBig(got[i]), "size %d", n)
	}
	require.True(t, isAborted(got[len(sizes)]))
	require.False(t, isAborted(nil))
	require.False(t, isAborted(make([]byte, 0, 1)))

	// The aborted claim's 4 KiB buffer went back to its class: the next
	// claim of that class gets it.
	seq, again, ok := q.claim(2500)
	require.True(t, ok)
	require.Equal(t, &big[:1][0], &again[:1][0])
	q.commit(seq, again)

	// Releasing an inline payload is a no-op; a large one is reused.
	q.release(got[1])
	q.release(got[6])
	_, b, ok := q.claim(4097)
	require.True(t, ok)
	require.Equal(t, &got[6][:1][0], &b[:1][0])
	require.Len(t, b, 4097)
}
