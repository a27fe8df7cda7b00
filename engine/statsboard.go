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
// verifier's). It is copied into a statsBoard slot on demand: a Stats call
// asks for it, and the first of the agent's parts to end after the
// request (or Stats itself, when no part holds the protocol lock) fills
// and publishes it. A part that nobody asked about copies nothing: the
// copy walks the windows and peer lags, work a busy agent would do at
// every part for a Stats call that comes at human rates. The engine's own
// counters are atomics Stats reads directly.
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
// want counts the snapshots Stats asked for, served the requests the
// last publication answered: a publication made after request r (want
// reached r) shows every part that ended before Stats was called, and
// what a handler or an event of a part in progress then saw.
type statsBoard struct {
	slots  [4]statsSlot
	cur    atomic.Int32
	want   atomic.Uint64
	served atomic.Uint64
}

// statsWait bounds Stats's wait for its snapshot (see request): the
// agent's part runs the Handler in push mode, and a Handler that calls
// Stats waits this long, then reads the last snapshot.
const statsWait = 100 * time.Millisecond

// lockProto takes the protocol lock for a part of the agent's work (a
// duty cycle, the dedicated sender's iteration, a direct send, Open's
// join). The lock serialises the agent's own goroutines (the receiver and
// the sender with ThreadingDedicated, Open's goroutine while it joins);
// the application's Poll never takes it, and Stats only tries it (see
// request).
func (m *Member) lockProto() {
	m.mu.Lock()
}

// unlockProto publishes the snapshot if a Stats call asked for one since
// the last publication, and releases the lock.
func (m *Member) unlockProto() {
	m.serveStats()
	m.mu.Unlock()
}

// serveStats publishes the snapshot when a request is pending (under the
// protocol lock): two atomic loads when none is.
func (m *Member) serveStats() {
	b := &m.board
	w := b.want.Load()
	if w == b.served.Load() {
		return
	}
	if m.publishStats() {
		b.served.Store(w)
	}
}

// publishStats copies the agent's state into a free slot and publishes it
// (under the protocol lock). With every slot being read it publishes
// nothing and returns false: the next part does.
func (m *Member) publishStats() bool {
	b := &m.board
	cur := b.cur.Load()
	for i := range b.slots {
		sl := &b.slots[i]
		if int32(i) == cur || sl.readers.Load() != 0 {
			continue
		}
		m.fillSnap(&sl.s)
		b.cur.Store(int32(i))
		return true
	}
	return false
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

// request asks for a snapshot and waits, for at most statsWait, until one
// made after the request is published: by the end of the agent's part in
// progress, or by request itself when it gets the protocol lock without
// waiting (the agent is idle, stopped, or a simulator steps it between
// calls). A Handler calling Stats inside a part waits statsWait, then
// reads the last snapshot; so does a call when the agent has stopped
// mid-part.
func (m *Member) request() {
	b := &m.board
	r := b.want.Add(1)
	var deadline time.Time
	for i := 0; b.served.Load() < r; i++ {
		if m.mu.TryLock() {
			m.serveStats()
			m.mu.Unlock()
			continue
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
