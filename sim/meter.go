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
}

// NewMeter returns a meter for group, fed by a tap on s.
func NewMeter(s *Sim, group uint32) *Meter {
	m := &Meter{group: group, LastRetransmission: -1}
	s.AddTap(m.tap)
	return m
}

func (m *Meter) tap(ev TapEvent) {
	if ev.Kind != TapSend {
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
	requests    int           // XMIT_REQ datagrams reaching the sender that overlap it
	droppedAt   time.Duration // when the original was dropped (first receiver)
	repairedAt  time.Duration // when the first repair overlapping it was sent, -1 before
}

// LossTracker measures the cost of repairing one sender's losses. A lost
// range is the seqno run of one original (non-repair) DATA or FRAG datagram
// of the sender that the network dropped for at least one receiver (near
// the sender under shared loss: for all of them). It counts, per lost range,
// the XMIT_REQ datagrams for the sender that reach the sender and overlap
// the range, and it counts the repaired copies of lost seqnos sent by
// anyone.
type LossTracker struct {
	group   uint32
	sender  digest.Member
	units   []lostUnit // sorted by first: drops happen in send order
	repairs uint64     // repaired copies of lost seqnos sent
	hit     []int      // scratch: unit indexes one request touched
}

// NewLossTracker returns a tracker of sender's losses in group, fed by a tap
// on s.
func NewLossTracker(s *Sim, group uint32, sender digest.Member) *LossTracker {
	lt := &LossTracker{group: group, sender: sender}
	s.AddTap(lt.tap)
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
		if n := len(lt.units); n > 0 && lt.units[n-1].first >= first {
			return // the same datagram, dropped for another receiver
		}
		lt.units = append(lt.units, lostUnit{first: first, last: last, droppedAt: ev.At, repairedAt: -1})
	case TapSend:
		first, last, repair, ok := lt.run(h, body)
		if !ok || !repair {
			return
		}
		for i := lt.find(first); i < len(lt.units) && lt.units[i].first <= last; i++ {
			u := &lt.units[i]
			lt.repairs += min(u.last, last) - max(u.first, first) + 1
			if u.repairedAt < 0 {
				u.repairedAt = ev.At
			}
		}
	case TapDeliver:
		if ev.To != lt.sender || h.Type != wire.TypeXmitReq {
			return
		}
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
}

// find returns the index of the first unit whose last seqno is >= seq.
func (lt *LossTracker) find(seq uint64) int {
	return sort.Search(len(lt.units), func(i int) bool { return lt.units[i].last >= seq })
}

// LossFigures summarises a LossTracker.
type LossFigures struct {
	// LostRanges and LostMessages count the lost ranges and the seqnos in them.
	LostRanges, LostMessages int
	// RequestsMean and RequestsP99 describe the XMIT_REQ datagrams reaching
	// the sender per lost range; RequestsMax is the largest count.
	RequestsMean float64
	RequestsP99  int
	RequestsMax  int
	// RepairsPerLost is repaired copies of lost seqnos per lost seqno.
	RepairsPerLost float64
	// RepairDelayMean, RepairDelayP99 and RepairDelayMax describe the time
	// from a lost range's drop to the first repair sent for it.
	RepairDelayMean, RepairDelayP99, RepairDelayMax time.Duration
	// Unrepaired counts lost ranges no repair was ever sent for.
	Unrepaired int
}

// String formats the figures for a log line.
func (f LossFigures) String() string {
	return fmt.Sprintf("%d lost ranges (%d messages): requests reaching the sender per lost range mean %.2f p99 %d max %d; repairs per lost message %.3f; drop to first repair mean %v p99 %v max %v; %d never repaired",
		f.LostRanges, f.LostMessages, f.RequestsMean, f.RequestsP99, f.RequestsMax, f.RepairsPerLost,
		f.RepairDelayMean.Round(time.Microsecond), f.RepairDelayP99.Round(time.Microsecond), f.RepairDelayMax.Round(time.Microsecond), f.Unrepaired)
}

// p99 returns the nearest-rank 99th percentile of sorted s.
func p99[T any](s []T) T { return s[(len(s)*99+99)/100-1] }

// Figures computes the summary so far.
func (lt *LossTracker) Figures() LossFigures {
	f := LossFigures{LostRanges: len(lt.units)}
	if f.LostRanges == 0 {
		return f
	}
	reqs := make([]int, len(lt.units))
	var delays []time.Duration
	total := 0
	var delaySum time.Duration
	for i, u := range lt.units {
		reqs[i] = u.requests
		total += u.requests
		f.LostMessages += int(u.last - u.first + 1)
		if u.repairedAt < 0 {
			f.Unrepaired++
			continue
		}
		delays = append(delays, u.repairedAt-u.droppedAt)
		delaySum += u.repairedAt - u.droppedAt
	}
	slices.Sort(reqs)
	f.RequestsMean = float64(total) / float64(len(reqs))
	f.RequestsP99 = p99(reqs)
	f.RequestsMax = reqs[len(reqs)-1]
	f.RepairsPerLost = float64(lt.repairs) / float64(f.LostMessages)
	if len(delays) > 0 {
		slices.Sort(delays)
		f.RepairDelayMean = delaySum / time.Duration(len(delays))
		f.RepairDelayP99 = p99(delays)
		f.RepairDelayMax = delays[len(delays)-1]
	}
	return f
}
