package engine

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/gms"
	"github.com/nakcast/nakcast/nakack"
)

// protoSnap is what Stats reads of the state the agent owns (the
// protocol's and membership's counters, windows, view and peer lags, the
// verifier's): the agent copies it into a statsBoard slot at the end of
// each part of its work that may have changed it, so Stats never takes the
// protocol lock. The engine's own counters are atomics Stats reads
// directly.
type protoSnap struct {
	proto   nakack.Stats
	gms     gms.Stats
	auth    AuthStats
	view    digest.ViewID
	members []digest.Member
	senders []digest.Entry
	lags    []nakack.PeerLag
}

// statsSlot is one copy of the snapshot, with the count of Stats calls
// reading it.
type statsSlot struct {
	readers atomic.Int32
	s       protoSnap
}

// statsBoard publishes protoSnap from the agent to Stats without a lock
// and without allocating once the slots' slices have grown: the agent
// writes a slot that is neither the published one nor being read and
// publishes its index (cur); a reader marks the published slot read,
// checks it is still the published one (else it lets go and starts over:
// the agent may be rewriting it) and copies it out.
//
// begun and ended count the agent's parts under the protocol lock (see
// Member.lockProto): a part in progress (begun > ended) may be changing
// what the snapshot shows, and Stats waits for its end (settle), so that
// it shows at least what a handler or an event of that part saw.
type statsBoard struct {
	slots [4]statsSlot
	cur   atomic.Int32
	begun atomic.Uint64
	ended atomic.Uint64
}

// statsWait bounds Stats's wait for the agent's part in progress (see
// settle): the part runs the Handler in push mode, and a Handler that
// calls Stats waits this long, then reads the last snapshot.
const statsWait = 100 * time.Millisecond

// lockProto takes the protocol lock for a part of the agent's work (a
// duty cycle, the dedicated sender's iteration, a direct send, Open's
// join). The lock serialises the agent's own goroutines (the receiver and
// the sender with ThreadingDedicated, Open's goroutine while it joins);
// the application's Poll and Stats never take it.
func (m *Member) lockProto() {
	m.mu.Lock()
	m.board.begun.Add(1)
}

// unlockProto publishes the snapshot when the part may have changed it
// (changed), ends the part and releases the lock.
func (m *Member) unlockProto(changed bool) {
	if changed {
		m.publishStats()
	}
	m.board.ended.Add(1)
	m.mu.Unlock()
}

// publishStats copies the agent's state into a free slot and publishes it
// (under the protocol lock). With every slot being read it publishes
// nothing: the next part does.
func (m *Member) publishStats() {
	b := &m.board
	cur := b.cur.Load()
	for i := range b.slots {
		sl := &b.slots[i]
		if int32(i) == cur || sl.readers.Load() != 0 {
			continue
		}
		m.fillSnap(&sl.s)
		b.cur.Store(int32(i))
		return
	}
}

// fillSnap writes the snapshot into s, reusing its slices.
func (m *Member) fillSnap(s *protoSnap) {
	s.proto, s.gms, s.view = nakack.Stats{}, gms.Stats{}, digest.ViewID{}
	s.members, s.senders, s.lags = s.members[:0], s.senders[:0], s.lags[:0]
	p := m.proto
	if p == nil {
		p = m.lastProto
	}
	if p != nil {
		s.proto = p.Stats()
		s.senders = p.AppendDigest(s.senders)
		if m.proto != nil {
			v := p.View()
			s.view = v.ID
			s.members = append(s.members, v.Members...)
			s.lags = p.AppendPeerLags(s.lags)
		}
	}
	if m.dynamic() {
		s.gms = m.g.Stats()
	}
	s.auth = m.authStats()
}

// settle waits, for at most statsWait, until the agent's part in progress
// when it was called (if any) has ended, or the agent has stopped.
func (b *statsBoard) settle(done <-chan struct{}) {
	target := b.begun.Load()
	var deadline time.Time
	for i := 0; b.ended.Load() < target; i++ {
		select {
		case <-done:
			return
		default:
		}
		if i < 64 {
			runtime.Gosched()
			continue
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(statsWait)
		} else if time.Now().After(deadline) {
			return
		}
		time.Sleep(20 * time.Microsecond) // the part runs on another goroutine
	}
}

// read copies the published snapshot into dst (fresh slices).
func (b *statsBoard) read(dst *protoSnap) {
	for {
		i := b.cur.Load()
		sl := &b.slots[i]
		sl.readers.Add(1)
		if b.cur.Load() == i {
			*dst = sl.s
			dst.members = append([]digest.Member(nil), sl.s.members...)
			dst.senders = make([]digest.Entry, len(sl.s.senders))
			copy(dst.senders, sl.s.senders)
			dst.lags = append([]nakack.PeerLag(nil), sl.s.lags...)
			sl.readers.Add(-1)
			return
		}
		sl.readers.Add(-1)
	}
}
