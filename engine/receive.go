package engine

import (
	"context"
	"iter"

	"github.com/nakcast/nakcast/digest"
)

// Message is a delivered message owned by the application: the convenience
// API copies the payload into it.
type Message struct {
	Sender  digest.Member
	Seq     uint64
	Payload []byte
}

// copier is a Handler that copies the one message it gets.
type copier struct {
	msg Message
	got bool
}

// Deliver copies the message.
func (c *copier) Deliver(sender digest.Member, seq uint64, payload []byte) {
	c.msg = Message{Sender: sender, Seq: seq, Payload: append([]byte(nil), payload...)}
	c.got = true
}

// Lost does nothing: lost ranges are reported as events.
func (c *copier) Lost(digest.Member, uint64, uint64) {}

// Receive waits for the next message in pull mode and returns a copy: the
// convenience form of Poll for ordinary code (it allocates the payload).
// Lost ranges are reported as events (NextEvent), not here. It returns
// ctx's error when ctx ends first, ErrClosed once the member is closed, and
// ErrPushMode when Config.Handler is set.
func (m *Member) Receive(ctx context.Context) (Message, error) {
	if m.cfg.Handler != nil {
		return Message{}, ErrPushMode
	}
	var c copier
	if m.invoked() {
		err := m.drive(ctx, func() bool { return m.Poll(&c, 1) == 1 && c.got })
		return c.msg, err
	}
	for {
		if m.Poll(&c, 1) == 1 && c.got {
			return c.msg, nil
		}
		m.pollWaiters.Add(1)
		ch := *m.deliverCh.Load()
		n := m.Poll(&c, 1)
		if n == 1 && c.got {
			m.pollWaiters.Add(-1)
			return c.msg, nil
		}
		select {
		case <-ch:
			m.pollWaiters.Add(-1)
		case <-ctx.Done():
			m.pollWaiters.Add(-1)
			return Message{}, ctx.Err()
		case <-m.stop:
			m.pollWaiters.Add(-1)
			return Message{}, ErrClosed
		}
	}
}

// Messages returns an iterator over received messages (Receive in a loop)
// that ends when ctx ends or the member closes, yielding the error last:
//
//	for msg, err := range m.Messages(ctx) {
//		if err != nil { break }
//		use(msg)
//	}
func (m *Member) Messages(ctx context.Context) iter.Seq2[Message, error] {
	return func(yield func(Message, error) bool) {
		for {
			msg, err := m.Receive(ctx)
			if !yield(msg, err) || err != nil {
				return
			}
		}
	}
}

// signalDeliverable wakes Receive calls after the agent did work, or a
// Poll left records behind (one atomic load when nobody waits): it puts a
// fresh channel in place and closes the one it took.
func (m *Member) signalDeliverable() {
	if m.pollWaiters.Load() == 0 {
		return
	}
	close(*m.deliverCh.Swap(newWakeCh()))
}

// newWakeCh returns a fresh channel for deliverCh.
func newWakeCh() *chan struct{} {
	ch := make(chan struct{})
	return &ch
}
