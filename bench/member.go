package bench

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine"
	"github.com/nakcast/nakcast/engine/transport"
	"github.com/nakcast/nakcast/engine/transport/memtransport"
	"github.com/zeebo/xxh3"
)

// Payload layout of the messages the member harness sends (little-endian):
//
//	0  send time, ns of CLOCK_MONOTONIC (Nanotime)
//	8  message index, 1-based; the top bit marks the sender's last message
//	16 filler up to MsgSize
const (
	// MinMsgSize is the smallest message the member harness sends.
	MinMsgSize = 16
	lastFlag   = uint64(1) << 63
)

// MemberSchema names the JSON layout of MemberResult; it changes when a
// field changes meaning.
const MemberSchema = "nakcast.member/4"

// MemberID returns the identity of member index i (0-based) of the run
// whose identities start above runID: every process of one run computes the
// same static view from the run id and the member count.
func MemberID(runID uint64, i int) digest.Member {
	return digest.Member{ID: runID + uint64(i) + 1, Inc: 1}
}

// MemberConfig describes one engine member of a benchmark run. Zero fields
// take the defaults named.
type MemberConfig struct {
	// Config is the member's engine configuration, as engine.Open takes
	// it: Group (required), Interface, Keys, Encrypt, Insecure,
	// DiscardOwn, Network, Transport, Tuning and Agent. The harness sets
	// Self, Membership.Members (from RunID, Index and Members) and
	// Handler; Membership.MemberAddrs, if set, is every member's unicast
	// address in view order (Network.Unicast must then be this member's
	// entry, or unset). Logger defaults to discarding. With DiscardOwn a
	// sender does not deliver its own messages, and its record of its own
	// stream (count, seqnos, hash) is kept by the sending goroutine as
	// each message is accepted, so Verify checks every receiver against
	// what was sent. With Agent.ExclusiveSender the harness sends from one
	// goroutine.
	engine.Config
	// RunID is the base of the run's member identities (MemberID); it
	// must be the same in every member of a run and must not be 0.
	RunID uint64
	// Index is this member's position in the view (0-based; member 0 is
	// the coordinator) and Members the view size (default 1).
	Index, Members int
	// Senders lists the indexes of the members that send; every member
	// waits for the last message of each (default {0}).
	Senders []int
	// KeyFile is the key file Keys were read from (auth.ParseKeys):
	// MemberArgs passes it to a member process as -key-file, never the
	// keys themselves.
	KeyFile string
	// MsgSize is the size of each message (default 64, at least
	// MinMsgSize).
	MsgSize int
	// Count is the number of messages each sender sends; with Count 0 a
	// sender sends for Duration (default 2 s).
	Count    int64
	Duration time.Duration
	// Rate, if positive, paces each sender at this many messages per
	// second (Send per message; a message late on the schedule goes at
	// once).
	Rate float64
	// LossRate drops this fraction of the datagrams the member receives
	// before the protocol sees them (memtransport.Faults wrapped around
	// its transport, seeded from RunID and Index).
	LossRate float64
	// SendBatch > 1 makes a sender send with engine.Member.SendBatch, this
	// many messages a call (their send time is the batch's); 0 or 1: Send
	// per message.
	SendBatch int
	// SampleEvery records the latency of one message in SampleEvery
	// (default 1: every message); reading the clock per message costs a
	// few percent at tens of millions of messages per second.
	SampleEvery int
	// Timeout bounds the run once sending starts (default Duration or
	// 10 s, plus 30 s); the result is then marked incomplete.
	Timeout time.Duration
	// Grace is how long a member still waits for the senders' last
	// messages once ctx is cancelled (default 2 s): Ctrl-C ends sending,
	// the senders send their last message, the receivers get it.
	Grace time.Duration
	// Dynamic runs automatic membership (engine.Open without
	// Membership.Members: discovery, join, failure detection, leave)
	// instead of the static view of Members: Self is still MemberID(RunID,
	// Index) (gms picks the incarnation), and Membership.MemberAddrs, if
	// set, become Membership.InitialHosts (the other members' entries).
	// Either way the member waits, before Ready, until its view holds
	// Members members (at most viewWait).
	Dynamic bool
	// Join starts the member into a group already running (a restart in
	// a chaos schedule; with Dynamic): it waits only until its view holds
	// itself and one other member, and delivers from its join point on.
	Join bool
	// Ready, if set, is called once the member is open, before it sends;
	// Start, if set, is waited on before sending (the group starts
	// together).
	Ready func(*engine.Member)
	Start <-chan struct{}
}

// maxMembers bounds MemberConfig.Members.
const maxMembers = 1024

func (c MemberConfig) withDefaults() (MemberConfig, error) {
	if c.RunID == 0 {
		return c, errors.New("bench: MemberConfig.RunID must not be 0")
	}
	if c.Members == 0 {
		c.Members = 1
	}
	if c.Members < 1 || c.Members > maxMembers {
		return c, fmt.Errorf("bench: MemberConfig.Members %d: want 1..%d", c.Members, maxMembers)
	}
	if c.Index < 0 || c.Index >= c.Members {
		return c, fmt.Errorf("bench: MemberConfig.Index %d: want 0..%d", c.Index, c.Members-1)
	}
	if len(c.Senders) == 0 {
		c.Senders = []int{0}
	}
	for _, s := range c.Senders {
		if s < 0 || s >= c.Members {
			return c, fmt.Errorf("bench: MemberConfig.Senders: index %d: want 0..%d", s, c.Members-1)
		}
	}
	if c.MsgSize == 0 {
		c.MsgSize = 64
	}
	if c.MsgSize < MinMsgSize {
		return c, fmt.Errorf("bench: MemberConfig.MsgSize %d: want at least %d (send time and index)", c.MsgSize, MinMsgSize)
	}
	if c.Count < 0 || c.Duration < 0 {
		return c, fmt.Errorf("bench: MemberConfig.Count %d, Duration %v: want >= 0", c.Count, c.Duration)
	}
	if c.Count == 0 && c.Duration == 0 {
		c.Duration = 2 * time.Second
	}
	if c.Rate < 0 || (c.Rate > 0 && c.SendBatch > 1) {
		return c, fmt.Errorf("bench: MemberConfig.Rate %g: want >= 0, and 0 with SendBatch", c.Rate)
	}
	if c.SampleEvery == 0 {
		c.SampleEvery = 1
	}
	if c.SampleEvery < 0 {
		return c, fmt.Errorf("bench: MemberConfig.SampleEvery %d: want >= 1", c.SampleEvery)
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
		if c.Duration > 0 {
			c.Timeout += c.Duration
		} else {
			c.Timeout += 10 * time.Second
		}
	}
	if c.Grace == 0 {
		c.Grace = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c, nil
}

func (c MemberConfig) sends() bool {
	for _, s := range c.Senders {
		if s == c.Index {
			return true
		}
	}
	return false
}

// engineConfig is the member's engine configuration, and what its
// LossRate dropped so far.
func (c MemberConfig) engineConfig(h engine.Handler) (engine.Config, func() uint64) {
	ids := make([]digest.Member, c.Members)
	for i := range ids {
		ids[i] = MemberID(c.RunID, i)
	}
	e := c.Config
	e.Self, e.Membership.Members, e.Handler = ids[c.Index], ids, h
	if c.Dynamic {
		e.Membership.Members, e.Membership.MemberAddrs = nil, nil
		for i, a := range c.Membership.MemberAddrs {
			if i != c.Index {
				e.Membership.InitialHosts = append(e.Membership.InitialHosts, a)
			}
		}
	}
	var faulty atomic.Pointer[memtransport.Faulty]
	if c.LossRate > 0 {
		f, wrap := memtransport.Faults{Loss: c.LossRate, Seed: c.RunID ^ uint64(c.Index)}, e.Transport.Wrap
		e.Transport.Wrap = func(t transport.Transport) transport.Transport {
			if wrap != nil {
				t = wrap(t)
			}
			x := f.Wrap(t)
			faulty.Store(x)
			return x
		}
	}
	return e, func() uint64 {
		if x := faulty.Load(); x != nil {
			return x.Counts().Dropped
		}
		return 0
	}
}

// Latency summarises a latency histogram (send time in the payload to
// delivery), in nanoseconds. HDR is the whole histogram in the HdrHistogram
// V2 compressed encoding, base64, so that runs can be merged exactly.
type Latency struct {
	Count  int64   `json:"count"`
	MinNs  int64   `json:"min_ns"`
	P50Ns  int64   `json:"p50_ns"`
	P90Ns  int64   `json:"p90_ns"`
	P99Ns  int64   `json:"p99_ns"`
	P999Ns int64   `json:"p999_ns"`
	MaxNs  int64   `json:"max_ns"`
	MeanNs float64 `json:"mean_ns"`
	HDR    string  `json:"hdr,omitempty"`
}

// Histogram bounds: 100 ns .. 100 s at 3 significant digits.
const (
	histLowest  = 1
	histHighest = 100e9
	histDigits  = 3
)

// NewHistogram returns an HDR histogram with the harness's bounds.
func NewHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(histLowest, histHighest, histDigits)
}

// Summarize returns h's summary, with its encoding when encode is set.
func Summarize(h *hdrhistogram.Histogram, encode bool) Latency {
	l := Latency{Count: h.TotalCount()}
	if l.Count == 0 {
		return l
	}
	l.MinNs, l.MaxNs, l.MeanNs = h.Min(), h.Max(), h.Mean()
	l.P50Ns, l.P90Ns = h.ValueAtQuantile(50), h.ValueAtQuantile(90)
	l.P99Ns, l.P999Ns = h.ValueAtQuantile(99), h.ValueAtQuantile(99.9)
	if encode {
		if b, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase); err == nil {
			l.HDR = base64.StdEncoding.EncodeToString(b)
		}
	}
	return l
}

// Histogram decodes l.HDR; nil when it is empty or unreadable.
func (l Latency) Histogram() *hdrhistogram.Histogram {
	if l.HDR == "" {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(l.HDR)
	if err != nil {
		return nil
	}
	h, err := hdrhistogram.Decode(b)
	if err != nil {
		return nil
	}
	return h
}

// SenderResult is what one member delivered of one sender.
type SenderResult struct {
	// Sender is the sender's member ID, Index its position in the view.
	Sender uint64 `json:"sender"`
	Index  int    `json:"index"`
	// Delivered is the number of messages delivered; FirstSeq and LastSeq
	// the first and last seqnos delivered (0 when none).
	Delivered int64  `json:"delivered"`
	FirstSeq  uint64 `json:"first_seq"`
	LastSeq   uint64 `json:"last_seq"`
	// Hash is an order-sensitive hash of what was delivered: a fold, in
	// delivery order, of the blocks of Segments as they close, each as
	// x = its hash ^ Seg*P3 ^ N*P4, h = rotl64(h*P1 ^ x, 31) * P2 from
	// h = 0, where a block's hash is the same fold over its messages with
	// x = XXH3-64(payload) ^ seqno*P3 ^ length*P4 (P1..P4 xxhash64's
	// primes 1..4; see FoldHash); 16 hex digits. Folding blocks, not
	// messages, costs one fold a message, not two; equal streams still
	// give equal blocks in the same order.
	Hash string `json:"hash"`
	// OutOfOrder counts deliveries and lost ranges that go back over
	// seqnos already delivered or reported, and deliveries whose payload
	// index is not their seqno (must be 0). A gap forward starts a new run
	// (Runs).
	OutOfOrder int64 `json:"out_of_order"`
	// Lost are the lost ranges reported (must be empty without crashes or
	// partitions); LostMsgs their total size.
	Lost     []digest.Range `json:"lost"`
	LostMsgs int64          `json:"lost_msgs"`
	// Runs are the stretches of seqnos the member went through without a
	// gap, each delivered or reported lost (one run from FirstSeq without
	// faults; a member that joined late, was excluded and rejoined, or
	// saw the sender leave its view and come back starts a new run where
	// its delivery resumed).
	Runs []digest.Range `json:"runs,omitempty"`
	// Segments hash what was delivered in each block of SegmentSeqnos
	// seqnos (FoldHash from 0 over the block's deliveries): members that
	// joined at different points compare the blocks both delivered whole.
	Segments []SegmentHash `json:"segments,omitempty"`
	// Complete says the sender's last message was delivered.
	Complete bool `json:"complete"`
	// FirstSendNs is the send time carried by the first message delivered
	// and LastDeliverNs the delivery time of the last (CLOCK_MONOTONIC
	// ns); MsgsPerSec and MBPerSec are Delivered (and its payload bytes,
	// MB = 1e6) over that span.
	FirstSendNs   int64   `json:"first_send_ns"`
	LastDeliverNs int64   `json:"last_deliver_ns"`
	MsgsPerSec    float64 `json:"msgs_per_sec"`
	MBPerSec      float64 `json:"mb_per_sec"`
	// Latency is send (payload timestamp) to delivery.
	Latency Latency `json:"latency"`
}

// MemberResult is what RunMember measured: the member process's JSON
// output (schema MemberSchema).
type MemberResult struct {
	Schema    string  `json:"schema"`
	RunID     uint64  `json:"run_id"`
	Member    uint64  `json:"member"`
	Index     int     `json:"index"`
	Members   int     `json:"members"`
	Role      string  `json:"role"` // "send" or "receive"
	Group     string  `json:"group"`
	Interface string  `json:"interface"`
	MsgSize   int     `json:"msg_size"`
	LossRate  float64 `json:"loss_rate"`
	// Sent is the number of messages this member sent, from SendStartNs
	// for SendNs.
	Sent        int64 `json:"sent"`
	SendStartNs int64 `json:"send_start_ns"`
	SendNs      int64 `json:"send_ns"`
	// Senders has one entry per sender of the run, in view order.
	Senders []SenderResult `json:"senders"`
	// Complete says every sender's last message was delivered and the
	// member closed after draining.
	Complete bool `json:"complete"`
	// Interrupted says the run was cancelled (Ctrl-C) before the end.
	Interrupted bool `json:"interrupted,omitempty"`
	// Error is the first error met, if any.
	Error string `json:"error,omitempty"`
	// NetDrops are the datagrams the network dropped on this member's way
	// out (RunNetns with EgressLoss), if any.
	NetDrops *NetDrops `json:"net_drops,omitempty"`
	// Stats are the engine's counters at the end.
	Stats engine.Stats `json:"stats"`
	// Injected counts the received datagrams LossRate dropped.
	Injected uint64 `json:"injected"`
	// CPUNs is the CPU time (user and system) this member's process used
	// from the start of sending to the last delivery, and DatagramsIn the
	// datagrams its engine read in that span: CPUNs/DatagramsIn is the
	// receiver's CPU per datagram. System time includes the kernel's
	// network work run in this process's context (a sender's transmit
	// path through the veth pair and bridge, receivers' softirqs there).
	CPUNs       int64  `json:"cpu_ns"`
	DatagramsIn uint64 `json:"datagrams_in"`
	// Views are the views this member installed, in order, and Events
	// the other engine events it got (suspicions, lost ranges, lagging,
	// leaving), with the times it read them.
	Views  []ViewRecord  `json:"views,omitempty"`
	Events []EventRecord `json:"events,omitempty"`
	// Restart is 0 for a member process started with the run, k for
	// the k-th restart of member Index by a chaos schedule, and Killed
	// says the schedule killed this process (RunNetns sets both).
	Restart int  `json:"restart,omitempty"`
	Killed  bool `json:"killed,omitempty"`
	// Timeline samples, every TimelineInterval from the start of sending,
	// how many messages of the other senders this member had delivered
	// (for throughput over time); at most MaxTimeline samples.
	Timeline []TimelineSample `json:"timeline,omitempty"`
}

// TimelineSample is one point of MemberResult.Timeline: at Ns
// (CLOCK_MONOTONIC), Delivered messages of other senders (counted in steps
// of timelineStep, exact at the end).
type TimelineSample struct {
	Ns        int64 `json:"ns"`
	Delivered int64 `json:"delivered"`
}

// TimelineInterval is the sampling period of MemberResult.Timeline and
// MaxTimeline its length bound.
const (
	TimelineInterval = 100 * time.Millisecond
	MaxTimeline      = 36000
	timelineStep     = 64
)

// FoldHash folds one delivered message (its seqno and payload) into the
// order-sensitive hash h of its block (SegmentHash; SenderResult.Hash
// folds the blocks).
func FoldHash(h, seq uint64, p []byte) uint64 {
	return foldSum(h, seq, xxh3.Hash(p), len(p))
}

// foldSum is FoldHash for a payload of n bytes whose XXH3 is sum: a
// delivery folds one sum into the stream's hash and its block's
// (segment), so that the payload is hashed once, not twice.
func foldSum(h, seq, sum uint64, n int) uint64 {
	const (
		p1 = 11400714785074694791
		p2 = 14029467366897019727
		p3 = 1609587929392839161
		p4 = 9650029242287828579
	)
	x := sum ^ seq*p3 ^ uint64(n)*p4
	return bits.RotateLeft64(h*p1^x, 31) * p2
}

// SegmentSeqnos is the size of the seqno blocks SenderResult.Segments
// hashes: block k holds seqnos k*SegmentSeqnos+1 .. (k+1)*SegmentSeqnos.
const SegmentSeqnos = 1024

// SegmentHash is the hash of the messages one member delivered of one
// block of a sender's seqnos (Seg, from 0): N messages folded with
// FoldHash from 0, 16 hex digits.
type SegmentHash struct {
	Seg  uint64 `json:"seg"`
	N    int    `json:"n"`
	Hash string `json:"hash"`
}

// recvState is one sender's delivery bookkeeping, owned by the agent
// goroutine that calls the handler.
type recvState struct {
	res      SenderResult
	hash     uint64
	hist     *hdrhistogram.Histogram
	nextIdx  uint64
	bytes    int64
	complete atomic.Bool
	// runFrom is the first seqno of the current run (0: none yet) and
	// expect the seqno that continues it.
	runFrom, expect uint64
	// seg, segHash and segN are the current block of Segments, segs the
	// closed ones (made SegmentHash, with their hash in hex, by finish).
	seg, segHash uint64
	segN         int
	segs         []segSum
	// now is the delivery time of the current run (0: not read yet).
	now int64
	// one holds the payload of a delivery that comes alone (Deliver).
	one [1][]byte
	// progress is Delivered, published every timelineStep deliveries
	// for the timeline sampler.
	progress atomic.Int64
}

// memberHandler records deliveries of every sender; it allocates nothing
// per message.
type memberHandler struct {
	base    uint64 // MemberID(runID, i).ID == base+i+1
	bySlot  []*recvState
	sampled sampler
	pending atomic.Int32 // senders whose last message is still to come
	done    chan struct{}
	once    sync.Once
}

// newMemberHandler is the handler of a member of a group of members
// whose ids are base+1.., recording the latency of one message in every.
func newMemberHandler(base uint64, members, every int) *memberHandler {
	return &memberHandler{base: base, bySlot: make([]*recvState, members), sampled: newSampler(every), done: make(chan struct{})}
}

// sampler picks the messages whose latency is recorded: payload index
// idx is sampled when idx % every == 0, with a mask, not a division, when
// every is a power of two. Senders and receivers pick the same ones.
type sampler struct {
	every uint64
	pow2  bool
}

func newSampler(every int) sampler {
	e := uint64(max(every, 1))
	return sampler{every: e, pow2: e&(e-1) == 0}
}

// hit reports whether payload index idx is sampled.
func (s sampler) hit(idx uint64) bool {
	if s.pow2 {
		return idx&(s.every-1) == 0
	}
	return idx%s.every == 0
}

func (h *memberHandler) state(s digest.Member) *recvState {
	i := s.ID - h.base - 1
	if i >= uint64(len(h.bySlot)) {
		return nil
	}
	return h.bySlot[i]
}

// Deliver implements engine.Handler.
func (h *memberHandler) Deliver(sender digest.Member, seq uint64, p []byte) {
	if st := h.state(sender); st != nil {
		st.one[0] = p
		h.deliverRun(st, seq, st.one[:])
		st.one[0] = nil
	}
}

// DeliverBatch implements engine.BatchHandler: the sender's state is
// looked up once a run, not once a message.
func (h *memberHandler) DeliverBatch(sender digest.Member, first uint64, ps [][]byte) {
	if st := h.state(sender); st != nil {
		h.deliverRun(st, first, ps)
	}
}

// deliverRun records delivered messages first, first+1, ... (payloads ps)
// of st's sender. It leaves the same record as recording them one at a
// time (TestMemberHandlerBatchModel): what does not depend on
// the payloads (the run, the count, the timeline) is kept once a run,
// the rest (hashes, the payload index, latency samples) once a message.
func (h *memberHandler) deliverRun(st *recvState, first uint64, ps [][]byte) {
	r := &st.res
	if len(ps) == 0 {
		return
	}
	if r.Delivered == 0 {
		r.FirstSeq = first
		if len(ps[0]) >= MinMsgSize {
			r.FirstSendNs = int64(binary.LittleEndian.Uint64(ps[0]))
		}
	}
	last := first + uint64(len(ps)) - 1
	var back uint64
	if first < st.expect && st.runFrom != 0 {
		// Back over seqnos already delivered or reported, up to back:
		// each such message is out of order, and its payload index is
		// expected to be its seqno, as a delivery on its own would have it.
		back = st.expect
		r.OutOfOrder += int64(min(last+1, back) - first)
	}
	st.follow(first, last)
	st.now = 0
	before := r.Delivered
	r.Delivered += int64(len(ps))
	r.LastSeq = last
	if r.Delivered/timelineStep != before/timelineStep {
		st.progress.Store(r.Delivered - r.Delivered%timelineStep)
	}
	for seq := first; len(ps) > 0; {
		if k := (seq - 1) / SegmentSeqnos; k != st.seg {
			st.flushSegment()
			st.seg = k
		}
		n := min(uint64(len(ps)), (st.seg+1)*SegmentSeqnos-(seq-1))
		h.deliverBlock(st, seq, back, ps[:n])
		seq += n
		ps = ps[n:]
	}
}

// deliverBlock does deliverRun's work of each message for a stretch of
// messages inside one block of Segments, with the hashes and the payload
// index in locals; seqnos below back go back over earlier ones.
func (h *memberHandler) deliverBlock(st *recvState, seq, back uint64, ps [][]byte) {
	segHash, next := st.segHash, st.nextIdx
	var bytes, odd int64
	ended := false
	for _, p := range ps {
		bytes += int64(len(p))
		sum := xxh3.Hash(p)
		segHash = foldSum(segHash, seq, sum, len(p))
		if seq < back {
			next = seq
		}
		seq++
		if len(p) < MinMsgSize {
			odd++
			continue
		}
		idx := binary.LittleEndian.Uint64(p[8:])
		end := idx&lastFlag != 0
		idx &^= lastFlag
		if idx != next {
			odd++
		}
		next = idx + 1
		if hit := h.sampled.hit(idx); end || hit {
			h.sample(st, p, hit)
			ended = ended || end
		}
	}
	st.segHash, st.nextIdx = segHash, next
	st.segN += len(ps)
	st.bytes += bytes
	st.res.OutOfOrder += odd
	if ended {
		st.progress.Store(st.res.Delivered)
		h.complete(st)
	}
}

// sample records the latency of message p if hit (it is sampled), and
// the time of the stream's last delivery so far. The engine hands over a
// run's messages in one call, so they share one delivery time: the clock
// is read once a run, at its first sampled message.
func (h *memberHandler) sample(st *recvState, p []byte, hit bool) {
	if st.now == 0 {
		st.now = Nanotime()
	}
	now := st.now
	if hit {
		_ = st.hist.RecordValue(max(now-int64(binary.LittleEndian.Uint64(p)), histLowest))
	}
	st.res.LastDeliverNs = now
}

// follow moves the stream on over seqnos from..to (a delivery, or a lost
// range): a stretch beyond the expected seqno starts a new run (a gap no
// lost range covered); one before it goes back over seqnos already
// delivered or reported, and follow reports false.
func (st *recvState) follow(from, to uint64) bool {
	ok := true
	switch {
	case st.runFrom == 0:
		st.runFrom = from
	case from > st.expect:
		st.res.Runs = append(st.res.Runs, digest.Range{From: st.runFrom, To: st.expect - 1})
		st.runFrom = from
	case from < st.expect:
		ok = false
	}
	if from != st.expect {
		st.nextIdx = from // the payload index is the seqno
	}
	st.expect = max(st.expect, to+1)
	return ok
}

// segment folds delivered message seq (n bytes, XXH3 sum) into its
// block's hash.
func (st *recvState) segment(seq, sum uint64, n int) {
	if k := (seq - 1) / SegmentSeqnos; k != st.seg {
		st.flushSegment()
		st.seg = k
	}
	st.segHash = foldSum(st.segHash, seq, sum, n)
	st.segN++
}

// segSum is a closed block of Segments.
type segSum struct {
	seg, hash uint64
	n         int
}

// flushSegment closes the current block and folds it into the stream's
// hash.
func (st *recvState) flushSegment() {
	if st.segN > 0 {
		st.segs = append(st.segs, segSum{seg: st.seg, hash: st.segHash, n: st.segN})
		st.hash = foldSum(st.hash, st.seg, st.segHash, st.segN)
	}
	st.segHash, st.segN = 0, 0
}

// finish closes the open run and block once the agent has stopped.
func (st *recvState) finish() {
	if st.runFrom != 0 {
		st.res.Runs = append(st.res.Runs, digest.Range{From: st.runFrom, To: st.expect - 1})
		st.runFrom = 0
	}
	st.flushSegment()
	for _, g := range st.segs {
		st.res.Segments = append(st.res.Segments, SegmentHash{Seg: g.seg, N: g.n, Hash: fmt.Sprintf("%016x", g.hash)})
	}
	st.segs = st.segs[:0]
}

// recordSent is Deliver for a DiscardOwn sender's own stream, called by
// the sending goroutine once the engine accepted message seq (the engine
// numbers a member's messages 1, 2, ...): the same count, seqnos and hash
// a receiver records. No latency: a sender's own stream has none to report.
func (h *memberHandler) recordSent(st *recvState, seq uint64, p []byte, last bool) {
	r := &st.res
	if r.Delivered == 0 {
		r.FirstSeq = seq
	}
	r.Delivered++
	r.LastSeq = seq
	st.bytes += int64(len(p))
	sum := xxh3.Hash(p)
	if r.Delivered%timelineStep == 0 || last {
		st.progress.Store(r.Delivered)
	}
	st.follow(seq, seq)
	st.segment(seq, sum, len(p))
	if last {
		h.complete(st)
	}
}

// complete marks st's stream complete (its last message seen); the last
// stream to complete ends the wait.
func (h *memberHandler) complete(st *recvState) {
	if !st.complete.Swap(true) && h.pending.Add(-1) == 0 {
		h.once.Do(func() { close(h.done) })
	}
}

// Lost implements engine.Handler.
func (h *memberHandler) Lost(sender digest.Member, from, to uint64) {
	if st := h.state(sender); st != nil {
		st.res.Lost = append(st.res.Lost, digest.Range{From: from, To: to})
		st.res.LostMsgs += int64(to - from + 1)
		if !st.follow(from, to) {
			st.res.OutOfOrder++
		}
		st.nextIdx = to + 1
	}
}

// RunMember runs one member of a benchmark group: it opens the engine
// member (push delivery), sends if it is one of the senders (Count messages
// or for Duration, the last one marked), and returns once it has delivered
// every sender's last message and drained its own sends, or the timeout
// passes. Cancelling ctx stops sending early (the last message is still
// sent, so receivers end cleanly) and, after Grace, receiving. The result
// is filled in on every path once the member opened; the error says why a
// run did not complete.
func RunMember(ctx context.Context, cfg MemberConfig) (MemberResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return MemberResult{}, err
	}
	h := newMemberHandler(cfg.RunID, cfg.Members, cfg.SampleEvery)
	states := make([]*recvState, 0, len(cfg.Senders))
	for _, s := range cfg.Senders {
		if h.bySlot[s] != nil {
			continue
		}
		st := &recvState{hist: NewHistogram(), nextIdx: 1}
		st.res.Sender, st.res.Index = MemberID(cfg.RunID, s).ID, s
		h.bySlot[s] = st
		states = append(states, st)
	}
	h.pending.Store(int32(len(states)))

	res := MemberResult{Schema: MemberSchema, RunID: cfg.RunID, Member: MemberID(cfg.RunID, cfg.Index).ID,
		Index: cfg.Index, Members: cfg.Members, Role: "receive", Group: cfg.Group.String(), Interface: cfg.Interface,
		MsgSize: cfg.MsgSize, LossRate: cfg.LossRate}
	if cfg.sends() {
		res.Role = "send"
	}
	ec, injected := cfg.engineConfig(h)
	m, err := engine.Open(ctx, ec)
	if err != nil {
		return MemberResult{}, fmt.Errorf("bench: member %d: %w", cfg.Index, err)
	}
	if max := m.Config().Tuning.MaxMessage; cfg.MsgSize > max {
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = m.Close(closeCtx)
		cancel()
		return MemberResult{}, fmt.Errorf("bench: member %d: MsgSize %d: larger than the engine's largest message (Tuning.MaxMessage %d)", cfg.Index, cfg.MsgSize, max)
	}
	// With ThreadingInvoked the agent runs on a harness goroutine from
	// the start (the group forms, receivers receive); a sender's runs on
	// its sending goroutine once it sends (Send waits and a DoWork every
	// invokedWorkEvery messages), then on a harness goroutine again until
	// the run ends.
	stopDriving := DriveInvoked(m, cfg.Agent.Idle)
	full := cfg.Members
	if cfg.Join {
		full = min(2, cfg.Members)
	}
	ev := recordEvents(m, full)
	if !ev.waitFull(ctx, viewWait) {
		stopDriving()
		id, v := m.View()
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = m.Close(closeCtx)
		cancel()
		ev.stop(m, full)
		return MemberResult{}, fmt.Errorf("bench: member %d: its view did not reach %d members within %v (view %v has %d)", cfg.Index, full, viewWait, id, len(v))
	}
	if cfg.Ready != nil {
		cfg.Ready(m)
	}
	if cfg.Start != nil {
		select {
		case <-cfg.Start:
		case <-ctx.Done():
		}
	}
	if cfg.sends() {
		stopDriving()
		stopDriving = nil
	}
	runCtx, cancelRun := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancelRun()
	cpu0, in0 := ProcessCPU(), m.Stats().DatagramsIn

	var sendErr error
	sendDone := make(chan struct{})
	if cfg.sends() {
		var own *ownRecord
		if cfg.DiscardOwn {
			own = &ownRecord{h: h, st: h.bySlot[cfg.Index]}
		}
		go func() {
			defer close(sendDone)
			res.SendStartNs = Nanotime()
			if cfg.SendBatch > 1 {
				res.Sent, sendErr = sendBatches(ctx, runCtx, m, cfg, own)
			} else {
				res.Sent, sendErr = sendMessages(ctx, runCtx, m, cfg, own)
			}
			res.SendNs = Nanotime() - res.SendStartNs
			stopDriving = DriveInvoked(m, cfg.Agent.Idle) // read after <-sendDone
		}()
	} else {
		close(sendDone)
	}

	others := make([]*recvState, 0, len(states))
	for _, st := range states {
		if st.res.Index != cfg.Index {
			others = append(others, st)
		}
	}
	sample := func() {
		if len(res.Timeline) >= MaxTimeline {
			return
		}
		var n int64
		for _, st := range others {
			n += st.progress.Load()
		}
		res.Timeline = append(res.Timeline, TimelineSample{Ns: Nanotime(), Delivered: n})
	}
	sample()
	tick := time.NewTicker(TimelineInterval)
	defer tick.Stop()

	var graceC <-chan time.Time
	ctxDone, sendDoneC := ctx.Done(), (<-chan struct{})(sendDone)
	timedOut := false
wait:
	for {
		select {
		case <-h.done:
			break wait
		case <-sendDoneC:
			if sendErr != nil {
				break wait // the last message will not come from here
			}
			sendDoneC = nil
		case <-tick.C:
			sample()
		case <-ctxDone:
			res.Interrupted = true
			ctxDone = nil
			graceC = time.After(cfg.Grace)
		case <-graceC:
			break wait
		case <-runCtx.Done():
			timedOut = true
			break wait
		}
	}
	sample()
	res.CPUNs, res.DatagramsIn = int64(ProcessCPU()-cpu0), m.Stats().DatagramsIn-in0
	<-sendDone
	if stopDriving != nil {
		stopDriving() // Close runs the agent itself
	}
	closeCtx, cancelClose := context.WithTimeout(context.Background(), 10*time.Second)
	closeErr := m.Close(closeCtx)
	cancelClose()
	res.Stats = m.Stats() // after the drain: a sender's repairs happen there too
	ev.stop(m, full)
	res.Views, res.Events = ev.views, ev.events
	res.Injected = injected()
	// The agent has stopped: the handler's state is ours to read.
	res.Complete = true
	for _, st := range states {
		st.finish()
		r := st.res
		r.Complete = st.complete.Load()
		r.Hash = fmt.Sprintf("%016x", st.hash)
		if span := r.LastDeliverNs - r.FirstSendNs; span > 0 && r.Delivered > 0 {
			r.MsgsPerSec = float64(r.Delivered) / (float64(span) / 1e9)
			r.MBPerSec = float64(st.bytes) / (float64(span) / 1e9) / 1e6
		}
		r.Latency = Summarize(st.hist, true)
		if r.Lost == nil {
			r.Lost = []digest.Range{}
		}
		res.Complete = res.Complete && r.Complete
		res.Senders = append(res.Senders, r)
	}
	switch {
	case sendErr != nil:
		err = fmt.Errorf("bench: member %d: send: %w", cfg.Index, sendErr)
	case timedOut:
		err = fmt.Errorf("bench: member %d: timed out after %v waiting for the senders' last messages", cfg.Index, cfg.Timeout)
	case !res.Complete && !res.Interrupted:
		err = fmt.Errorf("bench: member %d: incomplete", cfg.Index)
	case closeErr != nil && !res.Interrupted:
		err = fmt.Errorf("bench: member %d: %w", cfg.Index, closeErr)
	}
	res.Complete = res.Complete && closeErr == nil
	if err != nil {
		res.Error = err.Error()
	}
	return res, err
}

// viewWait bounds how long RunMember waits, after Open, for its view to
// hold every member of the run (dynamic membership: the others' joins).
const viewWait = 20 * time.Second

// invokedWorkEvery is how many messages an engine.ThreadingInvoked
// sender sends between two DoWork calls of its own (besides those Send
// and SendBatch run while they wait for room): each writes what was
// bundled and flushes the open bundle.
const invokedWorkEvery = 1024

// DriveInvoked runs m's agent on a goroutine of its own when m runs with
// engine.ThreadingInvoked, until the returned stop is called (stop waits
// for the goroutine; calling it again does nothing): DoWork in a loop,
// idling between calls that found nothing to do as idle says (IdleSpin:
// not at all; IdleYield: runtime.Gosched; IdleBlock: yields for the first
// blockAfterIdle of them in a row, then WaitWork, which sleeps until the
// agent has work). For another threading mode it does nothing. It is the
// application loop of the harness's receivers and of the benchmarks'
// answering members.
func DriveInvoked(m *engine.Member, idle engine.IdleStrategy) (stop func()) {
	if m.Config().Agent.Threading != engine.ThreadingInvoked {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		idles := 0
		for {
			select {
			case <-quit:
				return
			default:
			}
			if m.DoWork() > 0 {
				idles = 0
				continue
			}
			idles++
			switch {
			case idle == engine.IdleSpin:
			case idle == engine.IdleBlock && idles > blockAfterIdle:
				m.WaitWork(time.Millisecond)
			default:
				runtime.Gosched()
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit); <-done }) }
}

// blockAfterIdle is how many idle DoWork calls in a row DriveInvoked
// yields through before it sleeps in WaitWork (IdleBlock): tens of
// microseconds, as the engine's own IdleBlock yields for 50 us.
const blockAfterIdle = 64

// ownRecord is where a DiscardOwn sender records its own stream (nil
// otherwise: the handler records it on delivery).
type ownRecord struct {
	h  *memberHandler
	st *recvState
}

func (o *ownRecord) sent(seq uint64, p []byte, last bool) {
	if o != nil {
		o.h.recordSent(o.st, seq, p, last)
	}
}

// sendMessages sends cfg.Count messages (or for cfg.Duration, or until
// ctx ends) with Send; the last is marked. The last message is sent under
// runCtx, so a cancelled ctx still ends the stream cleanly.
func sendMessages(ctx, runCtx context.Context, m *engine.Member, cfg MemberConfig, own *ownRecord) (int64, error) {
	p := make([]byte, cfg.MsgSize)
	for i := MinMsgSize; i < len(p); i++ {
		p[i] = byte(i)
	}
	deadline, sendCtx, cancel := sendSetup(ctx, runCtx, cfg)
	defer cancel()
	// The send time goes into the messages whose latency receivers
	// record (index % SampleEvery == 0) and the first; the clock is read
	// for those and every 256th message (the deadline), not for every
	// message: a read costs a large share of what the engine spends on a
	// small message.
	sampled := newSampler(cfg.SampleEvery)
	invoked := m.Config().Agent.Threading == engine.ThreadingInvoked
	var i uint64
	var now, start int64
	stop := false
	for {
		i++
		last := cfg.Count > 0 && int64(i) >= cfg.Count
		if i == 1 || i&255 == 0 || cfg.Rate > 0 || sampled.hit(i) {
			now = Nanotime()
		}
		if i == 1 {
			start = now
		}
		if cfg.Rate > 0 {
			now = pace(start, i, cfg.Rate, now)
		}
		// The end (cancelled, or past the deadline) is checked every
		// 256th message, as the clock is read; a Send that failed on the
		// cancellation ends it at once (stop).
		if !last && (stop || (i&255 == 0 && (sendCtx.Err() != nil || (deadline != 0 && now > deadline)))) {
			last = true
		}
		idx := i
		c := sendCtx
		if last {
			idx |= lastFlag
			c = runCtx
		}
		binary.LittleEndian.PutUint64(p, uint64(now))
		binary.LittleEndian.PutUint64(p[8:], idx)
		if err := m.Send(c, p); err != nil {
			if !last && ctx.Err() != nil {
				i-- // not sent: send the last message in its place
				stop = true
				continue
			}
			return int64(i - 1), err
		}
		if invoked && i%invokedWorkEvery == 0 {
			m.DoWork()
		}
		own.sent(i, p, last)
		if last {
			return int64(i), nil
		}
	}
}

// pace waits until message i (from 1) is due on a schedule of rate
// messages per second from start (Nanotime), and returns the time then.
func pace(start int64, i uint64, rate float64, now int64) int64 {
	due := start + int64(float64(i-1)*1e9/rate)
	if d := due - now; d > 0 {
		time.Sleep(time.Duration(d))
		return Nanotime()
	}
	return now
}

// sendBatches is sendMessages with engine.Member.SendBatch, cfg.SendBatch
// messages a call: the same payloads (send time, index, pattern), the send
// time read once per batch, and the same last message.
func sendBatches(ctx, runCtx context.Context, m *engine.Member, cfg MemberConfig, own *ownRecord) (int64, error) {
	bufs := make([][]byte, cfg.SendBatch)
	for k := range bufs {
		bufs[k] = make([]byte, cfg.MsgSize)
		for i := MinMsgSize; i < cfg.MsgSize; i++ {
			bufs[k][i] = byte(i)
		}
	}
	deadline, sendCtx, cancel := sendSetup(ctx, runCtx, cfg)
	defer cancel()
	invoked := m.Config().Agent.Threading == engine.ThreadingInvoked
	var sent uint64
	for {
		now := Nanotime()
		n := uint64(len(bufs))
		last := false
		if cfg.Count > 0 && sent+n >= uint64(cfg.Count) {
			n, last = uint64(cfg.Count)-sent, true
		}
		if !last && (sendCtx.Err() != nil || (deadline != 0 && now > deadline)) {
			n, last = 1, true // the last message alone
		}
		c := sendCtx
		if last {
			c = runCtx
		}
		for j := range n {
			idx := sent + 1 + j
			if last && j == n-1 {
				idx |= lastFlag
			}
			binary.LittleEndian.PutUint64(bufs[j], uint64(now))
			binary.LittleEndian.PutUint64(bufs[j][8:], idx)
		}
		k, err := m.SendBatch(c, bufs[:n])
		for j := range k {
			own.sent(sent+1+uint64(j), bufs[j], last && uint64(j) == n-1)
		}
		if invoked && (sent+uint64(k))/invokedWorkEvery != sent/invokedWorkEvery {
			m.DoWork()
		}
		sent += uint64(k)
		if err != nil {
			if !last && ctx.Err() != nil {
				continue // ended early: the next round sends the last message
			}
			return int64(sent), err
		}
		if last {
			return int64(sent), nil
		}
	}
}

// sendSetup returns a sender's deadline (Nanotime; 0 without a Duration)
// and the context its messages but the last are sent under: ctx, also
// cancelled when runCtx ends. cancel releases it.
func sendSetup(ctx, runCtx context.Context, cfg MemberConfig) (deadline int64, sendCtx context.Context, cancel func()) {
	if cfg.Duration > 0 {
		deadline = Nanotime() + int64(cfg.Duration)
	}
	sendCtx, cancelSend := context.WithCancel(ctx)
	stop := context.AfterFunc(runCtx, cancelSend)
	return deadline, sendCtx, func() { stop(); cancelSend() }
}
