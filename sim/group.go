package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/wire"
)

// GroupConfig describes a simulated nakack group: Members members, all in
// one view installed at virtual time 0 (the first member coordinates), on a
// virtual network.
type GroupConfig struct {
	// Seed decides everything: the network, the traffic and the members'
	// protocol randomness.
	Seed    uint64
	Members int
	// Group is the wire group id (1 if zero).
	Group uint32
	Net   NetConfig
	// MaxDatagram is each member's pool's largest datagram (8 KiB if zero).
	MaxDatagram int
	// Configure, if set, adjusts member i's nakack.Config after Self, Group,
	// Pool and Seed are filled in.
	Configure func(i int, cfg *nakack.Config)
}

// Group is a running simulated nakack group with its applications.
type Group struct {
	Sim    *Sim
	Ledger *Ledger
	Meter  *Meter
	Nodes  []*NakackNode
	Gens   []*Generator
	View   nakack.View
	// HealedAt, if set, is when the last partition heals: the quiescence
	// bound counts from the later of it and the end of traffic.
	HealedAt time.Duration
	cfg      GroupConfig
	trace    hash.Hash64
}

// GroupMember returns the i-th member of a simulated group.
func GroupMember(i int) digest.Member { return digest.Member{ID: uint64(i + 1), Inc: 1} }

// NewGroup builds the group of cfg and installs its view at time 0.
func NewGroup(cfg GroupConfig) (*Group, error) {
	if cfg.Members < 1 {
		return nil, errors.New("sim: group needs at least one member")
	}
	if cfg.Group == 0 {
		cfg.Group = 1
	}
	if cfg.MaxDatagram == 0 {
		cfg.MaxDatagram = 8 << 10
	}
	s := New(cfg.Seed, cfg.Net)
	g := &Group{Sim: s, Ledger: NewLedger(), Meter: NewMeter(s, cfg.Group), cfg: cfg, trace: fnv.New64a()}
	s.AddTap(g.traceTap)
	g.View.ID = digest.ViewID{Coord: GroupMember(0), Counter: 1}
	for i := range cfg.Members {
		g.View.Members = append(g.View.Members, GroupMember(i))
	}
	g.Meter.Only(g.View.Members)
	for i := range cfg.Members {
		nonces := rand.New(rand.NewPCG(cfg.Seed, 0x6e6f6e6365+uint64(i)))
		nc := nakack.Config{
			Self:  GroupMember(i),
			Group: cfg.Group,
			Pool:  wire.NewPool(cfg.MaxDatagram, 0),
			Seed:  cfg.Seed*1_000_003 + uint64(i),
			Nonce: nonces.Uint64,
		}
		if cfg.Configure != nil {
			cfg.Configure(i, &nc)
		}
		n, err := NewNakackNode(s, nc, g.Ledger)
		if err != nil {
			return nil, err
		}
		if err := s.AddNode(n); err != nil {
			return nil, err
		}
		g.Nodes = append(g.Nodes, n)
		if err := s.Do(0, n.Member(), func(now time.Duration) {
			n.P.InstallView(g.View, digest.Digest{}, now)
		}); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// StartTraffic starts t on member i.
func (g *Group) StartTraffic(i int, t Traffic) (*Generator, error) {
	gen, err := StartTraffic(g.Sim, g.Nodes[i].Member(), g.Nodes[i], g.Ledger, t)
	if err != nil {
		return nil, err
	}
	g.Gens = append(g.Gens, gen)
	return gen, nil
}

// TrafficDone reports whether every generator has sent everything.
func (g *Group) TrafficDone() bool {
	for _, gen := range g.Gens {
		if !gen.Done() {
			return false
		}
	}
	return true
}

// TrafficEnd returns when the last generator finished (-1 if one has not).
func (g *Group) TrafficEnd() time.Duration {
	end := time.Duration(0)
	for _, gen := range g.Gens {
		if !gen.Done() {
			return -1
		}
		end = max(end, gen.DoneAt())
	}
	return end
}

// Delivered reports whether every member has delivered (or been told lost)
// everything every sender sent.
func (g *Group) Delivered() bool {
	for _, n := range g.Nodes {
		if !n.Rec.Complete() {
			return false
		}
	}
	return true
}

// occupancy returns an error naming the first member whose windows still
// retain something or whose pool still has buffers out.
func (g *Group) occupancy(checkPools bool) error {
	for _, n := range g.Nodes {
		d := n.P.Digest()
		for i := range d.Len() {
			e := d.At(i)
			if hi := g.Ledger.Highest(e.Member); e.Low != hi || e.Received != hi || e.Delivered != hi {
				return fmt.Errorf("member %v retains %v (sender's highest %d)", n.Member(), e, hi)
			}
		}
		if checkPools {
			if ps := n.Pool.Stats(); ps.OutstandingBuffers != 0 {
				return fmt.Errorf("member %v: %d pool buffers (%d bytes) still held with nothing retained", n.Member(), ps.OutstandingBuffers, ps.Outstanding)
			}
		}
	}
	return nil
}

// Settled reports whether traffic is done, everything is delivered and
// every window has purged everything (ring occupancy zero).
func (g *Group) Settled() bool {
	return g.TrafficDone() && g.Delivered() && g.occupancy(false) == nil
}

// QuiescenceBound is the longest a run may take, from the end of traffic,
// to deliver and purge everything; and IdleCheck is how long the group is
// then watched for retransmission traffic (there must be none). IdleCheck
// exceeds nakack's default HighestMaxInterval and StableInterval so that
// every periodic timer fires in it.
const (
	QuiescenceBound = 20 * time.Second
	IdleCheck       = 3 * time.Second
)

// RunToQuiescence runs until the group has settled (traffic done, everything
// delivered, everything purged) or limit, and then checks the end
// invariants: settled within QuiescenceBound of the end of traffic; no
// generator left back-pressured; over the following IdleCheck no XMIT_REQ,
// repair or MSG_NOT_FOUND is sent and occupancy stays zero with every pooled
// buffer returned; no datagram failed to decode. With clean (no partitions,
// crashes or forced purges) no lost range was reported, no MSG_NOT_FOUND
// sent at all and no message discarded for want of window room
// (Drops.Full: nakack's SendLimit keeps every sender within its members'
// windows).
func (g *Group) RunToQuiescence(limit time.Duration, clean bool) error {
	s := g.Sim
	done, err := s.RunWhile(func() bool { return !g.Settled() }, 10*time.Millisecond, limit)
	if err != nil {
		return err
	}
	if !done {
		return fmt.Errorf("seed %d: not settled by %v: %s", s.Seed(), limit, g.Diagnose())
	}
	settled := s.Now()
	if end := max(g.TrafficEnd(), g.HealedAt); settled-end > QuiescenceBound {
		return fmt.Errorf("seed %d: settled at %v, %v after traffic ended or the network healed at %v (bound %v)", s.Seed(), settled, settled-end, end, QuiescenceBound)
	}
	for _, gen := range g.Gens {
		if gen.Blocked() {
			return fmt.Errorf("seed %d: a generator is still back-pressured at %v", s.Seed(), settled)
		}
	}
	xmits, repairs, mnf := g.Meter.XmitReqs(), g.Meter.RepairDatagrams, g.Meter.MsgNotFounds()
	if err := s.RunUntil(settled + IdleCheck); err != nil {
		return err
	}
	if x, r, m := g.Meter.XmitReqs()-xmits, g.Meter.RepairDatagrams-repairs, g.Meter.MsgNotFounds()-mnf; x+r+m > 0 {
		return fmt.Errorf("seed %d: retransmission traffic after settling at %v: %d XMIT_REQ, %d repairs, %d MSG_NOT_FOUND (last at %v)",
			s.Seed(), settled, x, r, m, g.Meter.LastRetransmission)
	}
	if err := g.occupancy(true); err != nil {
		return fmt.Errorf("seed %d: after idling: %w", s.Seed(), err)
	}
	if g.Meter.DecodeErrors > 0 {
		return fmt.Errorf("seed %d: %d datagrams on the network failed to decode", s.Seed(), g.Meter.DecodeErrors)
	}
	for _, n := range g.Nodes {
		if err := n.Rec.CheckComplete(); err != nil {
			return fmt.Errorf("seed %d: %w", s.Seed(), err)
		}
		if n.ReceiveErrors() > 0 {
			return fmt.Errorf("seed %d: member %v: Receive rejected %d datagrams (stats %+v)", s.Seed(), n.Member(), n.ReceiveErrors(), n.P.Stats().Drops)
		}
		if !clean {
			continue
		}
		if lr := n.Rec.LostRanges(); len(lr) > 0 {
			return fmt.Errorf("seed %d: member %v was told %d ranges lost (first %v) in a run without partitions, crashes or forced purges", s.Seed(), n.Member(), len(lr), lr[0])
		}
		if st := n.P.Stats(); st.Drops.Full > 0 {
			return fmt.Errorf("seed %d: member %v discarded %d messages for want of window room in a run without forced purges", s.Seed(), n.Member(), st.Drops.Full)
		}
		if st := n.P.Stats(); st.MsgNotFoundSent > 0 {
			return fmt.Errorf("seed %d: member %v sent %d MSG_NOT_FOUND in a run without partitions, crashes or forced purges", s.Seed(), n.Member(), st.MsgNotFoundSent)
		}
	}
	if clean && g.Meter.MsgNotFounds() > 0 {
		return fmt.Errorf("seed %d: %d MSG_NOT_FOUND sent in a clean run", s.Seed(), g.Meter.MsgNotFounds())
	}
	return nil
}

// traceTap folds every datagram event into the group's trace hash.
func (g *Group) traceTap(ev TapEvent) {
	var b [8 + 8 + 2*12]byte
	b[0] = byte(ev.Kind)
	binary.LittleEndian.PutUint64(b[8:], uint64(ev.At))
	binary.LittleEndian.PutUint64(b[16:], ev.From.ID)
	binary.LittleEndian.PutUint32(b[24:], ev.From.Inc)
	binary.LittleEndian.PutUint64(b[28:], ev.To.ID)
	binary.LittleEndian.PutUint32(b[36:], ev.To.Inc)
	g.trace.Write(b[:])
	g.trace.Write(ev.Data)
}

// Trace returns a hash of every datagram sent, dropped and delivered so far,
// with its virtual time, endpoints and bytes: two runs of one seed must
// have the same trace.
func (g *Group) Trace() uint64 { return g.trace.Sum64() }

// Diagnose describes what keeps the group from settling: undelivered
// ranges, retained windows, blocked generators.
func (g *Group) Diagnose() string {
	var b strings.Builder
	fmt.Fprintf(&b, "traffic done %v (end %v); ", g.TrafficDone(), g.TrafficEnd())
	for i, gen := range g.Gens {
		if !gen.Done() || gen.Blocked() {
			fmt.Fprintf(&b, "generator %d sent %d blocked %v; ", i, gen.Sent(), gen.Blocked())
		}
	}
	shown := 0
	for _, n := range g.Nodes {
		if err := n.Rec.CheckComplete(); err != nil && shown < 5 {
			fmt.Fprintf(&b, "%v; digest %v; ", err, n.P.Digest())
			shown++
		}
	}
	if err := g.occupancy(false); err != nil {
		fmt.Fprintf(&b, "%v; ", err)
	}
	fmt.Fprintf(&b, "last retransmission %v", g.Meter.LastRetransmission)
	return b.String()
}
