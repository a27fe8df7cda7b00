package nakack

import (
	"context"
	"log/slog"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/ring"
	"github.com/nakcast/nakcast/wire"
)

// Receive processes one datagram received at now. nakack takes its own
// references to buf for what it keeps; the caller keeps (and releases) its
// own. Decoding errors are returned (wire sentinels) after being counted;
// datagrams of types nakack does not own (heartbeat, membership, state
// transfer) are ignored.
func (p *Protocol) Receive(buf *wire.Buffer, now time.Duration) error {
	p.clock = max(p.clock, now)
	p.publishOwn()
	h, body, err := wire.DecodeHeader(buf.Bytes(), p.cfg.Group)
	if err != nil {
		p.stats.Drops.Malformed++
		return err
	}
	if h.Sender == p.self {
		p.stats.Drops.Self++
		return nil
	}
	switch h.Type {
	case wire.TypeData:
		return p.onData(buf, h, body, now)
	case wire.TypeFrag:
		return p.onFrag(buf, h, body, now)
	case wire.TypeXmitReq:
		return p.onXmitReq(h, body, buf.N, now)
	case wire.TypeMsgNotFound:
		return p.onMsgNotFound(h, body, now)
	case wire.TypeStable:
		p.noteStable(h, body, now) // peer lag (stats.go)
		return p.onStable(h, body, now)
	case wire.TypeStability:
		return p.onStability(h, body, now)
	case wire.TypeHighest:
		return p.onHighest(h, body, now)
	case wire.TypeChallenge:
		return p.onChallenge(h, body)
	case wire.TypeEcho:
		return p.onEcho(h, body, now)
	}
	return nil
}

func (p *Protocol) onData(buf *wire.Buffer, h wire.Header, body []byte, now time.Duration) error {
	dh, err := wire.DecodeDataHead(h, body)
	if err != nil {
		p.stats.Drops.Malformed++
		return err
	}
	if s := p.senders[dh.Origin]; s != nil && !s.own && s.state != departed {
		r0 := p.stats.Received
		if p.insertFresh(s, buf, &dh, now) {
			p.countRepairs(h, r0)
			return nil
		}
	}
	d, offs, err := wire.DecodeDataOffsets(h, body, p.offs)
	p.offs = offs
	if err != nil {
		p.stats.Drops.Malformed++
		return err
	}
	s := p.senders[d.Origin]
	if s == nil {
		p.hold(buf, d.Origin)
		return nil
	}
	if s.own {
		p.stats.Drops.Self++
		return nil
	}
	r0 := p.stats.Received
	if s.state == departed {
		p.insertDeparted(s, h.Sender, buf, &d, body, offs, now)
	} else {
		p.insertData(s, buf, &d, body, offs, now)
	}
	p.countRepairs(h, r0)
	return nil
}

// countRepairs adds to RepairsReceived what a repair datagram inserted
// (Received was r0 before it).
func (p *Protocol) countRepairs(h wire.Header, r0 uint64) {
	if h.Repair() {
		p.stats.RepairsReceived += p.stats.Received - r0
	}
}

// refuseDeparted reports whether seqno seq of departed sender s, carried by
// a datagram that from sent, must be refused so that every survivor ends
// with the same prefix (design.md, "Crashed senders"). The coordinator
// declares lost what no survivor reported holding, so:
//   - before the cut is fixed, what the departed sender itself sends (a
//     datagram delayed in the network, or a falsely suspected sender still
//     running) is refused: this member's report (taken after the view that
//     dropped the sender, gms) must stay the whole of what it will ever hold
//     from it but peers' repairs of what they reported; after the fix the
//     sender's own data is accepted again (a graceful leaver answers
//     retransmissions until its cut closes) within the rules below;
//   - once the cut is fixed, nothing beyond it, and nothing marked lost
//     (DeclareLost, or a MSG_NOT_FOUND or merge before): a datagram that
//     arrives after the range was declared lost, before or after Poll
//     reported it, is never delivered.
//
// Peers' repairs below the cut are accepted at any time: that is how
// survivors complete the cut from each other.
func refuseDeparted(s *sender, from digest.Member, seq uint64) bool {
	if !s.hasCut {
		return from == s.m
	}
	return seq > s.cut || markedLost(s.window(), seq)
}

// markedLost reports whether seq is marked lost in w (or was, and Poll
// consumed it): neither held nor a gap, above the window's low. Only for
// windows that are no longer purged (departed senders), where a seqno at or
// below delivered that is not held was not delivered.
func markedLost(w *ring.Window[msg], seq uint64) bool {
	if seq <= w.Low() || seq > w.Received() || w.Has(seq) {
		return false
	}
	if seq > w.Delivered() {
		g, ok := w.NextGap(seq - 1)
		return !ok || g.From != seq
	}
	return true
}

// insertDeparted inserts the data of departed sender s carried by a DATA
// datagram that from sent, refusing (Drops.Departed) the seqnos
// refuseDeparted names. Off the hot path: departed windows only.
func (p *Protocol) insertDeparted(s *sender, from digest.Member, buf *wire.Buffer, d *wire.Data, body []byte, offs []uint32, now time.Duration) {
	size := len(body)
	if !s.hasCut {
		if from == s.m {
			p.stats.Drops.Departed += uint64(d.Count)
			return
		}
		p.insertData(s, buf, d, body, offs, now) // a peer's repair
		return
	}
	w := s.window()
	c0 := max(s.contig, s.delivered(), s.floor)
	if s.inRQ {
		p.stampDeparted(s, d.First, min(d.Last(), s.cut), now)
	}
	ref := p.newRef(buf)
	it := d.Messages()
	seq := d.First
	added, lowest := 0, uint64(0)
	for ; ; seq++ {
		pl, ok := it.Next()
		if !ok {
			break
		}
		if refuseDeparted(s, from, seq) {
			p.stats.Drops.Departed++
			continue
		}
		switch w.Add(seq, msg{ref: ref, off: offsetIn(buf, pl), n: uint32(len(pl))}) {
		case ring.Added:
			if added == 0 {
				lowest = seq
			}
			added++
		default:
			p.countAddResult(w.Has(seq), seq <= w.Delivered())
		}
	}
	p.stored(s, ref, lowest, d.Last(), added, now)
	p.creditStable(s, c0, d.First, uint64(d.Count), size, now)
}

// insertFresh is insertData's path for the common case, a live sender's
// datagram whose whole run is new to s's window and lies in one stretch of
// its slots (ring.Window.Reserve): its messages are checked and written
// into the slots in the one walk over their lengths, where the general
// path walks them to decode, fills a scratch and copies it into the
// window. false: the run is not such a run, or the datagram is malformed;
// nothing changed, and onData takes its general path (which decodes it
// again, and counts and returns a malformed datagram's error).
func (p *Protocol) insertFresh(s *sender, buf *wire.Buffer, d *wire.DataHead, now time.Duration) bool {
	w := s.window()
	slots := w.Reserve(d.First, d.Count)
	if slots == nil {
		return false
	}
	ref := p.newRef(buf)
	body := d.Body()
	if _, ok := fillRun(slots, ref, body, d.Start(), offsetIn(buf, body)); !ok {
		p.dropRef(ref)
		return false
	}
	last := d.First + uint64(d.Count) - 1
	c0 := p.noteData(s, d.First, last, now)
	w.Commit(d.First, d.Count)
	p.stored(s, ref, d.First, last, d.Count, now)
	p.creditStable(s, c0, d.First, uint64(d.Count), len(body), now)
	return true
}

// fillRun writes into slots the entries of the len(slots) messages of a
// DATA body (ref's datagram, the body at offset base in its buffer) whose
// first length prefix lies at at, checking each length as it goes, and
// returns their payload bytes. ok is false if the messages run past the
// body or do not end where it does; what it wrote is left in the slots,
// which nobody reads before they are filled again (the windows keep
// freed entries, ring.Window.KeepFreed).
//
// It walks the length prefixes itself (wire.MsgLen, with wire.NextMsg's
// checks) and writes each slot's fields rather than a struct literal, so
// that the position stays in registers and each slot is stored once: this
// loop runs once a message received and once a message sent.
func fillRun(slots []msg, ref *dref, body []byte, at int, base uint32) (total uint64, ok bool) {
	end := len(body)
	if at < 0 {
		return 0, false
	}
	for i := range slots {
		if end-at < wire.MsgOverhead {
			return 0, false
		}
		n := wire.MsgLen(body, at)
		off := at + wire.MsgOverhead
		at = off + n
		if at > end {
			return 0, false
		}
		s := &slots[i]
		s.ref = ref
		s.off, s.n = base+uint32(off), uint32(n)
		s.fi, s.fc = 0, 0
		total += uint64(n)
	}
	return total, at == end
}

// noteData records a data datagram of s carrying first..last before its
// messages are stored, and returns s's contiguous point before them (for
// creditStable).
func (p *Protocol) noteData(s *sender, first, last uint64, now time.Duration) uint64 {
	c0 := max(s.contig, s.delivered(), s.floor)
	if last > s.highest {
		s.highest = last
	}
	if s.inRQ {
		p.stampDeparted(s, first, last, now)
	}
	return c0
}

// stored accounts for the added messages of a datagram (seqnos first..last,
// buffer reference ref) stored in s's window: the reference is held for
// them (or returned when none was stored), contig and readiness move, and
// gaps are checked.
func (p *Protocol) stored(s *sender, ref *dref, first, last uint64, added int, now time.Duration) {
	p.holdRef(s, ref, added, last)
	p.dropRef(ref)
	if added > 0 {
		p.stats.Received += uint64(added)
		p.inserted(s, first)
	}
	p.checkGaps(s, now)
}

// insertData inserts a bundle's run into s's window, one AddRun per
// scratch-full, and takes one buffer reference per stored message. body is
// the datagram's body in buf, offs its message offsets in body
// (wire.DecodeDataOffsets); its length counts towards the next STABLE
// (creditStable).
func (p *Protocol) insertData(s *sender, buf *wire.Buffer, d *wire.Data, body []byte, offs []uint32, now time.Duration) {
	w := s.window()
	c0 := p.noteData(s, d.First, d.Last(), now)
	first := d.First
	added := 0
	ref := p.newRef(buf)
	base := offsetIn(buf, body) + wire.MsgOverhead // + offs[i]: message i's payload
	for i := 0; i < d.Count; {
		n := min(len(p.scratch), d.Count-i)
		for k, o := range offs[i : i+n] {
			p.scratch[k] = msg{ref: ref, off: base + o, n: offs[i+k+1] - o - wire.MsgOverhead}
		}
		i += n
		r := w.AddRun(first, p.scratch[:n])
		added += r.Added
		p.stats.Duplicates += uint64(r.Duplicate)
		p.stats.Old += uint64(r.Old)
		if r.Full {
			p.stats.Drops.Full += uint64(n - r.Processed())
		}
		first += uint64(n)
	}
	p.stored(s, ref, d.First, d.Last(), added, now)
	p.creditStable(s, c0, d.First, uint64(d.Count), len(body), now)
}

// creditStable counts a data datagram of s (seqnos first.., count of them,
// size bytes; c0 was s's contiguous point before it) towards the next
// STABLE, due once StableBytes are counted: its bytes (what the STABLE's
// Received reports, senders' flow control) and, when it filled a gap, the
// messages it released for delivery (estimated as its bytes per seqno
// times the seqnos released: the progress of the STABLE's Delivered, the
// senders' stability). Each byte counts at most twice, so STABLE traffic
// stays within twice what the bytes received alone caused. A due STABLE
// waits until what s holds contiguously is delivered (stableWait; at most
// StableInterval/8), so that it reports the new delivered point: after a
// repair released a window's worth, a STABLE sent at once would report
// almost nothing new, and a sender whose window filled while the gap was
// open would get its credit only at the next StableInterval, since it sends
// nothing that could count meanwhile.
func (p *Protocol) creditStable(s *sender, c0, first, count uint64, size int, now time.Duration) {
	credit := int64(size)
	if last := first + count - 1; first <= c0+1 && count > 0 && s.contig > max(last, c0) {
		credit += int64((s.contig - max(last, c0)) * uint64(size) / count)
	}
	p.stableBytes += credit
	if !p.hasView || p.stableBytes < p.cfg.StableBytes {
		return
	}
	if p.stableWait == nil {
		if s.delivered() >= s.contig {
			p.sendStable(now)
			return
		}
		p.stableWaitUntil = now + p.cfg.StableInterval/8
		p.stableAt = min(p.stableAt, now+stableNudge)
	}
	p.stableWait, p.stableTarget = s, s.contig
}

// inserted updates contig and readiness after new entries from first on.
func (p *Protocol) inserted(s *sender, first uint64) {
	if first <= max(s.contig, s.delivered(), s.floor)+1 {
		s.advance()
	}
	if s.contig > s.delivered() {
		p.markReady(s)
	}
}

func (p *Protocol) onFrag(buf *wire.Buffer, h wire.Header, body []byte, now time.Duration) error {
	f, err := wire.DecodeFrag(h, body)
	if err != nil {
		p.stats.Drops.Malformed++
		return err
	}
	s := p.senders[f.Origin]
	if s == nil {
		p.hold(buf, f.Origin)
		return nil
	}
	if s.own {
		p.stats.Drops.Self++
		return nil
	}
	if s.state == departed && refuseDeparted(s, h.Sender, f.Seq) {
		p.stats.Drops.Departed++
		return nil
	}
	p.stableBytes += int64(len(body))
	w := s.window()
	if last := f.LastSeq(); last > s.highest {
		s.highest = last
	}
	if s.inRQ {
		p.stampDeparted(s, f.Seq, f.Seq, now)
	}
	ref := p.newRef(buf)
	switch w.Add(f.Seq, msg{ref: ref, off: offsetIn(buf, f.Payload), n: uint32(len(f.Payload)), fi: f.Index, fc: f.Count}) {
	case ring.Added:
		p.holdRef(s, ref, 1, f.Seq)
		p.stats.Received++
		if h.Repair() {
			p.stats.RepairsReceived++
		}
		p.inserted(s, f.Seq)
	default:
		p.dropRef(ref)
		p.countAddResult(w.Has(f.Seq), f.Seq <= w.Delivered())
	}
	p.checkGaps(s, now)
	if p.hasView && p.stableBytes >= p.cfg.StableBytes {
		p.sendStable(now)
	}
	return nil
}

func (p *Protocol) countAddResult(held, old bool) {
	switch {
	case held:
		p.stats.Duplicates++
	case old:
		p.stats.Old++
	default:
		p.stats.Drops.Full++
	}
}

// hold queues a data datagram from a sender without a window.
func (p *Protocol) hold(buf *wire.Buffer, origin digest.Member) {
	if len(p.pending) >= p.cfg.PendingMax {
		p.stats.Drops.NotMember++
		return
	}
	buf.Retain(1)
	p.pending = append(p.pending, pendingDgram{buf: buf, origin: origin})
	p.stats.Pending++
}

// drainPending inserts the held datagrams whose sender now has a window,
// keeps those of view members still awaiting a digest entry and drops the
// rest.
func (p *Protocol) drainPending(now time.Duration) {
	keep := p.pending[:0]
	for _, pd := range p.pending {
		if s := p.senders[pd.origin]; s != nil {
			p.stats.PendingInserted++
			_ = p.Receive(pd.buf, now)
			pd.buf.Release()
			continue
		}
		if _, inView := p.viewPos[pd.origin]; inView {
			keep = append(keep, pd)
			continue
		}
		p.stats.Drops.NotMember++
		pd.buf.Release()
	}
	clear(p.pending[len(keep):])
	p.pending = keep
}

func (p *Protocol) onHighest(h wire.Header, body []byte, now time.Duration) error {
	m, err := wire.DecodeHighest(h, body)
	if err != nil {
		p.stats.Drops.Malformed++
		return err
	}
	s := p.senders[h.Sender]
	if s == nil || s.own || s.state != live {
		p.stats.Drops.Stranger++
		return nil
	}
	if m.Highest > s.highest {
		s.highest = m.Highest
		p.checkGaps(s, now)
	} else if !s.armed && s.hasGaps() {
		p.checkGaps(s, now) // safety net: a known gap without a timer
	}
	return nil
}

// onMsgNotFound applies design.md item 1: from the original sender, for the
// current view, to us, moving something: mark what the sender purged and
// we lack as lost (held entries still deliver), never request it again,
// log once. Without authentication it first has the sender confirm it
// (challengeNotFound); the marking happens when the echo arrives.
func (p *Protocol) onMsgNotFound(h wire.Header, body []byte, now time.Duration) error {
	m, err := wire.DecodeMsgNotFound(h, body)
	if err != nil {
		p.stats.Drops.Malformed++
		return err
	}
	p.stats.MsgNotFoundReceived++
	s := p.senders[h.Sender]
	if s == nil || s.own || s.state != live || !p.hasView || m.View != p.view.ID || m.Requester != p.self {
		p.stats.MsgNotFoundIgnored++
		return nil
	}
	// Only what we know exists and still want: a MSG_NOT_FOUND never marks
	// seqnos this member has not seen announced.
	hd := max(s.delivered(), s.floor)
	low := min(m.Low, s.target())
	if g, ok := s.firstGapAbove(hd); low <= hd || m.Low > m.HighestSent || !ok || g > low {
		p.stats.MsgNotFoundIgnored++
		return nil
	}
	if !p.cfg.Authenticated {
		p.challengeNotFound(s, &m, wire.Range{From: hd + 1, To: low}, now)
		return nil
	}
	var d digest.Digest
	if p.cfg.Logger.Enabled(context.Background(), slog.LevelWarn) {
		d = m.Digest.ToDigest()
	}
	p.notFound(s, low, m.HighestSent, &m, d, now)
	return nil
}

// notFound acts on a MSG_NOT_FOUND of s, authenticated or confirmed: the
// seqnos at or below low that we lack are lost (what lies beyond the
// window's capacity is marked once purges make room: roomMade). m and d
// (the sender's digest) are for the warning logged once.
func (p *Protocol) notFound(s *sender, low, highest uint64, m *wire.MsgNotFound, d digest.Digest, now time.Duration) {
	w := s.window()
	beyond := low > w.Low()+uint64(s.cap)
	if p.markLost(s, low) == 0 && !beyond {
		p.stats.MsgNotFoundIgnored++
		return
	}
	p.stats.NotFoundConfirmed++
	if p.cfg.Logger.Enabled(context.Background(), slog.LevelWarn) {
		p.logNotFound(s, m, d)
	}
	s.floor = max(s.floor, low)
	s.highest = max(s.highest, highest)
	s.advance()
	if s.contig > s.delivered() {
		p.markReady(s)
	}
	p.checkGaps(s, now)
}

func (p *Protocol) logNotFound(s *sender, m *wire.MsgNotFound, d digest.Digest) {
	p.cfg.Logger.Warn("nakack: MSG_NOT_FOUND: sender purged messages this member still lacked; reporting them lost",
		slog.String("sender", s.m.String()),
		slog.String("view", m.View.String()),
		slog.Uint64("missing_from", m.Missing.From),
		slog.Uint64("missing_to", m.Missing.To),
		slog.Uint64("sender_low", m.Low),
		slog.Uint64("sender_highest", m.HighestSent),
		slog.String("window", s.String()),
		slog.String("sender_digest", d.String()),
		slog.String("digest_history", p.history.String()),
	)
}
