package members

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/sim"
)

// Event is one entry of a stream: a delivered message (From..To its
// seqnos) or a lost range.
type Event struct {
	Lost     bool
	From, To uint64
	At       time.Duration
	// Chain is the stream's application state after the event.
	Chain uint64
	// Departed: a lost range reported while the sender was not in the
	// reporter's view (a cut); Resync: a lost range covering the message
	// a stream's start point falls inside (a join or state point the
	// holder passed through without delivering), or the rest of a message
	// whose start the stream already accounted lost (a cut ended inside
	// it).
	Departed, Resync bool
}

// Stream is an App's record of one sender incarnation since the stream
// started (at 1, at a join digest's point, or at an installed state's).
type Stream struct {
	Sender digest.Member
	// Start is the first seqno the stream accounts for; Next the next one
	// it expects.
	Start, Next uint64
	// Chain is the application state kept for the sender: a hash chain of
	// every delivered message (seqno and payload hash), carried over by a
	// state transfer; start is its value at Start.
	Chain, start uint64
	// Events since the start, in order: contiguous from Start to Next-1
	// (but the Resync allowance).
	Events []Event
	// resync: while no message has been delivered since the start, a lost
	// range may begin as low as this seqno (the first of the message the
	// start point falls inside); 0 when not allowed.
	resync uint64
	// Owed: an installed state's point lies inside a fragmented message
	// (its holder never delivers it): the stream owes a lost range for it
	// before anything else (nakack reports it by the message's next
	// fragment or at a cut).
	Owed bool
}

// LostIn returns the stream's lost ranges.
func (s *Stream) LostIn() []Event {
	var out []Event
	for _, e := range s.Events {
		if e.Lost {
			out = append(out, e)
		}
	}
	return out
}

// App is the application of one incarnation: nakack's Handler and gms's
// StateApp. See the package doc for what it checks on every event.
type App struct {
	inc     *Incarnation
	streams map[digest.Member]*Stream
	order   []digest.Member
	// pending is the state SetState received, installed at the digest's
	// points by OverwriteDigest (tap).
	pending *appState
}

type appState struct {
	provider digest.Member
	streams  map[digest.Member]stateEntry
}

type stateEntry struct{ next, chain uint64 }

func newApp(inc *Incarnation) *App {
	return &App{inc: inc, streams: map[digest.Member]*Stream{}}
}

// Stream returns the stream of sender (nil if none).
func (a *App) Stream(sender digest.Member) *Stream { return a.streams[sender] }

// Senders returns the senders with a stream, in first-seen order.
func (a *App) Senders() []digest.Member { return slices.Clone(a.order) }

func (a *App) c() *Cluster { return a.inc.Node.c }

func (a *App) fail(format string, args ...any) {
	a.c().Sim.Fail(fmt.Errorf("member %v: "+format, append([]any{a.inc.Member}, args...)...))
}

// next returns the next seqno the App expects from sender.
func (a *App) next(sender digest.Member) uint64 {
	if s := a.streams[sender]; s != nil {
		return s.Next
	}
	return 1
}

func (a *App) stream(sender digest.Member) *Stream {
	s, ok := a.streams[sender]
	if !ok {
		s = &Stream{Sender: sender, Start: 1, Next: 1}
		a.streams[sender] = s
		a.order = append(a.order, sender)
	}
	return s
}

// restart makes sender's stream start after seqno at: a join digest's
// point or a state's (state). A point inside a fragmented message the
// stream never delivers: the protocol skips its remaining fragments
// silently (a join: the stream expects the next message) or reports it
// lost (a state: the stream owes that report); either way one lost range
// may begin at the message's first fragment.
func (a *App) restart(sender digest.Member, at, chain uint64, state bool) *Stream {
	s := a.stream(sender)
	s.Start, s.Next, s.Chain, s.start, s.Events, s.resync, s.Owed = at+1, at+1, chain, chain, nil, 0, false
	if first, last, _, ok := a.c().Ledger.Message(sender, at+1); ok && first < at+1 {
		s.resync = first
		if state {
			s.Owed = true
		} else {
			s.Next = last + 1
		}
	}
	return s
}

// start is a join digest's point for sender.
func (a *App) start(sender digest.Member, at uint64) { a.restart(sender, at, 0, false) }

// Deliver implements nakack.Handler.
func (a *App) Deliver(sender digest.Member, seq uint64, payload []byte) {
	s := a.stream(sender)
	if seq != s.Next || s.Owed {
		a.fail("%v#%d delivered, expected %d (owed a lost range %v; stream %s)", sender, seq, s.Next, s.Owed, s.tail())
		return
	}
	first, last, h, ok := a.c().Ledger.Message(sender, seq)
	if !ok || first != seq {
		a.fail("%v#%d delivered but no message was sent starting at that seqno (highest sent %d)", sender, seq, a.c().Ledger.Highest(sender))
		return
	}
	if sim.Hash(payload) != h {
		a.fail("%v#%d delivered with a payload that is not the one sent", sender, seq)
		return
	}
	s.Next, s.resync = last+1, 0
	s.Chain = chainStep(s.Chain, first, h)
	s.Events = append(s.Events, Event{From: first, To: last, At: a.c().Sim.Now(), Chain: s.Chain})
}

// chainAt returns the stream's application state once it accounted for
// every seqno up to at, if an event ends exactly there (or at is the
// start point).
func (s *Stream) chainAt(at uint64) (uint64, bool) {
	chain, end := s.start, s.Start-1
	for _, e := range s.Events {
		if e.To > at {
			break
		}
		chain, end = e.Chain, e.To
	}
	return chain, end == at
}

// chainStep folds one delivered message into an application state.
func chainStep(chain, seq, hash uint64) uint64 {
	return (chain^seq)*1099511628211 ^ hash
}

// Lost implements nakack.Handler.
func (a *App) Lost(sender digest.Member, from, to uint64) {
	s := a.stream(sender)
	resync := s.resync != 0 && from >= s.resync && from < s.Next && to+1 >= from
	if (from != s.Next && !resync) || to < from {
		a.fail("lost range %v [%d,%d] does not start at the next expected seqno %d (stream %s)", sender, from, to, s.Next, s.tail())
		return
	}
	if hi := a.c().Ledger.Highest(sender); to > hi {
		a.fail("lost range %v [%d,%d] reaches beyond the highest seqno sent, %d", sender, from, to, hi)
		return
	}
	ev := Event{Lost: true, From: from, To: to, At: a.c().Sim.Now(), Resync: resync, Chain: s.Chain}
	ev.Departed = !a.inView(sender)
	if first, last, _, ok := a.c().Ledger.Message(sender, from); ok && first < from && to <= last {
		// The rest of a message whose start the stream accounted lost
		// already (a cut ended inside it, and a merge brought the sender
		// back): it can never be delivered.
		resync = true
	}
	ev.Resync = resync
	if !ev.Departed && !resync {
		if purged := a.c().purgedPoint(a.inc, sender); to > purged {
			a.fail("lost range %v [%d,%d] of a sender in the view: nothing above %d was purged (its own purge point, merge digests' Low)",
				sender, from, to, purged)
			return
		}
	}
	s.Events = append(s.Events, ev)
	s.Next, s.resync, s.Owed = max(s.Next, to+1), 0, false
}

// inView reports whether sender is in the protocol's view.
func (a *App) inView(sender digest.Member) bool {
	return slices.Contains(a.inc.P.View().Members, sender)
}

// tail describes the stream's last events, for failure messages.
func (s *Stream) tail() string {
	ev := s.Events[max(0, len(s.Events)-3):]
	return fmt.Sprintf("start %d next %d last %+v", s.Start, s.Next, ev)
}

// State implements gms.StateApp: the provider's id and, per sender, the
// next seqno and the hash chain.
func (a *App) State() ([]byte, error) {
	b := appendMember(nil, a.inc.Member)
	for _, m := range a.order {
		s := a.streams[m]
		b = appendMember(b, m)
		b = binary.LittleEndian.AppendUint64(b, s.Next)
		b = binary.LittleEndian.AppendUint64(b, s.Chain)
	}
	return b, nil
}

const memberLen = 12

func appendMember(b []byte, m digest.Member) []byte {
	b = binary.LittleEndian.AppendUint64(b, m.ID)
	return binary.LittleEndian.AppendUint32(b, m.Inc)
}

func getMember(b []byte) digest.Member {
	return digest.Member{ID: binary.LittleEndian.Uint64(b), Inc: binary.LittleEndian.Uint32(b[8:])}
}

var errBadState = errors.New("members: malformed state")

// SetState implements gms.StateApp. The state is installed when gms
// installs its digest (OverwriteDigest, right after): until then it is
// only parsed.
func (a *App) SetState(b []byte) error {
	const entry = memberLen + 16
	if len(b) < memberLen || (len(b)-memberLen)%entry != 0 {
		return errBadState
	}
	st := &appState{provider: getMember(b), streams: map[digest.Member]stateEntry{}}
	for b = b[memberLen:]; len(b) > 0; b = b[entry:] {
		st.streams[getMember(b)] = stateEntry{next: binary.LittleEndian.Uint64(b[memberLen:]),
			chain: binary.LittleEndian.Uint64(b[memberLen+8:])}
	}
	a.pending = st
	return nil
}

// installState installs the pending state at d's points: every stream of
// a sender d covers restarts after d's delivered value with the
// provider's chain (streams of senders d lacks, whose windows closed
// earlier, are history and stay). The
// provider took the state and captured d at the same point, so the state's
// next seqno is d's delivered + 1, or the first seqno of the message d's
// point falls inside (a message the provider passes through without
// delivering it).
func (a *App) installState(d digest.Digest) {
	st := a.pending
	a.pending = nil
	if st == nil {
		a.fail("state digest installed without a state")
		return
	}
	a.inc.Installs = append(a.inc.Installs, Install{At: a.c().Sim.Now(), Provider: st.provider, Digest: d})
	for _, e := range d.Entries() {
		at := e.Delivered
		if e.Member == a.inc.Member {
			at = min(at, a.inc.P.NextSeq()-1)
		}
		se, ok := st.streams[e.Member]
		if !ok {
			se = stateEntry{next: at + 1}
		}
		if se.next != at+1 {
			if first, _, _, in := a.c().Ledger.Message(e.Member, at+1); !in || first >= at+1 || se.next != first {
				a.fail("state of %v from %v: next %d, but its digest says delivered %d", e.Member, st.provider, se.next, at)
			}
		}
		a.restart(e.Member, at, se.chain, true)
	}
}
