package sim

import (
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/nakcast/nakcast/digest"
)

// Hash is the hash the simulator keeps of a payload: FNV-1a, 64 bits.
func Hash(payload []byte) uint64 {
	h := fnv.New64a()
	h.Write(payload)
	return h.Sum64()
}

// Ledger is what every sender sent: for each sender, every message's seqno
// run (one seqno, or one per fragment for a fragmented message) and the
// hash of its payload. Recorders check deliveries against it.
type Ledger struct {
	sent    map[digest.Member][]sentMsg
	senders []digest.Member // first-send order, for deterministic iteration
	total   int
}

// sentMsg is one message in a Ledger.
type sentMsg struct {
	first, last uint64
	hash        uint64
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger { return &Ledger{sent: make(map[digest.Member][]sentMsg)} }

// Record notes that sender sent payload as seqnos first..last (first ==
// last unless fragmented). A sender's messages must be recorded in seqno
// order without holes: the protocol assigns seqnos from 1.
func (l *Ledger) Record(sender digest.Member, first, last uint64, payload []byte) error {
	s, ok := l.sent[sender]
	if !ok {
		l.senders = append(l.senders, sender)
	}
	prev := uint64(0)
	if len(s) > 0 {
		prev = s[len(s)-1].last
	}
	if first != prev+1 || last < first {
		return fmt.Errorf("ledger: %v sent seqnos %d..%d after %d", sender, first, last, prev)
	}
	l.sent[sender] = append(s, sentMsg{first: first, last: last, hash: Hash(payload)})
	l.total++
	return nil
}

// Highest returns the highest seqno sender has sent (0 if none).
func (l *Ledger) Highest(sender digest.Member) uint64 {
	s := l.sent[sender]
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1].last
}

// Message returns the message of sender that seqno seq belongs to: its
// first and last seqno (first == last unless fragmented) and its payload
// hash; ok is false if sender never sent seq.
func (l *Ledger) Message(sender digest.Member, seq uint64) (first, last, hash uint64, ok bool) {
	s := l.sent[sender]
	i, found := slices.BinarySearchFunc(s, seq, func(m sentMsg, seq uint64) int {
		switch {
		case m.last < seq:
			return -1
		case m.first > seq:
			return 1
		}
		return 0
	})
	if !found {
		return 0, 0, 0, false
	}
	return s[i].first, s[i].last, s[i].hash, true
}

// Senders returns the senders in the order they first sent.
func (l *Ledger) Senders() []digest.Member { return slices.Clone(l.senders) }

// Total returns the number of messages sent by all senders.
func (l *Ledger) Total() int { return l.total }

// LostRange is one lost-range report received by an application.
type LostRange struct {
	Sender   digest.Member
	From, To uint64
}

// recvState is a recorder's view of one sender.
type recvState struct {
	next      uint64 // next seqno expected
	idx       int    // index in the ledger of the first message at or after next
	delivered uint64 // messages delivered
	lost      uint64 // seqnos reported lost
}

// Recorder is one member's application: it records what the protocol
// delivers and reports lost, and checks on every call the per-sender
// invariant: seqnos come in increasing order, each exactly once, with no gap
// that a lost-range report does not cover, and every payload is the one the
// sender sent. The first violation fails the Sim it was made for.
type Recorder struct {
	sim    *Sim
	self   digest.Member
	ledger *Ledger
	per    map[digest.Member]*recvState
	order  []digest.Member
	losts  []LostRange
	total  uint64
	// OnDeliver, if set, is called after every checked delivery: member
	// delivered sender's message of seqnos first..last at virtual time at.
	OnDeliver func(member, sender digest.Member, first, last uint64, at time.Duration)
}

// NewRecorder returns the recorder of member self, checking against ledger
// and failing s on a violation.
func NewRecorder(s *Sim, self digest.Member, ledger *Ledger) *Recorder {
	return &Recorder{sim: s, self: self, ledger: ledger, per: make(map[digest.Member]*recvState)}
}

func (r *Recorder) state(sender digest.Member) *recvState {
	st, ok := r.per[sender]
	if !ok {
		st = &recvState{next: 1}
		r.per[sender] = st
		r.order = append(r.order, sender)
	}
	return st
}

// Start declares that delivery from sender starts after seqno delivered (a
// member that joined with a digest, or installed state). It must come
// before the first delivery from sender.
func (r *Recorder) Start(sender digest.Member, delivered uint64) {
	st := r.state(sender)
	st.next = delivered + 1
	r.seek(sender, st)
}

// seek moves st.idx to the first ledger message of sender starting at or
// after st.next.
func (r *Recorder) seek(sender digest.Member, st *recvState) {
	sent := r.ledger.sent[sender]
	for st.idx < len(sent) && sent[st.idx].first < st.next {
		st.idx++
	}
}

// Deliver records the delivery of sender's message seq.
func (r *Recorder) Deliver(sender digest.Member, seq uint64, payload []byte) {
	st := r.state(sender)
	switch {
	case seq < st.next:
		r.sim.Fail(fmt.Errorf("member %v: %v#%d delivered again or out of order (expected %d)", r.self, sender, seq, st.next))
		return
	case seq > st.next:
		r.sim.Fail(fmt.Errorf("member %v: %v#%d delivered with %d..%d neither delivered nor reported lost", r.self, sender, seq, st.next, seq-1))
		return
	}
	sent := r.ledger.sent[sender]
	if st.idx >= len(sent) || sent[st.idx].first != seq {
		r.sim.Fail(fmt.Errorf("member %v: %v#%d delivered but no message was sent starting at that seqno (highest sent %d)", r.self, sender, seq, r.ledger.Highest(sender)))
		return
	}
	if h := Hash(payload); h != sent[st.idx].hash {
		r.sim.Fail(fmt.Errorf("member %v: %v#%d delivered with a payload that is not the one sent (%d bytes)", r.self, sender, seq, len(payload)))
		return
	}
	st.next = sent[st.idx].last + 1
	if r.OnDeliver != nil {
		r.OnDeliver(r.self, sender, seq, st.next-1, r.sim.Now())
	}
	st.idx++
	st.delivered++
	r.total++
}

// Lost records a lost-range report for sender's seqnos from..to.
func (r *Recorder) Lost(sender digest.Member, from, to uint64) {
	st := r.state(sender)
	if from != st.next || to < from {
		r.sim.Fail(fmt.Errorf("member %v: lost range %v [%d,%d] does not start at the next expected seqno %d", r.self, sender, from, to, st.next))
		return
	}
	st.next = to + 1
	st.lost += to - from + 1
	r.seek(sender, st)
	r.losts = append(r.losts, LostRange{Sender: sender, From: from, To: to})
}

// Next returns the next seqno the recorder expects from sender.
func (r *Recorder) Next(sender digest.Member) uint64 { return r.state(sender).next }

// Delivered returns how many messages have been delivered in all.
func (r *Recorder) Delivered() uint64 { return r.total }

// LostRanges returns every lost-range report in the order received.
func (r *Recorder) LostRanges() []LostRange { return slices.Clone(r.losts) }

// Complete reports whether everything in the ledger has been delivered or
// reported lost.
func (r *Recorder) Complete() bool {
	for _, s := range r.ledger.senders {
		if r.state(s).next <= r.ledger.Highest(s) {
			return false
		}
	}
	return true
}

// CheckComplete returns an error naming every sender whose messages have not
// all been delivered or reported lost.
func (r *Recorder) CheckComplete() error {
	var missing []string
	for _, s := range r.ledger.senders {
		if n, h := r.state(s).next, r.ledger.Highest(s); n <= h {
			missing = append(missing, fmt.Sprintf("%v: %d..%d", s, n, h))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("member %v never delivered nor was told lost %v", r.self, missing)
	}
	return nil
}
