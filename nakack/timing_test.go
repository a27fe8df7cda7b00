package nakack

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// TestScaledJitter: the NAK jitter is NakJitter scaled to the view: none
// with a single receiver, in proportion to the other receivers below
// NakJitterPeers, all of it from there on up to jitterViewBase receivers,
// growing like ln(receivers)+1 beyond; always all of it when
// NakJitterPeers < 0.
func TestScaledJitter(t *testing.T) {
	c := Config{NakJitter: 8 * time.Millisecond, NakJitterPeers: 4}
	for n, want := range map[int]time.Duration{0: 0, 1: 0, 2: 0, 3: 2 * time.Millisecond, 4: 4 * time.Millisecond,
		5: 6 * time.Millisecond, 6: 8 * time.Millisecond, 17: 8 * time.Millisecond} {
		require.Equal(t, want, scaledJitter(&c, n), "n=%d", n)
	}
	grow := func(r float64) time.Duration {
		return time.Duration(8e6 * (math.Log(r) + 1) / (math.Log(jitterViewBase) + 1))
	}
	require.Equal(t, grow(99), scaledJitter(&c, 100))
	require.InDelta(t, 2.1*8e6, float64(scaledJitter(&c, 1001)), 0.1*8e6)
	c.NakJitterPeers = -1
	require.Equal(t, 8*time.Millisecond, scaledJitter(&c, 2))
	require.Equal(t, 8*time.Millisecond, scaledJitter(&c, 1001))
	d := Config{Self: mA, Pool: wire.NewPool(1400, 0)}
	require.NoError(t, d.setDefaults())
	require.Equal(t, 2, d.NakJitterPeers)
	require.Equal(t, time.Duration(0), scaledJitter(&d, 2))
	require.Equal(t, d.NakJitter/2, scaledJitter(&d, 3))
	require.Equal(t, d.NakJitter, scaledJitter(&d, 4))
}

// firstRequestDelay has sender A send three datagrams, the second lost at
// member B, and returns how long after the third's arrival B's first
// XMIT_REQ went out.
func firstRequestDelay(t *testing.T, seed uint64, members ...digest.Member) time.Duration {
	c := newCluster(t, func(cfg *Config) {
		cfg.NakJitter = 4 * time.Millisecond
		cfg.Seed = seed
	}, members...)
	lost := func(d dgram, to digest.Member) bool {
		if to != mB || d.typ != wire.TypeData {
			return false
		}
		_, first, _ := dataRange(t, d)
		return first == 2
	}
	c.deliver(c.send(mA, true, "a1", "a2", "a3"), lost)
	start := c.now
	for c.now < start+time.Second {
		next := c.p(mB).NextDeadline()
		require.NotEqual(t, NoDeadline, next)
		c.now = next
		c.p(mB).Tick(c.now)
		if len(xmitRanges(t, c.take(), mA)) > 0 {
			return c.now - start
		}
	}
	t.Fatal("no request")
	return 0
}

// TestLoneReceiverRequestsAfterNakDelay: in a view of two the first request
// for a gap goes exactly NakDelay after the gap is seen (no jitter: nobody
// to suppress); in a view of four it is spread over NakJitter as before.
func TestLoneReceiverRequestsAfterNakDelay(t *testing.T) {
	spread := false
	for seed := range uint64(8) {
		require.Equal(t, 2*time.Millisecond, firstRequestDelay(t, seed, mA, mB), "seed %d", seed)
		d := firstRequestDelay(t, seed, mA, mB, mC, mD)
		require.GreaterOrEqual(t, d, 2*time.Millisecond)
		require.Less(t, d, 6*time.Millisecond)
		spread = spread || d > 2*time.Millisecond
	}
	require.True(t, spread, "a view of four draws jitter")
}

// TestStableAfterRepairReportsReleased: a STABLE made due by the messages a
// repair releases waits for their delivery and reports it, so the sender
// purges what the gap held back at once, not at the receiver's next
// StableInterval (an hour here) or after StableBytes more data.
func TestStableAfterRepairReportsReleased(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.StableBytes = 4000 }, mA, mB)
	payload := strings.Repeat("x", 1000)
	once := true
	lose2 := func(d dgram, to digest.Member) bool {
		if to != mB || d.typ != wire.TypeData || !once {
			return false
		}
		if _, first, _ := dataRange(t, d); first == 2 {
			once = false
			return true
		}
		return false
	}
	ps := make([]string, 10)
	for i := range ps {
		ps[i] = payload
	}
	c.deliver(c.send(mA, true, ps...), lose2)
	c.run(c.now+time.Millisecond, nil) // less than NakDelay: no request yet
	low := func() uint64 { e, _ := c.p(mA).WindowState(mA); return e.Low }
	require.Equal(t, uint64(1), low(), "the STABLE due before the repair reports delivered 1")
	require.Equal(t, uint64(1), c.p(mB).Stats().StableSent)
	stables := c.p(mB).Stats().StableSent
	// The repair: NakDelay, then the request and the answer.
	c.run(c.now+5*time.Millisecond, nil)
	require.Equal(t, span(1, 10), c.rec(mB).seqs(mA))
	require.Equal(t, stables+1, c.p(mB).Stats().StableSent, "one STABLE, after the delivery")
	require.Equal(t, uint64(10), low(), "purged to what the repair released")
	require.Zero(t, c.p(mB).Stats().Drops.WrongView)
}

// TestScaledRetry: the first retry interval and the repair linger scale
// with the view like the jitter: a quarter of NakInterval in a view of
// two, with a linger of half that interval (at most RepairLinger), half of
// both in a view of three (NakJitterPeers 2), the whole from four members
// on; NakJitterPeers -1 keeps the whole.
func TestScaledRetry(t *testing.T) {
	c := Config{NakInterval: 20 * time.Millisecond, RepairLinger: 8 * time.Millisecond, NakJitterPeers: 2}
	for n, want := range map[int][2]time.Duration{
		0: {5 * time.Millisecond, 2500 * time.Microsecond}, 2: {5 * time.Millisecond, 2500 * time.Microsecond},
		3: {10 * time.Millisecond, 4 * time.Millisecond},
		4: {20 * time.Millisecond, 8 * time.Millisecond}, 50: {20 * time.Millisecond, 8 * time.Millisecond},
	} {
		iv, lg := scaledRetry(&c, n)
		require.Equal(t, want, [2]time.Duration{iv, lg}, "n=%d", n)
	}
	c.NakJitterPeers = -1
	iv, lg := scaledRetry(&c, 2)
	require.Equal(t, [2]time.Duration{20 * time.Millisecond, 8 * time.Millisecond}, [2]time.Duration{iv, lg})
	c.NakJitterPeers, c.RepairLinger = 2, time.Millisecond
	iv, lg = scaledRetry(&c, 2)
	require.Equal(t, [2]time.Duration{5 * time.Millisecond, time.Millisecond}, [2]time.Duration{iv, lg}, "at most RepairLinger")
	c.RepairLinger = 0
	_, lg = scaledRetry(&c, 2)
	require.Zero(t, lg, "no linger configured, none in a view of two")
}

// TestLoneReceiverDuplicatedRequest: in a view of two, a copy of the lone
// receiver's request that the network duplicated or delayed, arriving
// after the sender answered the original, is not answered again (it would
// repair what was just repaired, after the receiver may have delivered
// it); the receiver's retry a retry interval after its request still is.
func TestLoneReceiverDuplicatedRequest(t *testing.T) {
	c := newCluster(t, func(cfg *Config) {
		cfg.NakInterval, cfg.RepairLinger = 20*time.Millisecond, 5*time.Millisecond
	}, mA, mB)
	ds := c.send(mA, true, "a1", "a2", "a3")
	c.deliverTo(ds[0], mB)
	c.deliverTo(ds[2], mB)
	b := c.p(mB)
	c.now = b.NextDeadline()
	b.Tick(c.now)
	req := c.take()
	require.Equal(t, []wire.Range{rg(2, 2)}, xmitRanges(t, req, mA))
	c.deliver(req, nil) // to A: B sent it
	require.Len(t, ofType(c.take(), wire.TypeData), 1, "the sender answers the request")
	c.now += time.Millisecond // the network's copy of the same request
	c.deliver(req, nil)
	require.Empty(t, ofType(c.take(), wire.TypeData), "a copy of the request answered again")
	require.Equal(t, uint64(1), c.p(mA).Stats().RepairsSkipped)
	// The repair was lost: the receiver's retry is answered.
	c.now = b.NextDeadline()
	b.Tick(c.now)
	retry := c.take()
	require.Equal(t, []wire.Range{rg(2, 2)}, xmitRanges(t, retry, mA))
	c.deliver(retry, nil)
	rep := ofType(c.take(), wire.TypeData)
	require.Len(t, rep, 1, "the sender answers the retry")
	c.deliverTo(rep[0], mB)
	require.Equal(t, uint64(3), b.Stats().Received)
}

// TestLoneReceiverRetriesLostRepair: in a view of two, a gap whose repair
// is lost is asked for again NakInterval/4 after the first request, and the
// sender answers the repeat (no linger), so the repair completes within
// NakDelay + NakInterval/4 of the loss plus delivery.
func TestLoneReceiverRetriesLostRepair(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.NakInterval = 20 * time.Millisecond }, mA, mB)
	ds := c.send(mA, true, "a1", "a2", "a3")
	c.deliverTo(ds[0], mB)
	c.deliverTo(ds[2], mB)
	b := c.p(mB)
	var reqs []time.Duration
	for range 2 {
		c.now = b.NextDeadline()
		b.Tick(c.now)
		out := c.take()
		require.Len(t, xmitRanges(t, out, mA), 1)
		reqs = append(reqs, c.now)
		for _, d := range out {
			c.deliverTo(d, mA) // the sender repairs; the repair is lost (not delivered to B)
		}
		rep := ofType(c.take(), wire.TypeData)
		require.Len(t, rep, 1, "the sender answers request %d", len(reqs))
		if len(reqs) == 2 {
			c.deliverTo(rep[0], mB)
		}
	}
	require.Equal(t, 5*time.Millisecond, reqs[1]-reqs[0])
	require.Equal(t, uint64(3), b.Stats().Received)
	require.False(t, b.senders[mA].armed)
}
