package nakack

import (
	"math"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// TestGroupReceived: a sender's GroupReceived is the lowest, over the view,
// of the highest of its seqnos each member read (STABLE's Received, folded
// by the coordinator into STABILITY's Received), not the stable point: a
// member that lacks one datagram holds Low back but not GroupReceived. It
// holds for the coordinator as sender (A) and for another member (B), is
// never below Low nor above the highest seqno sent, and restarts at Low in
// a new view.
func TestGroupReceived(t *testing.T) {
	for _, sender := range []digest.Member{mA, mB} {
		t.Run(sender.String(), func(t *testing.T) {
			c := newCluster(t, nil, mA, mB, mC)
			p := c.p(sender)
			require.Zero(t, p.GroupReceived(), "nothing sent")
			// Ten datagrams of one message each; C loses seqno 3.
			lose3 := func(d dgram, to digest.Member) bool {
				if to != mC || (d.typ != wire.TypeData) {
					return false
				}
				_, first, _ := dataRange(t, d)
				return first == 3
			}
			c.deliver(c.send(sender, true, payloads("x", 1, 10)...), lose3)
			c.poll()
			require.Zero(t, p.GroupReceived(), "no STABILITY yet: Low")

			round := func(drop func(d dgram, to digest.Member) bool) {
				for _, m := range c.order {
					c.p(m).sendStable(c.now)
				}
				for ds := c.take(); len(ds) > 0; ds = c.take() {
					c.deliver(ds, drop)
				}
			}
			// No NAK may go out: C keeps its gap through the round.
			round(lose3)
			e, _ := p.WindowState(sender)
			require.Equal(t, uint64(2), e.Low, "stable: C delivered 2")
			require.Equal(t, uint64(10), p.GroupReceived(), "every member read 10")
			for _, m := range []digest.Member{mA, mB, mC} {
				e, _ := c.p(m).WindowState(sender)
				require.Equal(t, uint64(2), e.Low, "member %v purged to the stable point", m)
			}

			// More is sent, not yet reported: still 10; never above sent.
			c.deliver(c.send(sender, false, payloads("y", 11, 20)...), lose3)
			require.Equal(t, uint64(10), p.GroupReceived())

			// The gap is repaired, everyone reports: stable and received.
			c.run(c.now+100*time.Millisecond, nil)
			round(nil)
			e, _ = p.WindowState(sender)
			require.Equal(t, uint64(20), e.Low)
			require.Equal(t, uint64(20), p.GroupReceived())
			require.Equal(t, span(1, 20), c.rec(mC).seqs(sender))

			// A new view (D joins): D has read nothing, so back to Low.
			c.send(sender, false, payloads("z", 21, 25)...)
			v := View{ID: digest.ViewID{Coord: mA, Counter: 2}, Members: []digest.Member{mA, mB, mC, mD}}
			p.InstallView(v, p.Digest(), c.now)
			require.Equal(t, uint64(20), p.GroupReceived(), "new view: Low")
		})
	}
}

// TestGroupReceivedAlone: in a view of one, everything sent counts as
// received; without a view, nothing beyond Low.
func TestGroupReceivedAlone(t *testing.T) {
	pool := wire.NewPool(1400, 0)
	cfg := testConfig(mA)
	cfg.Pool = pool
	p, err := New(cfg)
	require.NoError(t, err)
	_, err = p.Send([]byte("a"), 0)
	require.NoError(t, err)
	require.Zero(t, p.GroupReceived(), "no view: Low")
	p.InstallView(View{ID: digest.ViewID{Coord: mA, Counter: 1}, Members: []digest.Member{mA}}, digest.Digest{}, 0)
	_, err = p.Send([]byte("b"), 0)
	require.NoError(t, err)
	require.Equal(t, uint64(2), p.GroupReceived())
	for _, o := range p.Outbox() {
		o.Buf.Release()
	}
	p.ClearOutbox()
}

// TestStabilityCarriesMinReceived: the coordinator's STABILITY entry holds
// the stable seqno in Delivered, the minimum received over the view in
// Received and the minimum Low reported in Low.
func TestStabilityCarriesMinReceived(t *testing.T) {
	c := newCluster(t, nil, mA, mB, mC)
	lose := func(d dgram, to digest.Member) bool {
		if to != mC || d.typ != wire.TypeData {
			return false
		}
		_, first, _ := dataRange(t, d)
		return first == 4
	}
	c.deliver(c.send(mB, true, payloads("b", 1, 6)...), lose)
	c.poll()
	for _, m := range c.order {
		c.p(m).sendStable(c.now)
	}
	var st []dgram
	for ds := c.take(); len(ds) > 0; ds = c.take() {
		st = append(st, ofType(ds, wire.TypeStability)...)
		c.deliver(ds, lose)
	}
	require.Len(t, st, 1)
	h, body, err := wire.DecodeHeader(st[0].data, testGroup)
	require.NoError(t, err)
	s, err := wire.DecodeStability(h, body)
	require.NoError(t, err)
	var got []digest.Entry
	for i := range s.Digest.Len() {
		got = append(got, s.Digest.At(i))
	}
	// Low is the lowest Low reported: nobody had purged anything.
	require.Equal(t, []digest.Entry{{Member: mB, Low: 0, Delivered: 3, Received: 6}}, got)
}

// TestSendLimitIgnoresAbsurdGroupLow: a STABILITY whose entry for our own
// messages names a Low far beyond anything we sent (only the coordinator
// can send one; a faulty or hostile one) must not wrap SendLimit's
// groupLow+RecvWindow: the group's low is capped at what we sent, and
// SendLimit stays at least what it was.
func TestSendLimitIgnoresAbsurdGroupLow(t *testing.T) {
	c := newCluster(t, func(cfg *Config) { cfg.SendWindow, cfg.RecvWindow = 64, 64 }, mA, mB, mC)
	c.deliver(c.send(mB, true, payloads("b", 1, 6)...), nil)
	c.poll()
	p := c.p(mB)
	before := p.SendLimit()
	huge := uint64(math.MaxUint64 - 3)
	applyStability(p, wire.EntrySlice([]digest.Entry{{Member: mB, Low: huge, Delivered: huge, Received: huge}}), c.now)
	require.GreaterOrEqual(t, p.SendLimit(), before)
	require.LessOrEqual(t, p.groupLow, p.nextSeq-1)
}
