package sim

import "time"

// eventKind says what an event does when it fires.
type eventKind uint8

const (
	evDeliver eventKind = iota + 1 // hand data to node
	evTimer                        // node's deadline: call Tick if still current
	evAction                       // run fn for node (or for the simulation if node < 0)
)

// event is one entry of the queue. It is stored by value in the heap.
type event struct {
	at   time.Duration
	seq  uint64 // insertion order: breaks ties deterministically
	kind eventKind
	node int32 // target node index, -1 for none
	from int32 // sending node index for evDeliver
	gen  uint64
	data []byte // evDeliver: read-only datagram bytes, shared by all copies
	fn   func(now time.Duration)
}

// eventQueue is a binary min-heap ordered by (at, seq). It is written out
// rather than built on container/heap so that pushes do not box events.
type eventQueue struct {
	h   []event
	seq uint64
}

func (q *eventQueue) Len() int { return len(q.h) }

func less(a, b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// push adds e, stamping it with the next sequence number.
func (q *eventQueue) push(e event) {
	q.seq++
	e.seq = q.seq
	q.h = append(q.h, e)
	i := len(q.h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(&q.h[i], &q.h[p]) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

// peek returns the earliest event's time; ok is false when empty.
func (q *eventQueue) peek() (time.Duration, bool) {
	if len(q.h) == 0 {
		return 0, false
	}
	return q.h[0].at, true
}

// pop removes and returns the earliest event.
func (q *eventQueue) pop() event {
	top := q.h[0]
	n := len(q.h) - 1
	q.h[0] = q.h[n]
	q.h[n] = event{}
	q.h = q.h[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && less(&q.h[r], &q.h[l]) {
			m = r
		}
		if !less(&q.h[m], &q.h[i]) {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	return top
}
