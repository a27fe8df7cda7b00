package engine

import (
	"crypto/rand"
	"encoding/binary"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/nakack"
)

// Handler receives delivered messages. Deliver is called for every message of
// every sender exactly once, in each sender's seqno order; payload is valid
// only during the call (copy it to keep it). Lost reports, once and in order
// with the deliveries, a range [from, to] of a sender's seqnos that can never
// be delivered (the sender purged them: docs/guarantees.md); the same range is
// also queued as an EventLost event. Neither method may block on this
// member's Send (see Member.Poll for the pattern that cannot deadlock).
type Handler interface {
	Deliver(sender digest.Member, seq uint64, payload []byte)
	Lost(sender digest.Member, from, to uint64)
}

// BatchHandler is a Handler that also takes runs of whole messages in one
// call: in push mode the agent hands each run of consecutive whole
// (unfragmented) messages of one sender that it delivers in one step to
// DeliverBatch instead of calling Deliver once a message, which saves a
// dynamic call and the per-call lookups a handler makes (its state for
// the sender) for every message of a stream of small ones. Fragmented
// messages go to Deliver and lost ranges to Lost, in order with the
// batches; a batch may end anywhere (an iteration's DeliverBatch limit, the
// end of what has arrived). Every message is still delivered exactly
// once, in its sender's order, by one of the two methods.
type BatchHandler interface {
	Handler
	// DeliverBatch hands over len(payloads) consecutive messages of sender,
	// seqnos first, first+1, ... . The payload slices are valid during the
	// call only, and payloads itself is reused by the next call.
	DeliverBatch(sender digest.Member, first uint64, payloads [][]byte)
}

// The agent hands Config.Handler to the protocol as it is, and the
// protocol finds DeliverBatch by the same method set.
var _ nakack.BatchHandler = BatchHandler(nil)

// HandlerFunc adapts a function to a Handler whose Lost does nothing (lost
// ranges are still reported as events).
type HandlerFunc func(sender digest.Member, seq uint64, payload []byte)

// Deliver calls f.
func (f HandlerFunc) Deliver(sender digest.Member, seq uint64, payload []byte) {
	f(sender, seq, payload)
}

// Lost does nothing.
func (f HandlerFunc) Lost(digest.Member, uint64, uint64) {}

// randomMember returns a member with a random non-zero ID and incarnation 1.
func randomMember() digest.Member {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return digest.Member{ID: id, Inc: 1}
		}
	}
}
