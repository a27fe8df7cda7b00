package nakack

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// The in-test harness: a few Protocols on a manual clock, with outboxes
// shuttled by the test (scripted drops and reorders), no randomness beyond
// the protocols' own seeded backoff.

var (
	mA = digest.Member{ID: 0xA, Inc: 1}
	mB = digest.Member{ID: 0xB, Inc: 1}
	mC = digest.Member{ID: 0xC, Inc: 1}
	mD = digest.Member{ID: 0xD, Inc: 1}
)

const testGroup = 7

type delivery struct {
	sender  digest.Member
	seq     uint64
	payload string
}

type lostEvent struct {
	sender   digest.Member
	from, to uint64
}

// recorder is a Handler keeping everything delivered.
type recorder struct {
	dels []delivery
	lost []lostEvent
}

func (r *recorder) Deliver(s digest.Member, seq uint64, p []byte) {
	r.dels = append(r.dels, delivery{s, seq, string(p)})
}

func (r *recorder) Lost(s digest.Member, from, to uint64) {
	r.lost = append(r.lost, lostEvent{s, from, to})
}

// seqs returns the seqnos delivered from s, in order.
func (r *recorder) seqs(s digest.Member) []uint64 {
	var out []uint64
	for _, d := range r.dels {
		if d.sender == s {
			out = append(out, d.seq)
		}
	}
	return out
}

func (r *recorder) lostOf(s digest.Member) []lostEvent {
	var out []lostEvent
	for _, l := range r.lost {
		if l.sender == s {
			out = append(out, l)
		}
	}
	return out
}

func span(from, to uint64) []uint64 {
	var out []uint64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func cat(xs ...[]uint64) []uint64 {
	var out []uint64
	for _, x := range xs {
		out = append(out, x...)
	}
	return out
}

// countingHandler counts slog records at WARN and above.
type countingHandler struct {
	mu   sync.Mutex
	n    int
	msgs []string
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.Level >= slog.LevelWarn {
		h.n++
		h.msgs = append(h.msgs, r.Message)
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// dgram is a datagram in flight.
type dgram struct {
	from, to digest.Member // to zero: multicast
	typ      wire.Type
	data     []byte
}

type node struct {
	p   *Protocol
	rec *recorder
	log *countingHandler
}

type cluster struct {
	t     *testing.T
	now   time.Duration
	pool  *wire.Pool
	nodes map[digest.Member]*node
	order []digest.Member
	view  View
}

func testConfig(self digest.Member) Config {
	return Config{
		Self:            self,
		Group:           testGroup,
		MaxDatagram:     1400,
		SendWindow:      512,
		RecvWindow:      1024,
		NakDelay:        2 * time.Millisecond,
		NakJitter:       time.Millisecond,
		NakInterval:     10 * time.Millisecond,
		NakMaxInterval:  80 * time.Millisecond,
		RepairLinger:    time.Millisecond,
		StableInterval:  time.Hour, // tests trigger stability explicitly
		HighestInterval: 5 * time.Millisecond,
		Seed:            1,
	}
}

// newCluster builds members (the first is the coordinator) in one view.
func newCluster(t *testing.T, tweak func(*Config), members ...digest.Member) *cluster {
	t.Helper()
	c := &cluster{t: t, pool: wire.NewPool(1400, 0), nodes: map[digest.Member]*node{}}
	c.view = View{ID: digest.ViewID{Coord: members[0], Counter: 1}, Members: members}
	for _, m := range members {
		cfg := testConfig(m)
		cfg.Pool = c.pool
		h := &countingHandler{}
		cfg.Logger = slog.New(h)
		if tweak != nil {
			tweak(&cfg)
		}
		p, err := New(cfg)
		require.NoError(t, err)
		p.InstallView(c.view, digest.Digest{}, 0)
		c.nodes[m] = &node{p: p, rec: &recorder{}, log: h}
		c.order = append(c.order, m)
	}
	return c
}

func (c *cluster) p(m digest.Member) *Protocol   { return c.nodes[m].p }
func (c *cluster) rec(m digest.Member) *recorder { return c.nodes[m].rec }

// take removes every node's outbox into a list of datagrams.
func (c *cluster) take() []dgram {
	var out []dgram
	for _, m := range c.order {
		p := c.nodes[m].p
		for _, o := range p.Outbox() {
			b := append([]byte(nil), o.Buf.Bytes()...)
			h, _, err := wire.DecodeHeader(b, testGroup)
			require.NoError(c.t, err)
			out = append(out, dgram{from: m, to: o.To, typ: h.Type, data: b})
			o.Buf.Release()
		}
		p.ClearOutbox()
	}
	return out
}

// deliverTo hands d to member m (if it is a destination).
func (c *cluster) deliverTo(d dgram, m digest.Member) {
	if m == d.from || (!d.to.IsZero() && d.to != m) {
		return
	}
	n := c.nodes[m]
	if n == nil {
		return
	}
	buf := wire.NewBuffer(append([]byte(nil), d.data...))
	_ = n.p.Receive(buf, c.now)
	buf.Release()
}

// deliver hands d to every destination except those drop refuses.
func (c *cluster) deliver(ds []dgram, drop func(d dgram, to digest.Member) bool) {
	for _, d := range ds {
		for _, m := range c.order {
			if drop != nil && drop(d, m) {
				continue
			}
			c.deliverTo(d, m)
		}
	}
}

func (c *cluster) poll() {
	for _, m := range c.order {
		c.nodes[m].p.Poll(c.nodes[m].rec, 1<<30)
	}
}

// run advances time to until, ticking at deadlines, shuttling datagrams
// (filtered by drop) and polling; it returns every datagram sent.
func (c *cluster) run(until time.Duration, drop func(d dgram, to digest.Member) bool) []dgram {
	var all []dgram
	for {
		c.poll()
		ds := c.take()
		if len(ds) > 0 {
			all = append(all, ds...)
			c.deliver(ds, drop)
			continue
		}
		next := NoDeadline
		for _, m := range c.order {
			next = min(next, c.nodes[m].p.NextDeadline())
		}
		if next > until {
			c.now = until
			return all
		}
		c.now = max(c.now, next)
		for _, m := range c.order {
			c.nodes[m].p.Tick(c.now)
		}
	}
}

// send has m send payloads (flushing each into its own datagram when
// separate) and returns the datagrams.
func (c *cluster) send(m digest.Member, separate bool, payloads ...string) []dgram {
	p := c.p(m)
	for _, s := range payloads {
		_, err := p.Send([]byte(s), c.now)
		require.NoError(c.t, err)
		if separate {
			p.Flush(c.now)
		}
	}
	p.Flush(c.now)
	return c.take()
}

func payloads(prefix string, from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, prefix+itoa(i))
	}
	return out
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// dataRange reports the seqnos a data datagram carries.
func dataRange(t *testing.T, d dgram) (origin digest.Member, first, last uint64) {
	h, body, err := wire.DecodeHeader(d.data, testGroup)
	require.NoError(t, err)
	switch h.Type {
	case wire.TypeData:
		dd, err := wire.DecodeData(h, body)
		require.NoError(t, err)
		return dd.Origin, dd.First, dd.Last()
	case wire.TypeFrag:
		f, err := wire.DecodeFrag(h, body)
		require.NoError(t, err)
		return f.Origin, f.Seq, f.Seq
	}
	t.Fatalf("not data: %v", h.Type)
	return
}

// xmitRanges returns the ranges of every XMIT_REQ in ds for target.
func xmitRanges(t *testing.T, ds []dgram, target digest.Member) []wire.Range {
	var out []wire.Range
	for _, d := range ds {
		if d.typ != wire.TypeXmitReq {
			continue
		}
		h, body, err := wire.DecodeHeader(d.data, testGroup)
		require.NoError(t, err)
		x, err := wire.DecodeXmitReq(h, body)
		require.NoError(t, err)
		if x.Target == target {
			out = x.Ranges.AppendTo(out)
		}
	}
	return out
}

func ofType(ds []dgram, typ wire.Type) []dgram {
	var out []dgram
	for _, d := range ds {
		if d.typ == typ {
			out = append(out, d)
		}
	}
	return out
}

func rg(from, to uint64) wire.Range { return wire.Range{From: from, To: to} }
