package nakack

import (
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// creditSender is B in view {B, A, C}, holding its own 1..n (none purged),
// with RepairRatio ratio and RepairBurst burst and no linger (a repeat
// request is served again at once: the worst case for amplification).
func creditSender(t *testing.T, n, ratio, burst int) (*Protocol, *wire.Pool, View) {
	pool := wire.NewPool(1400, 0)
	cfg := testConfig(mB)
	cfg.Pool = pool
	cfg.SendWindow, cfg.RecvWindow = 4096, 4096
	cfg.RepairLinger = -1
	cfg.RepairBudget = 1 << 30
	cfg.RepairRatio, cfg.RepairBurst = ratio, burst
	b, err := New(cfg)
	require.NoError(t, err)
	v := View{ID: digest.ViewID{Coord: mB, Counter: 1}, Members: []digest.Member{mB, mA, mC}}
	b.InstallView(v, digest.Digest{}, 0)
	msg := make([]byte, 100)
	for range n {
		_, err := b.Send(msg, 0)
		require.NoError(t, err)
	}
	b.Flush(0)
	drainOutbox(b)
	return b, pool, v
}

func drainOutbox(p *Protocol) (bytes int) {
	for _, o := range p.Outbox() {
		bytes += o.Buf.N
		o.Buf.Release()
	}
	p.ClearOutbox()
	return bytes
}

// request returns an XMIT_REQ from requester for B's ranges.
func request(t *testing.T, pool *wire.Pool, v View, requester digest.Member, ranges ...wire.Range) *wire.Buffer {
	b := pool.Get(1400)
	d, err := wire.EncodeXmitReq(b.B, wire.Header{Group: testGroup, Sender: requester}, v.ID, mB, 0, ranges)
	require.NoError(t, err)
	b.N = len(d)
	return b
}

// TestRepairCreditBound: a member that floods B with requests for its
// whole window (as a stranger spoofing that member's address would) makes
// B repair at most RepairRatio times the request bytes plus RepairBurst;
// another member's credit is its own, so its requests are served in full.
func TestRepairCreditBound(t *testing.T) {
	const ratio, burst = 16, 32 << 10
	b, pool, v := creditSender(t, 2000, ratio, burst)
	now := time.Duration(0)
	sent := 0
	for range 200 {
		now += time.Millisecond
		req := request(t, pool, v, mA, rg(1, 2000))
		require.NoError(t, b.Receive(req, now))
		req.Release()
		sent += drainOutbox(b)
	}
	st := b.Stats()
	require.Equal(t, uint64(sent), st.RepairBytes, "RepairBytes counts every repair datagram byte")
	require.LessOrEqual(t, st.RepairBytes, ratio*st.NakBytes+burst, "the stated bound")
	require.Greater(t, st.RepairBytes, ratio*st.NakBytes, "the burst was used")
	require.Positive(t, st.RepairsOverCredit)
	t.Logf("flood: %d request bytes made B repair %d bytes (%.1fx; whole window %d times)",
		st.NakBytes, st.RepairBytes, float64(st.RepairBytes)/float64(st.NakBytes), 200)

	// C's credit is untouched by A's flood: one request, one range of
	// ten messages, is served whole.
	before := st.Retransmitted
	req := request(t, pool, v, mC, rg(101, 110))
	require.NoError(t, b.Receive(req, now))
	req.Release()
	drainOutbox(b)
	require.Equal(t, before+10, b.Stats().Retransmitted)
}

// TestRepairCreditRanges: with the default ratio a request is always worth
// two maximum-size datagrams per range it names, so a receiver asking for
// runs of two lost datagrams at a time is never refused, however long it
// keeps at it.
func TestRepairCreditRanges(t *testing.T) {
	b, pool, v := creditSender(t, 2000, 0, 0) // defaults
	require.Equal(t, 2*1400/wire.RangeLen, b.cfg.RepairRatio)
	now := time.Duration(0)
	for first := uint64(1); first+25 <= 2000; first += 26 {
		now += time.Millisecond
		req := request(t, pool, v, mA, rg(first, first+25)) // 26 messages of 100 B: two 1400 B datagrams
		require.NoError(t, b.Receive(req, now))
		req.Release()
		drainOutbox(b)
	}
	st := b.Stats()
	require.Zero(t, st.RepairsOverCredit)
	require.Equal(t, uint64(76*26), st.Retransmitted)
}

// TestRequestFromStranger: an XMIT_REQ from a member outside the view is
// not served, does not suppress our own requests and earns nothing.
func TestRequestFromStranger(t *testing.T) {
	b, pool, v := creditSender(t, 100, 0, 0)
	req := request(t, pool, v, mD, rg(1, 100))
	require.NoError(t, b.Receive(req, 0))
	req.Release()
	require.Zero(t, drainOutbox(b))
	st := b.Stats()
	require.Equal(t, uint64(1), st.Drops.Stranger)
	require.Zero(t, st.NakReceived)
	require.Zero(t, st.NakBytes)
	require.Zero(t, st.Retransmitted)
}

// TestDepartedRepairCharged: the delayed repairs of a departed sender's
// messages are charged to the requester when queued.
func TestDepartedRepairCharged(t *testing.T) {
	const ratio, burst = 8, 8 << 10
	c := newCluster(t, func(cfg *Config) {
		cfg.RepairRatio, cfg.RepairBurst = ratio, burst
		cfg.RepairLinger = -1
	}, mA, mB, mC)
	c.deliver(c.send(mC, false, payloads("c", 1, 400)...), nil)
	c.poll()
	v2 := View{ID: digest.ViewID{Coord: mA, Counter: 2}, Members: []digest.Member{mA, mB}}
	for _, m := range []digest.Member{mA, mB} {
		c.p(m).InstallView(v2, digest.Digest{}, c.now)
	}
	c.take()
	b := c.p(mA)
	for range 50 {
		c.now += time.Millisecond
		buf := wire.NewBuffer(make([]byte, 1400))
		d, err := wire.EncodeXmitReq(buf.B, wire.Header{Group: testGroup, Sender: mB}, v2.ID, mC, 0, []wire.Range{rg(1, 400)})
		require.NoError(t, err)
		buf.N = len(d)
		require.NoError(t, b.Receive(buf, c.now))
		buf.Release()
		b.Tick(c.now + time.Second) // past RepairJitter
		c.take()
	}
	st := b.Stats()
	require.Positive(t, st.RepairBytes)
	require.Positive(t, st.RepairsOverCredit)
	require.LessOrEqual(t, st.RepairBytes, ratio*st.NakBytes+burst)
}
