package engine

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/nakcast/nakcast/digest"
	"github.com/stretchr/testify/require"
)

// ringChecker is Poll's handler in TestDeliveryRing: every record must be
// the next one the producer wrote, intact.
type ringChecker struct {
	next uint64
	size func(uint64) int
	err  error
}

func (c *ringChecker) check(s digest.Member, seq uint64, payload []byte, lost bool) {
	if c.err != nil {
		return
	}
	want := c.next
	c.next++
	switch {
	case s != (digest.Member{ID: 7, Inc: 2}) || seq != want:
		c.err = fmt.Errorf("record %d: sender %v seq %d", want, s, seq)
	case lost != (want%97 == 0):
		c.err = fmt.Errorf("record %d: lost %v", want, lost)
	case !lost && (len(payload) != c.size(want) || !payloadOK(payload, want)):
		c.err = fmt.Errorf("record %d: payload of %d bytes, want %d, or content wrong", want, len(payload), c.size(want))
	}
}

func (c *ringChecker) Deliver(s digest.Member, seq uint64, p []byte) { c.check(s, seq, p, false) }
func (c *ringChecker) Lost(s digest.Member, from, to uint64) {
	c.check(s, from, nil, true)
	if to != from+5 {
		c.err = fmt.Errorf("record %d: lost range to %d", from, to)
	}
}

func fillRing(p []byte, i uint64) {
	for k := range p {
		p[k] = byte(i) ^ byte(k*31)
	}
}

func payloadOK(p []byte, i uint64) bool {
	for k := range p {
		if p[k] != byte(i)^byte(k*31) {
			return false
		}
	}
	return true
}

// TestDeliveryRing runs the delivery ring's two sides on two goroutines
// the way the agent and Poll do: the producer delivers batches as far as
// there is room (messages of 0 bytes to well above the ring's largest
// record, which go by reference to the spill, and lost ranges), moves
// what spilled on in later rounds; the consumer polls in batches. Every
// record arrives once, in order, intact.
func TestDeliveryRing(t *testing.T) {
	total := uint64(deliveryRingRecords)
	cfg := settings{}
	cfg.DeliverBatch, cfg.Window, cfg.InlineSize, cfg.MaxMessage = 64, 512, 1024, 1<<20 // 64 records
	d := newDelivery(&cfg)
	big := d.r.MaxRecord() + 1000
	size := func(i uint64) int {
		switch i % 13 {
		case 0:
			return big
		case 1:
			return 0
		}
		return int(i*7919) % 3000
	}
	src := digest.Member{ID: 7, Inc: 2}
	buf := make([]byte, big)
	done := make(chan struct{})
	go func() {
		defer close(done)
		rng := rand.New(rand.NewPCG(3, 4))
		for i := uint64(0); i < total; {
			d.begin()
			d.flush()
			if room := d.room(); d.idle() && room > 0 {
				for k := min(room, 1+rng.IntN(80)); k > 0 && i < total; k-- {
					if i%97 == 0 {
						d.Lost(src, i, i+5)
					} else {
						p := buf[:size(i)]
						fillRing(p, i)
						d.Deliver(src, i, p)
					}
					i++
				}
				d.flush()
			}
			d.r.Publish()
			if !d.idle() || d.room() == 0 {
				d.stall()
				for !d.progressed() {
					runtime.Gosched()
				}
			}
		}
		for !d.idle() {
			d.flush()
			d.r.Publish()
			runtime.Gosched()
		}
	}()
	c := &ringChecker{size: size}
	for c.next < total && c.err == nil {
		if d.poll(c, 1+int(c.next%50), func() {}) == 0 {
			runtime.Gosched()
		}
	}
	require.NoError(t, c.err)
	<-done // the agent has stopped, as Close's discard expects
	require.Zero(t, d.poll(c, 10, func() {}))
	require.Zero(t, d.discard())
}

// TestDeliveryStallAfterDrain: a part that moved a spilled message's
// reference into the ring keeps the spill until Poll has read it; when
// Poll reads it (and everything else) between the part's publication and
// its stall, no later Poll consumes anything to wake the agent, so the
// stall must see that progress or the agent waits for ever.
func TestDeliveryStallAfterDrain(t *testing.T) {
	cfg := settings{}
	cfg.DeliverBatch, cfg.Window, cfg.InlineSize, cfg.MaxMessage = 64, 512, 1024, 1<<20
	d := newDelivery(&cfg)
	src := digest.Member{ID: 7, Inc: 2}
	big := make([]byte, d.r.MaxRecord()+1000)
	d.begin()
	d.Deliver(src, 1, big) // above the largest record: spilled, lent by reference
	require.Equal(t, 1, d.flush())
	d.r.Publish()
	var got []uint64
	h := HandlerFunc(func(_ digest.Member, seq uint64, p []byte) {
		require.Len(t, p, len(big))
		got = append(got, seq)
	})
	woken := 0
	require.Equal(t, 1, d.poll(h, 10, func() { woken++ })) // Poll drains the ring
	require.False(t, d.idle(), "the spill is kept until the part looks again")
	d.stall()
	require.True(t, d.progressed(), "Poll consumed after the part began: the agent must not block")
	require.Zero(t, woken, "nobody had stalled when Poll ran")
	d.begin() // the next part
	d.flush()
	require.True(t, d.idle())
	require.Equal(t, []uint64{1}, got)
}

// TestDeliveryRingSize: the ring holds Window/8 records in a buffer sized
// for that many messages of the inline size, within 4 KiB..2 MiB.
func TestDeliveryRingSize(t *testing.T) {
	for _, tc := range []struct {
		batch, window, inline, maxMsg int
		recs, bytes                   int
	}{
		{DefaultDeliverBatch, DefaultWindow, DefaultInlineSize, DefaultMaxMessage, DefaultWindow / 8, 2 << 20},
		{DefaultDeliverBatch, 256, DefaultInlineSize, DefaultMaxMessage, 32, 64 << 10},
		{DefaultDeliverBatch, 8, 16, 16, 1, 4096},
		{MaxDeliverBatch, MaxWindow, MaxInlineSize, DefaultMaxMessage, MaxWindow / 8, 2 << 20},
	} {
		cfg := settings{}
		cfg.DeliverBatch, cfg.Window, cfg.InlineSize, cfg.MaxMessage = tc.batch, tc.window, tc.inline, tc.maxMsg
		d := newDelivery(&cfg)
		require.Equal(t, uint64(tc.recs), d.maxRecs, "%+v", tc)
		require.Equal(t, tc.bytes, d.r.Capacity(), "%+v", tc)
	}
}

// TestDeliverySupersede: records written before an exclusion with
// FetchState, in the ring and in the spill, are dropped by Poll and
// counted; those written after it (the rejoined incarnation's) are handed
// over in order.
func TestDeliverySupersede(t *testing.T) {
	cfg := settings{}
	cfg.DeliverBatch, cfg.Window, cfg.InlineSize, cfg.MaxMessage = 64, 512, 1024, 1<<20 // 64 records
	d := newDelivery(&cfg)
	src := digest.Member{ID: 7, Inc: 2}
	p := make([]byte, 100)
	for i := range uint64(70) { // 64 in the ring, 6 spilled
		d.Deliver(src, i+1, p)
	}
	d.Lost(src, 71, 72)
	d.r.Publish()
	require.False(t, d.idle(), "some records are spilled")
	d.supersede()
	d.Deliver(src, 1, p) // the new incarnation's first delivery waits behind the spill
	d.Deliver(src, 2, p)
	var got []uint64
	h := HandlerFunc(func(_ digest.Member, seq uint64, _ []byte) { got = append(got, seq) })
	for range 10 {
		d.poll(h, 50, func() {})
		d.flush()
		d.r.Publish()
	}
	require.Equal(t, []uint64{1, 2}, got)
	require.Equal(t, uint64(71), d.superseded.Load())
}
