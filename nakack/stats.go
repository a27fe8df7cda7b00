package nakack

import (
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

// This file holds the protocol's latency and lag statistics: repair latency
// (gap detected to filled, per gap episode) and, per other member, how far
// it has delivered this member's own messages. Both are bookkeeping beside
// the protocol, fed by a few hooks (arm and checkGaps in protocol.go, the
// STABLE dispatch in receive.go, purgeWin in refs.go); nothing here is
// per message and nothing allocates.

// RepairBuckets is the number of repair latency histogram buckets: bucket i
// < RepairBuckets-1 counts episodes of at most RepairBucketBound(i) (and
// more than the previous bound), the last one everything longer.
const RepairBuckets = 14

// RepairBucketBound returns the upper bound of histogram bucket i: 1ms
// doubling to 4.096s; the last bucket (RepairBuckets-1) is unbounded and
// reports -1.
func RepairBucketBound(i int) time.Duration {
	if i >= RepairBuckets-1 {
		return -1
	}
	return time.Millisecond << i
}

// RepairStats measure repair latency on the protocol's clock (the now
// passed to Receive and Tick), per gap episode of a sender's stream: an
// episode starts when this member finds something missing from a sender
// whose stream had no gap (the moment its NAK timer is armed: a datagram
// arrived beyond a gap, or a HIGHEST announced more than it holds) and
// ends when nothing it wants of that sender is missing any more (repaired,
// or declared lost by MSG_NOT_FOUND or a cut). With isolated losses an
// episode is one gap, from detection to fill; losses that overlap merge
// into one episode measured to the last fill (an upper bound of each
// gap's latency). It includes NakDelay, the NAK jitter, the round trip and
// any retry backoff. Episodes cut short by a view change (the sender left)
// are not counted.
type RepairStats struct {
	Count uint64        // episodes ended
	Sum   time.Duration // their total duration
	Max   time.Duration // the longest
	// Buckets is the latency histogram (not cumulative): see
	// RepairBucketBound.
	Buckets [RepairBuckets]uint64
}

// Mean returns Sum/Count (0 without episodes).
func (r RepairStats) Mean() time.Duration {
	if r.Count == 0 {
		return 0
	}
	return r.Sum / time.Duration(r.Count)
}

func (r *RepairStats) record(d time.Duration) {
	d = max(d, 0)
	r.Count++
	r.Sum += d
	r.Max = max(r.Max, d)
	i := 0
	if d > time.Millisecond {
		// The smallest i with d <= 1ms<<i: the bit length of (d-1)/1ms.
		for x := uint64((d - 1) / time.Millisecond); x > 0; x >>= 1 {
			i++
		}
	}
	r.Buckets[min(i, RepairBuckets-1)]++
}

// senderStats is the statistics bookkeeping kept per sender.
type senderStats struct {
	gapAt time.Duration // when the current gap episode began (NAK timer armed)
	// peer: what this member knows of how far that member has delivered
	// our own messages, from its own STABLE (coordinator only): the
	// Delivered of our entry and when it arrived.
	peerDelivered uint64
	peerAt        time.Duration
	peerReported  bool
}

// gapOpened starts a gap episode of s (called by arm).
func (s *sender) gapOpened(now time.Duration) { s.st.gapAt = now }

// gapClosed ends s's gap episode, if one is open, at now: nothing is
// missing any more (called by checkGaps before it disarms).
func (p *Protocol) gapClosed(s *sender, now time.Duration) {
	if s.armed {
		p.stats.Repair.record(now - s.st.gapAt)
	}
}

// ownPurged notes when stability last raised the own window's low (called
// by purgeWin for the own window): the moment every member was known to
// have delivered up to it.
func (p *Protocol) ownPurged() { p.own.st.peerAt = p.clock }

// noteStable takes, from a member's STABLE chunk, how far it delivered our
// own messages (only the coordinator receives STABLEs). It decodes the
// chunk's header again (onStable decodes it for the fold) and scans its
// entries for ours: O(entries) once per STABLE, no allocation.
func (p *Protocol) noteStable(h wire.Header, body []byte, now time.Duration) {
	if !p.hasView || p.coord != p.self {
		return
	}
	s := p.senders[h.Sender]
	if s == nil || s.own {
		return
	}
	st, err := wire.DecodeStable(h, body)
	if err != nil || st.View != p.view.ID {
		return
	}
	for i := 0; i < st.Digest.Len(); i++ {
		if e := st.Digest.At(i); e.Member == p.self {
			s.st.peerDelivered = max(s.st.peerDelivered, e.Delivered)
			s.st.peerAt, s.st.peerReported = now, true
			return
		}
	}
}

// PeerLag is this member's knowledge of how far another member of the view
// has delivered this member's own messages.
type PeerLag struct {
	Member digest.Member
	// Delivered is the highest own seqno Member is known to have
	// delivered: a lower bound. It is the larger of the group's stable
	// point (the own window's Low: the minimum every member reported in
	// the last completed STABLE round) and, on the coordinator only,
	// Member's own last STABLE report (Reported). Both may also sit below
	// what Member really delivered while a digest capture (a view change,
	// a state transfer) holds its advertised Delivered back.
	Delivered uint64
	// Lag is the highest own seqno sent minus Delivered: an upper bound on
	// how many of our messages Member has not delivered yet.
	Lag uint64
	// At is when Delivered was learnt (protocol clock): the arrival of
	// Member's STABLE, or the stability purge that raised Low (0: never,
	// Delivered is 0). A STABLE leaves a member every StableInterval
	// (default 200ms) and whenever it received StableBytes; a round
	// completes once every member's is in, so the stable point is one
	// interval plus a round trip old at best, and stops moving while any
	// member is silent (slow, or failed until the view excludes it).
	At time.Duration
	// Reported: Delivered is Member's own STABLE report (this member
	// coordinates), not only the group's minimum.
	Reported bool
}

// AppendPeerLags appends a PeerLag for every other member of the installed
// view, in view order, to dst and returns it (nothing without a view). It
// allocates only if dst lacks capacity.
func (p *Protocol) AppendPeerLags(dst []PeerLag) []PeerLag {
	if !p.hasView {
		return dst
	}
	sent := p.nextSeq - 1
	low, lowAt := p.own.low(), p.own.st.peerAt
	for _, m := range p.view.Members {
		if m == p.self {
			continue
		}
		l := PeerLag{Member: m, Delivered: low, At: lowAt}
		if low == 0 {
			l.At = 0
		}
		if s := p.senders[m]; s != nil && s.st.peerReported && s.st.peerDelivered >= low {
			l.Delivered, l.At, l.Reported = s.st.peerDelivered, s.st.peerAt, true
		}
		l.Delivered = min(l.Delivered, sent)
		l.Lag = sent - l.Delivered
		dst = append(dst, l)
	}
	return dst
}
