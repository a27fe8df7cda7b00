package sim

import (
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/nakcast/nakcast/digest"
)

// Hash is the hash the simulator keeps of a payload: FNV-1a, 64 bits.
func Hash(payload []byte) uint64 {
	h := fnv.New64a()
	h.Write(payload)
	return h.Sum64()
}

// Ledger is what every sender sent: for each sender, the hash of the
// payload of each seqno. Recorders check deliveries against it.
type Ledger struct {
	sent    map[digest.Member][]uint64 // index seq-1
	senders []digest.Member            // first-send order, for deterministic iteration
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger { return &Ledger{sent: make(map[digest.Member][]uint64)} }

// Record notes that sender sent payload with seqno seq. Seqnos of one sender
// must be recorded in increasing order without holes (they are assigned by
// the protocol from 1).
func (l *Ledger) Record(sender digest.Member, seq uint64, payload []byte) error {
	s, ok := l.sent[sender]
	if !ok {
		l.senders = append(l.senders, sender)
	}
	if seq != uint64(len(s))+1 {
		return fmt.Errorf("ledger: %v sent seqno %d after %d", sender, seq, len(s))
	}
	l.sent[sender] = append(s, Hash(payload))
	return nil
}

// Highest returns the highest seqno sender has sent (0 if none).
func (l *Ledger) Highest(sender digest.Member) uint64 { return uint64(len(l.sent[sender])) }

// Senders returns the senders in the order they first sent.
func (l *Ledger) Senders() []digest.Member { return slices.Clone(l.senders) }

// Total returns the number of messages sent by all senders.
func (l *Ledger) Total() int {
	n := 0
	for _, s := range l.sent {
		n += len(s)
	}
	return n
}

// LostRange is one lost-range report received by an application.
type LostRange struct {
	Sender   digest.Member
	From, To uint64
}

// recvState is a recorder's view of one sender.
type recvState struct {
	next      uint64 // next seqno expected
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
	r.state(sender).next = delivered + 1
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
	if seq > uint64(len(sent)) {
		r.sim.Fail(fmt.Errorf("member %v: %v#%d delivered but never sent (highest sent %d)", r.self, sender, seq, len(sent)))
		return
	}
	if h := Hash(payload); h != sent[seq-1] {
		r.sim.Fail(fmt.Errorf("member %v: %v#%d delivered with a payload that is not the one sent (%d bytes)", r.self, sender, seq, len(payload)))
		return
	}
	st.next++
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
