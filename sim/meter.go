package sim

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

// Meter decodes the datagrams the network carries (through a tap) and counts
// the protocol's traffic by kind, so tests can assert on retransmission
// traffic without reaching into the nodes.
type Meter struct {
	group uint32
	// Sent counts datagrams handed to the network, by wire type.
	Sent [256]uint64
	// RepairDatagrams and RepairMessages count DATA/FRAG datagrams sent with
	// FlagRepair and the messages (fragments) they carry.
	RepairDatagrams, RepairMessages uint64
	// LastRetransmission is when the last XMIT_REQ, repair or MSG_NOT_FOUND
	// was sent (-1 if never).
	LastRetransmission time.Duration
	// DecodeErrors counts datagrams the meter could not decode.
	DecodeErrors uint64
	// only, when set, limits the meter to the datagrams these members
	// send (a group's meter ignores a simulated attacker's).
	only map[digest.Member]bool
}

// NewMeter returns a meter for group, fed by a tap on s.
func NewMeter(s *Sim, group uint32) *Meter {
	m := &Meter{group: group, LastRetransmission: -1}
	s.AddTap(m.tap)
	return m
}

// Only limits the meter to datagrams sent by members.
func (m *Meter) Only(members []digest.Member) {
	m.only = make(map[digest.Member]bool, len(members))
	for _, mem := range members {
		m.only[mem] = true
	}
}

func (m *Meter) tap(ev TapEvent) {
	if ev.Kind != TapSend || (m.only != nil && !m.only[ev.From]) {
		return
	}
	h, body, err := wire.DecodeHeader(ev.Data, m.group)
	if err != nil {
		m.DecodeErrors++
		return
	}
	m.Sent[h.Type]++
	switch h.Type {
	case wire.TypeXmitReq, wire.TypeMsgNotFound:
		m.LastRetransmission = ev.At
	case wire.TypeData:
		if h.Repair() {
			d, err := wire.DecodeData(h, body)
			if err != nil {
				m.DecodeErrors++
				return
			}
			m.RepairDatagrams++
			m.RepairMessages += uint64(d.Count)
			m.LastRetransmission = ev.At
		}
	case wire.TypeFrag:
		if h.Repair() {
			m.RepairDatagrams++
			m.RepairMessages++
			m.LastRetransmission = ev.At
		}
	}
}

// XmitReqs returns how many XMIT_REQ datagrams were sent.
func (m *Meter) XmitReqs() uint64 { return m.Sent[wire.TypeXmitReq] }

// MsgNotFounds returns how many MSG_NOT_FOUND datagrams were sent.
func (m *Meter) MsgNotFounds() uint64 { return m.Sent[wire.TypeMsgNotFound] }

// lostUnit is one original datagram of the tracked sender that the network
// dropped for at least one receiver.
type lostUnit struct {
	first, last uint64
	requests    int           // XMIT_REQ datagrams sent (lost or not) that overlap it
	droppedAt   time.Duration // when the original was dropped (first receiver)
	repairedAt  time.Duration // when the first repair overlapping it was sent, -1 before
	closedAt    time.Duration // when the last receiver that lacked it delivered it, -1 before
	shared      bool          // dropped near the sender: every receiver lacks it
	missing     int           // receivers that lack it and have not delivered it yet
	lackers     []digest.Member
}

// LossTracker measures the cost of repairing one sender's losses. A lost
// range is the seqno run of one original (non-repair) DATA or FRAG datagram
// of the sender that the network dropped for at least one receiver (near
// the sender under shared loss: for all of them). It counts, per lost range,
// the XMIT_REQ datagrams for the sender sent by anyone that overlap the range
// (those the network then drops included); every repaired copy of the
// sender's messages sent by anyone, whatever the cause (a window discard, a
// request for a whole window, a lost repair); when the first repair of a
// lost range was sent and when its gap closed (the last receiver that lacked
// it delivered it); and, per seqno, when every member had delivered it and
// when the sender's own window purged it (the stable point's trail).
type LossTracker struct {
	group     uint32
	sender    digest.Member
	receivers int
	units     []lostUnit // sorted by first: drops happen in send order
	repairs   uint64     // repaired copies of the sender's seqnos sent
	hit       []int      // scratch: unit indexes one request touched
	count     []int32    // per seqno: members that delivered it
	allAt     []time.Duration
	stableAt  []time.Duration
	stable    uint64 // the sender's purge point last seen
	g         *Group
}

// NewLossTracker returns a tracker of the losses of g's member sender (its
// index in g.Nodes), fed by a tap on g's network and by its members'
// recorders.
func NewLossTracker(g *Group, sender int) *LossTracker {
	lt := &LossTracker{group: g.cfg.Group, sender: g.Nodes[sender].Member(), receivers: len(g.Nodes) - 1, g: g}
	g.Sim.AddTap(lt.tap)
	for _, n := range g.Nodes {
		n.Rec.OnDeliver = lt.delivered
	}
	own := g.Nodes[sender].P
	g.Sim.AddCheck(func(now time.Duration) error {
		lt.purgedTo(own.OwnLow(), now)
		return nil
	})
	return lt
}

// run returns the seqno run of a DATA or FRAG datagram from lt.sender's
// messages, and whether it is a repair.
func (lt *LossTracker) run(h wire.Header, body []byte) (first, last uint64, repair, ok bool) {
	switch h.Type {
	case wire.TypeData:
		d, err := wire.DecodeData(h, body)
		if err != nil || d.Origin != lt.sender {
			return 0, 0, false, false
		}
		return d.First, d.Last(), h.Repair(), true
	case wire.TypeFrag:
		f, err := wire.DecodeFrag(h, body)
		if err != nil || f.Origin != lt.sender {
			return 0, 0, false, false
		}
		return f.Seq, f.Seq, h.Repair(), true
	}
	return 0, 0, false, false
}

func (lt *LossTracker) tap(ev TapEvent) {
	h, body, err := wire.DecodeHeader(ev.Data, lt.group)
	if err != nil {
		return
	}
	switch ev.Kind {
	case TapDrop:
		first, last, repair, ok := lt.run(h, body)
		if !ok || repair || h.Sender != lt.sender {
			return
		}
		lt.dropped(first, last, ev.To, ev.At)
	case TapSend:
		if h.Type == wire.TypeXmitReq {
			lt.requested(h, body)
			return
		}
		first, last, repair, ok := lt.run(h, body)
		if !ok || !repair {
			return
		}
		lt.repairs += last - first + 1
		for i := lt.find(first); i < len(lt.units) && lt.units[i].first <= last; i++ {
			if u := &lt.units[i]; u.repairedAt < 0 {
				u.repairedAt = ev.At
			}
		}
	}
}

// dropped records the loss of the original datagram first..last for
// receiver to (zero: near the sender, for every receiver).
func (lt *LossTracker) dropped(first, last uint64, to digest.Member, at time.Duration) {
	n := len(lt.units)
	if n > 0 && lt.units[n-1].first >= first {
		if u := &lt.units[n-1]; u.first == first && !u.shared && !to.IsZero() {
			u.lackers = append(u.lackers, to) // the same datagram, dropped for another receiver
			u.missing++
		}
		return
	}
	u := lostUnit{first: first, last: last, droppedAt: at, repairedAt: -1, closedAt: -1}
	if to.IsZero() {
		u.shared, u.missing = true, lt.receivers
	} else {
		u.lackers, u.missing = []digest.Member{to}, 1
	}
	lt.units = append(lt.units, u)
}

// requested counts an XMIT_REQ for the sender against every lost range it
// overlaps (once per datagram).
func (lt *LossTracker) requested(h wire.Header, body []byte) {
	x, err := wire.DecodeXmitReq(h, body)
	if err != nil || x.Target != lt.sender {
		return
	}
	lt.hit = lt.hit[:0]
	for r := range x.Ranges.Len() {
		rg := x.Ranges.At(r)
		for i := lt.find(rg.From); i < len(lt.units) && lt.units[i].first <= rg.To; i++ {
			lt.hit = append(lt.hit, i)
		}
	}
	slices.Sort(lt.hit)
	for _, u := range slices.Compact(lt.hit) {
		lt.units[u].requests++
	}
}

// delivered is every recorder's delivery hook: member delivered sender's
// message first..last at at.
func (lt *LossTracker) delivered(member, sender digest.Member, first, last uint64, at time.Duration) {
	if sender != lt.sender {
		return
	}
	for len(lt.count) <= int(last) {
		lt.count = append(lt.count, 0)
		lt.allAt = append(lt.allAt, -1)
		lt.stableAt = append(lt.stableAt, -1)
	}
	for seq := first; seq <= last; seq++ {
		if lt.count[seq]++; int(lt.count[seq]) == lt.receivers+1 {
			lt.allAt[seq] = at
		}
	}
	if member == lt.sender {
		return
	}
	for i := lt.find(first); i < len(lt.units) && lt.units[i].first <= last; i++ {
		u := &lt.units[i]
		if u.last > last || u.missing == 0 || (!u.shared && !slices.Contains(u.lackers, member)) {
			continue
		}
		if u.missing--; u.missing == 0 {
			u.closedAt = at
		}
	}
}

// purgedTo notes the sender's purge point (stable point) at now.
func (lt *LossTracker) purgedTo(low uint64, now time.Duration) {
	for ; lt.stable < low; lt.stable++ {
		if s := lt.stable + 1; s < uint64(len(lt.stableAt)) {
			lt.stableAt[s] = now
		}
	}
}

// find returns the index of the first unit whose last seqno is >= seq.
func (lt *LossTracker) find(seq uint64) int {
	return sort.Search(len(lt.units), func(i int) bool { return lt.units[i].last >= seq })
}

// Dist is the mean, 99th percentile (nearest rank) and maximum of a sample.
type Dist[T int | time.Duration] struct {
	Mean     float64
	P99, Max T
}

func distOf[T int | time.Duration](s []T) Dist[T] {
	if len(s) == 0 {
		return Dist[T]{}
	}
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += float64(v)
	}
	return Dist[T]{Mean: sum / float64(len(s)), P99: p99(s), Max: s[len(s)-1]}
}

// DurString formats a Dist of durations.
func (d Dist[T]) DurString() string {
	r := func(v time.Duration) time.Duration { return v.Round(10 * time.Microsecond) }
	return fmt.Sprintf("mean %v p99 %v max %v", r(time.Duration(d.Mean)), r(time.Duration(d.P99)), r(time.Duration(d.Max)))
}

// LossFigures summarises a LossTracker.
type LossFigures struct {
	// LostRanges and LostMessages count the lost ranges and the seqnos in them.
	LostRanges, LostMessages int
	// Requests is the XMIT_REQ datagrams sent per lost range (those lost
	// on the network included).
	Requests Dist[int]
	// Repairs counts every repaired copy of the sender's messages sent,
	// whatever the cause; RepairsPerLost is Repairs per lost message.
	Repairs        uint64
	RepairsPerLost float64
	// FirstRepair is the time from a lost range's drop to the first repair
	// sent for it; GapClosed to the delivery by the last receiver that
	// lacked it.
	FirstRepair, GapClosed Dist[time.Duration]
	// Unrepaired counts lost ranges no repair was ever sent for, Unclosed
	// those some receiver that lacked them never delivered.
	Unrepaired, Unclosed int
	// StableTrail is, per message every member delivered, the time from
	// the last member's delivery to the sender's purge (stability) of it.
	StableTrail Dist[time.Duration]
	// AllDelivered is when the last message was delivered by every member.
	AllDelivered time.Duration
}

// String formats the figures for a log line.
func (f LossFigures) String() string {
	return fmt.Sprintf("%d lost ranges (%d messages): requests sent per lost range mean %.2f p99 %d max %d; repairs (every cause) %d, %.3f per lost message; first repair %s; gap closed %s; stable point trails the last delivery %s; %d never repaired, %d never closed",
		f.LostRanges, f.LostMessages, f.Requests.Mean, f.Requests.P99, f.Requests.Max, f.Repairs, f.RepairsPerLost,
		f.FirstRepair.DurString(), f.GapClosed.DurString(), f.StableTrail.DurString(), f.Unrepaired, f.Unclosed)
}

// AllDeliveredAt returns when every member had delivered the tracked
// sender's message starting at seq (-1 if not yet).
func (lt *LossTracker) AllDeliveredAt(seq uint64) time.Duration {
	if seq >= uint64(len(lt.allAt)) {
		return -1
	}
	return lt.allAt[seq]
}

// p99 returns the nearest-rank 99th percentile of sorted s.
func p99[T any](s []T) T { return s[(len(s)*99+99)/100-1] }

// Figures computes the summary so far.
func (lt *LossTracker) Figures() LossFigures {
	f := LossFigures{LostRanges: len(lt.units), Repairs: lt.repairs}
	reqs := make([]int, 0, len(lt.units))
	var first, closed, trail []time.Duration
	for _, u := range lt.units {
		reqs = append(reqs, u.requests)
		f.LostMessages += int(u.last - u.first + 1)
		if u.repairedAt < 0 {
			f.Unrepaired++
		} else {
			first = append(first, u.repairedAt-u.droppedAt)
		}
		if u.closedAt < 0 {
			f.Unclosed++
		} else {
			closed = append(closed, u.closedAt-u.droppedAt)
		}
	}
	for seq := 1; seq < len(lt.allAt); seq++ {
		if at := lt.allAt[seq]; at >= 0 {
			f.AllDelivered = max(f.AllDelivered, at)
			if st := lt.stableAt[seq]; st >= 0 {
				trail = append(trail, max(0, st-at))
			}
		}
	}
	f.Requests = distOf(reqs)
	f.FirstRepair, f.GapClosed, f.StableTrail = distOf(first), distOf(closed), distOf(trail)
	if f.LostMessages > 0 {
		f.RepairsPerLost = float64(f.Repairs) / float64(f.LostMessages)
	}
	return f
}
