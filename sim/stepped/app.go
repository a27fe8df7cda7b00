package stepped

import (
	"fmt"
	"slices"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/sim"
)

// Entry is one event of a stream: seqno Seq delivered (Hash: its
// payload's) or, with Lost, seqnos Seq..To reported lost.
type Entry struct {
	Seq, To uint64
	Lost    bool
	Hash    uint64
}

// Stream is what one member delivered and was told lost of one sender
// incarnation, in order, from the first seqno it saw (1, or its join
// point).
type Stream struct {
	Start, Next uint64
	Entries     []Entry
}

// App is a node's application (its engine.Handler, push mode): the
// streams of every sender. It fails the simulation at the first event
// that breaks FIFO order: a delivery or lost range that does not start
// where the stream stands, or a payload that does not name its sender.
type App struct {
	n       *Node
	streams map[digest.Member]*Stream
	order   []digest.Member
}

func newApp(n *Node) *App { return &App{n: n, streams: map[digest.Member]*Stream{}} }

// Stream returns sender's stream, nil if none.
func (a *App) Stream(sender digest.Member) *Stream { return a.streams[sender] }

// Senders returns the senders with a stream, in first-seen order.
func (a *App) Senders() []digest.Member { return slices.Clone(a.order) }

func (a *App) stream(sender digest.Member, seq uint64) *Stream {
	s := a.streams[sender]
	if s == nil {
		s = &Stream{Start: seq, Next: seq}
		a.streams[sender] = s
		a.order = append(a.order, sender)
	}
	return s
}

func (a *App) fail(format string, args ...any) {
	a.n.c.s.Fail(fmt.Errorf("member %d at %v: %s", a.n.id, a.n.c.s.Now(), fmt.Sprintf(format, args...)))
}

// Deliver implements engine.Handler.
func (a *App) Deliver(sender digest.Member, seq uint64, payload []byte) {
	s := a.stream(sender, seq)
	if seq != s.Next {
		a.fail("%v#%d delivered, expected %d", sender, seq, s.Next)
		return
	}
	if id, _, ok := parsePayload(payload); !ok || id != sender.ID {
		a.fail("%v#%d: payload %q is not %v's", sender, seq, payload, sender)
		return
	}
	h := sim.Hash(payload)
	s.Entries = append(s.Entries, Entry{Seq: seq, To: seq, Hash: h})
	s.Next = seq + 1
	a.n.c.trace(a.n.id, 'd', sender, seq, h)
}

// Lost implements engine.Handler.
func (a *App) Lost(sender digest.Member, from, to uint64) {
	s := a.stream(sender, from)
	if from != s.Next || to < from {
		a.fail("%v lost [%d,%d], expected from %d", sender, from, to, s.Next)
		return
	}
	s.Entries = append(s.Entries, Entry{Seq: from, To: to, Lost: true})
	s.Next = to + 1
	a.n.c.trace(a.n.id, 'l', sender, from, to)
}

// payload is a traffic message: the sender's id and its number.
func payload(id uint64, k int) []byte { return fmt.Appendf(nil, "%d/%d", id, k) }

func parsePayload(b []byte) (id uint64, k int, ok bool) {
	_, err := fmt.Sscanf(string(b), "%d/%d", &id, &k)
	return id, k, err == nil
}
