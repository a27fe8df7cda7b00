package sim

import (
	"encoding/binary"
	"hash/fnv"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/stretchr/testify/require"
)

// pinger is a toy node: every period it multicasts a counter; it records
// what it receives.
type pinger struct {
	m        digest.Member
	period   time.Duration
	next     time.Duration
	count    uint64
	limit    uint64
	out      [][]byte
	received []uint64 // counters received, in arrival order
	froms    []digest.Member
	ticks    []time.Duration
	spin     bool
}

func (p *pinger) Member() digest.Member { return p.m }
func (p *pinger) Receive(from digest.Member, b []byte, now time.Duration) {
	p.received = append(p.received, binary.LittleEndian.Uint64(b))
	p.froms = append(p.froms, from)
}
func (p *pinger) Tick(now time.Duration) {
	p.ticks = append(p.ticks, now)
	if p.spin {
		return
	}
	for p.next <= now && p.count < p.limit {
		p.count++
		p.out = append(p.out, binary.LittleEndian.AppendUint64(nil, p.count))
		p.next += p.period
	}
}
func (p *pinger) NextDeadline() time.Duration {
	if p.spin {
		return p.next
	}
	if p.count >= p.limit {
		return Never
	}
	return p.next
}
func (p *pinger) Drain(send func(digest.Member, []byte)) {
	for _, b := range p.out {
		send(digest.Member{}, b)
	}
	p.out = p.out[:0]
}

func member(i int) digest.Member { return digest.Member{ID: uint64(i), Inc: 1} }

// count returns how many of p's counters came from from.
func count(p *pinger, from digest.Member) int {
	n := 0
	for _, f := range p.froms {
		if f == from {
			n++
		}
	}
	return n
}

func newPingers(t *testing.T, s *Sim, n int, limit uint64) []*pinger {
	ps := make([]*pinger, n)
	for i := range ps {
		ps[i] = &pinger{m: member(i + 1), period: time.Millisecond, next: time.Millisecond, limit: limit}
		require.NoError(t, s.AddNode(ps[i]))
	}
	return ps
}

// trace runs a small lossy network and returns a hash of every tap event.
func trace(t *testing.T, seed uint64) (uint64, NetStats) {
	s := New(seed, NetConfig{Jitter: 200 * time.Microsecond, SharedLoss: 0.1, Loss: 0.1, Duplicate: 0.1, Reorder: 0.1})
	h := fnv.New64a()
	s.AddTap(func(ev TapEvent) {
		var b [8 * 4]byte
		binary.LittleEndian.PutUint64(b[0:], uint64(ev.Kind))
		binary.LittleEndian.PutUint64(b[8:], uint64(ev.At))
		binary.LittleEndian.PutUint64(b[16:], ev.From.ID<<32|ev.To.ID)
		binary.LittleEndian.PutUint64(b[24:], binary.LittleEndian.Uint64(ev.Data))
		h.Write(b[:])
	})
	newPingers(t, s, 4, 50)
	require.NoError(t, s.RunUntil(time.Second))
	return h.Sum64(), s.NetStats()
}

func TestQueueOrdersByTimeThenInsertion(t *testing.T) {
	var q eventQueue
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 1000 {
		q.push(event{at: time.Duration(rng.IntN(20)), gen: uint64(i)})
	}
	var last event
	for i := 0; q.Len() > 0; i++ {
		e := q.pop()
		if i > 0 {
			require.True(t, less(&last, &e), "event %d out of order", i)
			if last.at == e.at {
				require.Less(t, last.gen, e.gen, "ties must pop in insertion order")
			}
		}
		last = e
	}
}

func TestSameSeedReplaysIdentically(t *testing.T) {
	a, sa := trace(t, 42)
	b, sb := trace(t, 42)
	require.Equal(t, a, b)
	require.Equal(t, sa, sb)
	c, _ := trace(t, 43)
	require.NotEqual(t, a, c)
}

func TestNetworkLossAndDuplicationRates(t *testing.T) {
	cfg := NetConfig{SharedLoss: 0.2, Loss: 0.1, Duplicate: 0.05}
	s := New(7, cfg)
	newPingers(t, s, 5, 2000)
	require.NoError(t, s.RunUntil(3*time.Second))
	st := s.NetStats()
	require.EqualValues(t, 5*2000, st.Sent)
	require.InDelta(t, 0.2, float64(st.SharedDrops)/float64(st.Sent), 0.02)
	copies := float64(st.Sent-st.SharedDrops) * 4
	require.InDelta(t, 0.1, float64(st.Drops)/copies, 0.02)
	require.InDelta(t, 0.05, float64(st.Duplicates)/(copies-float64(st.Drops)), 0.02)
	require.Equal(t, copies-float64(st.Drops)+float64(st.Duplicates), float64(st.Delivered))
}

func TestMulticastLoopbackAndDelay(t *testing.T) {
	for _, tc := range []struct {
		name     string
		loopback bool
		perNode  int
	}{
		{"no loopback: others only", false, 2 * 3},
		{"loopback: self too", true, 3 * 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(1, NetConfig{Latency: 100 * time.Microsecond, Loopback: tc.loopback})
			var at []time.Duration
			s.AddTap(func(ev TapEvent) {
				if ev.Kind == TapDeliver {
					at = append(at, ev.At)
				}
			})
			ps := newPingers(t, s, 3, 3)
			require.NoError(t, s.RunUntil(time.Second))
			for _, p := range ps {
				require.Len(t, p.received, tc.perNode)
				if !tc.loopback {
					require.NotContains(t, p.froms, p.m)
				}
			}
			for _, a := range at {
				require.Equal(t, 100*time.Microsecond, a%time.Millisecond, "no jitter: exactly the base latency after the send")
			}
		})
	}
}

func TestJitterReordersWithinBound(t *testing.T) {
	s := New(3, NetConfig{Latency: 50 * time.Microsecond, Jitter: 5 * time.Millisecond})
	var maxDelay time.Duration
	s.AddTap(func(ev TapEvent) {
		if ev.Kind == TapDeliver {
			sent := time.Duration(binary.LittleEndian.Uint64(ev.Data)) * time.Millisecond
			maxDelay = max(maxDelay, ev.At-sent)
		}
	})
	ps := newPingers(t, s, 2, 200)
	require.NoError(t, s.RunUntil(time.Second))
	inversions := 0
	for i := 1; i < len(ps[1].received); i++ {
		if ps[1].received[i] < ps[1].received[i-1] {
			inversions++
		}
	}
	require.Len(t, ps[1].received, 200)
	require.Positive(t, inversions)
	require.Less(t, maxDelay, 50*time.Microsecond+5*time.Millisecond)
}

func TestPartitionDropsUntilHeal(t *testing.T) {
	s := New(5, NetConfig{})
	ps := newPingers(t, s, 4, 100)
	// {1,2} | {3,4} from 10ms (inclusive of sends at 10ms) until 50ms.
	s.Partition(10*time.Millisecond-time.Nanosecond, 50*time.Millisecond-time.Nanosecond,
		[]digest.Member{member(1), member(2)}, []digest.Member{member(3), member(4)})
	require.NoError(t, s.RunUntil(time.Second))
	require.Equal(t, 100, count(ps[0], member(2)), "same side")
	require.Equal(t, 100-40, count(ps[0], member(3)), "other side: counters 10..49 dropped")
	require.Equal(t, 100-40, count(ps[3], member(1)))
	require.False(t, s.Partitioned())
}

func TestCrashStopsNode(t *testing.T) {
	s := New(5, NetConfig{})
	ps := newPingers(t, s, 3, 100)
	s.Schedule(20*time.Millisecond+time.Nanosecond, func(time.Duration) { s.Crash(member(3)) })
	require.NoError(t, s.RunUntil(time.Second))
	require.EqualValues(t, 20, ps[2].count)
	require.Len(t, ps[2].received, 2*19, "the 20ms counters were in flight at the crash")
	require.False(t, s.Up(member(3)))
}

func TestTimersFireAtDeadlines(t *testing.T) {
	s := New(1, NetConfig{})
	ps := newPingers(t, s, 1, 5)
	require.NoError(t, s.RunUntil(time.Second))
	require.Equal(t, []time.Duration{1e6, 2e6, 3e6, 4e6, 5e6}, ps[0].ticks)
}

func TestSpinningNodeFails(t *testing.T) {
	s := New(9, NetConfig{})
	require.NoError(t, s.AddNode(&pinger{m: member(1), next: time.Millisecond, spin: true}))
	err := s.RunUntil(time.Second)
	require.ErrorContains(t, err, "deadline does not advance")
	require.ErrorContains(t, err, "seed 9")
}

func TestAddNodeRejectsDuplicatesAndZero(t *testing.T) {
	s := New(1, NetConfig{})
	require.NoError(t, s.AddNode(&pinger{m: member(1), limit: 0}))
	require.Error(t, s.AddNode(&pinger{m: member(1)}))
	require.Error(t, s.AddNode(&pinger{}))
}

func TestRecorderInvariants(t *testing.T) {
	a := member(1)
	payload := func(i int) []byte { return []byte{byte(i), 1, 2, 3, 4, 5, 6, 7} }
	type op struct {
		lost     bool
		seq, to  uint64
		payloadN int
	}
	for _, tc := range []struct {
		name    string
		ops     []op
		wantErr string
	}{
		{"in order", []op{{seq: 1, payloadN: 1}, {seq: 2, payloadN: 2}, {seq: 3, payloadN: 3}}, ""},
		{"lost range covers gap", []op{{seq: 1, payloadN: 1}, {lost: true, seq: 2, to: 2}, {seq: 3, payloadN: 3}}, ""},
		{"duplicate", []op{{seq: 1, payloadN: 1}, {seq: 1, payloadN: 1}}, "delivered again"},
		{"gap", []op{{seq: 1, payloadN: 1}, {seq: 3, payloadN: 3}}, "neither delivered nor reported lost"},
		{"wrong payload", []op{{seq: 1, payloadN: 2}}, "not the one sent"},
		{"never sent", []op{{seq: 1, payloadN: 1}, {seq: 2, payloadN: 2}, {seq: 3, payloadN: 3}, {seq: 4, payloadN: 4}}, "no message was sent"},
		{"lost range not at next", []op{{lost: true, seq: 2, to: 3}}, "does not start"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(1, NetConfig{})
			l := NewLedger()
			for i := 1; i <= 3; i++ {
				require.NoError(t, l.Record(a, uint64(i), uint64(i), payload(i)))
			}
			r := NewRecorder(s, member(2), l)
			for _, o := range tc.ops {
				if o.lost {
					r.Lost(a, o.seq, o.to)
				} else {
					r.Deliver(a, o.seq, payload(o.payloadN))
				}
			}
			if tc.wantErr == "" {
				require.NoError(t, s.Err())
				require.True(t, r.Complete())
				require.NoError(t, r.CheckComplete())
				return
			}
			require.ErrorContains(t, s.Err(), tc.wantErr)
		})
	}
}

func TestLedgerRejectsHoles(t *testing.T) {
	l := NewLedger()
	require.NoError(t, l.Record(member(1), 1, 1, []byte("x")))
	require.NoError(t, l.Record(member(1), 2, 4, []byte("fragmented")))
	require.Error(t, l.Record(member(1), 6, 6, []byte("x")))
	require.Error(t, l.Record(member(1), 5, 4, []byte("x")))
	require.EqualValues(t, 4, l.Highest(member(1)))
	require.Equal(t, 2, l.Total())
}

// TestBlockOneWay: a blocked direction drops only its kind of datagram
// (here multicast from 1 to 2), the other direction still flows, and
// lifting the block restores it.
func TestBlockOneWay(t *testing.T) {
	s := New(5, NetConfig{})
	ps := newPingers(t, s, 3, 20)
	require.NoError(t, s.Block(member(1), member(2), BlockMulticast))
	require.Error(t, s.Block(member(1), member(9), BlockUnicast))
	s.Schedule(10*time.Millisecond+time.Nanosecond, func(time.Duration) {
		require.NoError(t, s.Block(member(1), member(2), 0))
	})
	require.NoError(t, s.RunUntil(time.Second))
	require.Equal(t, 10, count(ps[1], member(1)), "1's counters 1..10 blocked to 2, then it flows")
	require.Equal(t, 20, count(ps[0], member(2)), "the reverse direction flows")
	require.Equal(t, 20, count(ps[2], member(1)), "other links flow")
}
