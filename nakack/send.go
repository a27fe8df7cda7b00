package nakack

import (
	"math"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
)

// Send assigns the next seqno to a copy of payload and appends it to the
// open bundle (or, above one bundle's capacity, to fragments each with their
// own seqno, all claimed at once). The message is retained until stable and
// delivered to self through Poll. It returns ErrBackPressure, claiming
// nothing, beyond SendLimit (the own retention window, or a member's
// receive window, cannot hold it) or when no buffer is available,
// ErrFlowControl or ErrRateLimit when those hold it back (flow.go), and
// ErrTooLarge above Config.MaxMessage.
func (p *Protocol) Send(payload []byte, now time.Duration) (uint64, error) {
	p.fl.held = nil
	if len(payload) > p.cfg.MaxMessage {
		return 0, ErrTooLarge
	}
	p.one[0] = payload
	defer func() { p.one[0] = nil }()
	if p.admit(p.one[:], now) == 0 {
		return 0, p.fl.held
	}
	if len(payload) > p.maxMsg {
		seq, err := p.sendFragmented(payload, now)
		if err == nil {
			p.took(p.one[:], seq, p.nextSeq-1)
		}
		return seq, err
	}
	if p.nextSeq > p.SendLimit() {
		p.stats.BackPressure++
		p.fl.held = ErrBackPressure
		return 0, ErrBackPressure
	}
	var dst []byte
	if p.bundle != nil {
		if p.bw.Count() >= p.cfg.MaxBundle {
			p.flushBundle(now)
		} else if dst = p.bw.Claim(len(payload)); dst == nil {
			if p.growBundle() {
				dst = p.bw.Claim(len(payload))
			}
			if dst == nil {
				p.flushBundle(now)
			}
		}
	}
	if dst == nil {
		if !p.openBundle(p.cfg.MaxDatagram) {
			p.stats.BackPressure++
			p.fl.held = ErrBackPressure
			return 0, ErrBackPressure
		}
		if dst = p.bw.Claim(len(payload)); dst == nil {
			panic("nakack: message does not fit an empty bundle") // maxMsg checked above
		}
	}
	copy(dst, payload)
	seq := p.nextSeq
	p.nextSeq++
	// Only the slot write: the open bundle's messages enter the own window
	// in one run when it is flushed or at the next entry point that looks
	// at the window (publishOwn).
	p.ownPend[p.ownN] = msg{ref: p.bundleRef, off: offsetIn(p.bundle, dst), n: uint32(len(dst))}
	p.ownN++
	p.stats.Sent++
	p.took(p.one[:], seq, seq)
	if p.bw.Count() >= p.cfg.MaxBundle {
		p.flushBundle(now)
	}
	return seq, nil
}

// openBundle starts the own bundle in a buffer of size bytes (at least
// the class holding size, at most MaxDatagram) at the next seqno. It
// reports false when the pool has no buffer (counted as Drops.NoBuffer).
func (p *Protocol) openBundle(size int) bool {
	if p.bundle = p.getBuf(min(size, p.cfg.MaxDatagram)); p.bundle == nil {
		return false
	}
	p.bundleRef = p.newRef(p.bundle)
	b := p.bundle.B[:min(len(p.bundle.B), p.cfg.MaxDatagram)]
	if err := p.bw.Reset(b, p.hdr, p.self, p.nextSeq); err != nil {
		panic(err) // sizes validated in New; a class holds at least MinBufferSize
	}
	return true
}

// growBundle moves the open bundle out of a buffer smaller than
// MaxDatagram (bundleSize) into a MaxDatagram one, so that a run that
// finds it too small continues it: the datagrams are the same whatever
// the runs' lengths. The messages already stored from it read through
// its dref, which follows (as in compact). It reports false when the
// bundle is MaxDatagram already or the pool has no buffer.
func (p *Protocol) growBundle() bool {
	old := p.bundle
	if len(old.B) >= p.cfg.MaxDatagram {
		return false
	}
	b := p.cfg.Pool.Get(p.cfg.MaxDatagram)
	if b == nil {
		return false
	}
	if err := p.bw.Grow(b.B[:p.cfg.MaxDatagram]); err != nil {
		panic(err) // longer than the old buffer
	}
	b.N = old.N
	if ref := p.bundleRef; ref.held {
		b.Retain(1)
		ref.buf = b
		old.Release() // the window's
	} else {
		ref.buf = b
	}
	old.Release() // the bundle's
	p.bundle = b
	return true
}

// bundleSize is the buffer SendBatch opens a bundle in for the run ps:
// MaxDatagram, unless the messages that would go into it (up to the first
// one above maxMsg, at most maxBundle) fit in small bytes, the compaction
// threshold: then just what they take. A lone message or a short burst
// so goes out of a buffer of its own size class, not a MaxDatagram one
// that flushBundle would copy it out of (compact): one pool buffer and
// one copy less per datagram of a ping-pong. A bundle sized that way that
// the next run finds too small grows (growBundle).
func bundleSize(ps [][]byte, maxMsg, maxBundle, small int) int {
	need := wire.DataOverhead + wire.TrailerLen
	for i, pl := range ps {
		if i == maxBundle || len(pl) > maxMsg {
			break
		}
		if need += wire.MsgOverhead + len(pl); need > small {
			return math.MaxInt
		}
	}
	return need
}

// Flush emits the open bundle, if any. The engine calls it when its send
// queue goes idle (no fixed bundling wait).
func (p *Protocol) Flush(now time.Duration) {
	if p.bundle != nil {
		p.flushBundle(now)
	}
	p.filledBundle = false
}

// publishOwn inserts the open bundle's messages sent since the last call
// into the own window as one run (retained, deliverable to self). Called by
// flushBundle and by every entry point that reads or changes the own
// window (Poll, Receive, Tick, ForcePurge, CheckOverwrite,
// OverwriteDigest).
func (p *Protocol) publishOwn() {
	n := p.ownN
	if n == 0 {
		return
	}
	p.ownN = 0
	first := p.nextSeq - uint64(n)
	r := p.own.win.AddRun(first, p.ownPend[:n])
	p.holdRef(p.own, p.bundleRef, r.Added, p.nextSeq-1)
	clear(p.ownPend[:n])
	p.own.highest = p.nextSeq - 1
	p.markReady(p.own)
}

func (p *Protocol) flushBundle(now time.Duration) {
	p.publishOwn()
	b := p.bundle
	ref := p.bundleRef
	p.bundle, p.bundleRef = nil, nil
	d := p.bw.Finish()
	if d == nil {
		p.dropRef(ref)
		b.Release()
		return
	}
	b = p.compact(b, ref, len(d))
	p.emit(digest.Member{}, b, len(d))
	p.stats.Bundles++
	p.sentData(now)
}

// compact moves a small bundle (a lone message, a short burst: at most
// MaxDatagram/8 bytes) out of its MaxDatagram buffer into one of its own
// size class, so that what the own window retains until stable is the
// datagram's bytes, not a whole maximum-size buffer: a ping-pong of 64 B
// messages on loopback otherwise pinned a 64 KB buffer per message for a
// stability round, grew the pool by some 100 MB and brought the garbage
// collections that made its p99 latency. The messages stored from the
// bundle keep their offsets (they read through ref). It returns the buffer
// to emit, holding the reference b held; b itself if nothing was moved.
func (p *Protocol) compact(b *wire.Buffer, ref *dref, n int) *wire.Buffer {
	if n > p.cfg.MaxDatagram/8 || len(b.B) < p.cfg.MaxDatagram {
		return b // large, or already in a small buffer (bundleSize)
	}
	c := p.cfg.Pool.Get(n)
	if c == nil {
		return b // no room in the budget: keep the big one
	}
	c.N = copy(c.B, b.B[:n])
	if ref.held {
		c.Retain(1)
		ref.buf = c
		b.Release() // the window's
	}
	b.Release() // the bundle's
	return c
}

// sentData restarts the idle Highest announcement after new data.
func (p *Protocol) sentData(now time.Duration) {
	p.lastData = now
	p.highestIval = p.cfg.HighestInterval
	p.highestAt = now + p.highestIval
}

// sendFragmented claims one seqno per fragment and emits every fragment.
func (p *Protocol) sendFragmented(payload []byte, now time.Duration) (uint64, error) {
	fp := p.fragP
	count := (len(payload) + fp - 1) / fp
	w := p.own.win
	if p.nextSeq-1+uint64(count) > p.SendLimit() {
		p.stats.BackPressure++
		p.fl.held = ErrBackPressure
		return 0, ErrBackPressure
	}
	p.Flush(now) // keep seqno order on the wire
	// Take every buffer before claiming, so a refused buffer claims nothing.
	bufs := make([]*wire.Buffer, count) // fragmented sends are rare: allocation accepted
	for i := range bufs {
		if bufs[i] = p.getBuf(min(p.cfg.MaxDatagram, wire.FragOverhead+fp)); bufs[i] == nil {
			for _, b := range bufs[:i] {
				b.Release()
			}
			p.stats.BackPressure++
			p.fl.held = ErrBackPressure
			return 0, ErrBackPressure
		}
	}
	first := p.nextSeq
	p.nextSeq += uint64(count)
	for i, b := range bufs {
		part := payload[i*fp : min(len(payload), (i+1)*fp)]
		f := wire.Frag{Origin: p.self, Seq: first + uint64(i), Index: uint32(i), Count: uint32(count),
			Total: uint32(len(payload)), Payload: part}
		d, err := wire.EncodeFrag(b.B, p.hdr, f)
		if err != nil {
			panic(err)
		}
		ref := p.newRef(b)
		w.Add(f.Seq, msg{ref: ref, off: uint32(wire.FragOverhead), n: uint32(len(part)), fi: uint32(i), fc: uint32(count)})
		p.holdRef(p.own, ref, 1, f.Seq)
		p.emit(digest.Member{}, b, len(d))
		p.stats.Bundles++
	}
	p.own.highest = p.nextSeq - 1
	p.stats.Sent += uint64(count)
	p.markReady(p.own)
	p.sentData(now)
	return first, nil
}

// announceHighest multicasts HIGHEST while idle, with doubling intervals.
func (p *Protocol) announceHighest(now time.Duration) {
	p.highestIval = min(2*p.highestIval, p.cfg.HighestMaxInterval)
	p.highestAt = now + p.highestIval
	hi := p.nextSeq - 1
	if hi == 0 || !p.hasView || len(p.view.Members) < 2 {
		return
	}
	b := p.getBuf(wire.HighestOverhead)
	if b == nil {
		return
	}
	d, err := wire.EncodeHighest(b.B, p.hdr, wire.Highest{View: p.view.ID, Low: p.own.win.Low(), Highest: hi})
	if err != nil {
		panic(err)
	}
	p.emit(digest.Member{}, b, len(d))
	p.stats.HighestSent++
}

// repairAllowed takes one message from the repair budget.
func (p *Protocol) repairAllowed(now time.Duration) bool {
	if now >= p.budgetAt {
		p.budget = p.cfg.RepairBudget
		p.budgetAt = now + p.cfg.RepairInterval
	}
	if p.budget <= 0 {
		p.stats.RepairsOverBudget++
		return false
	}
	p.budget--
	return true
}

// repairer bundles repair messages of one origin into contiguous runs,
// charging what it sends to the requester's credit (nil: charged when the
// request was queued, chargeRange).
type repairer struct {
	p      *Protocol
	origin digest.Member
	credit *repairCredit
	buf    *wire.Buffer
	w      wire.DataWriter
	next   uint64 // seqno the open bundle expects next
}

// afford reports whether the requester's credit covers m at the most it
// can cost (a bundle of its own).
func (r *repairer) afford(m msg) bool {
	return r.credit == nil || r.credit.tokens >= int64(r.p.repairCost(m, true))
}

func (r *repairer) add(seq uint64, m msg) {
	p := r.p
	if m.fc != 0 {
		r.flush()
		r.addFrag(seq, m)
		return
	}
	if r.buf != nil && seq == r.next && r.w.Count() < p.cfg.MaxBundle && r.w.Append(m.payload()) {
		r.next++
		r.charge(p.repairCost(m, false))
		p.stats.Retransmitted++
		return
	}
	r.flush()
	if r.buf = p.getBuf(p.cfg.MaxDatagram); r.buf == nil {
		return
	}
	h := p.hdr
	h.Flags |= wire.FlagRepair
	if err := r.w.Reset(r.buf.B[:p.cfg.MaxDatagram], h, r.origin, seq); err != nil {
		panic(err)
	}
	r.w.Append(m.payload())
	r.next = seq + 1
	r.charge(p.repairCost(m, true))
	p.stats.Retransmitted++
}

// addFrag emits the repair of one fragment as a datagram of its own.
func (r *repairer) addFrag(seq uint64, m msg) {
	p := r.p
	b := p.getBuf(min(p.cfg.MaxDatagram, wire.FragOverhead+int(m.n)))
	if b == nil {
		return
	}
	h := p.hdr
	h.Flags |= wire.FlagRepair
	// The message's Total is not stored; the reassembler does not need
	// it (fragments of one message have equal sizes but the last).
	f := wire.Frag{Origin: r.origin, Seq: seq, Index: m.fi, Count: m.fc, Total: uint32(m.fc) * uint32(p.fragP), Payload: m.payload()}
	d, err := wire.EncodeFrag(b.B, h, f)
	if err != nil {
		b.Release()
		return
	}
	p.emit(digest.Member{}, b, len(d))
	r.charge(len(d))
	p.stats.RepairBytes += uint64(len(d))
	p.stats.Retransmitted++
}

func (r *repairer) charge(n int) {
	if r.credit != nil {
		r.credit.tokens -= int64(n)
	}
}

func (r *repairer) flush() {
	if r.buf == nil {
		return
	}
	d := r.w.Finish()
	r.p.emit(digest.Member{}, r.buf, len(d))
	r.p.stats.RepairBytes += uint64(len(d))
	r.buf = nil
}

// onXmitReq handles another member's retransmission request (size is the
// datagram's length, which earns the requester repair credit): repair if
// we are the target (or hold a departed target's data), else take it as a
// suppression signal for our own request. A request from a member that
// may not make requests (peer) is dropped and counted (Drops.Stranger).
func (p *Protocol) onXmitReq(h wire.Header, body []byte, size int, now time.Duration) error {
	req, err := wire.DecodeXmitReq(h, body)
	if err != nil {
		p.stats.Drops.Malformed++
		return err
	}
	if !p.peer(h.Sender) {
		p.stats.Drops.Stranger++
		return nil
	}
	p.stats.NakReceived++
	if req.Target == p.self {
		p.repair(p.own, h.Sender, p.earnCredit(h.Sender, size), &req, now)
		return nil
	}
	s := p.senders[req.Target]
	if s == nil {
		return nil
	}
	if s.state == departed {
		p.queueRepair(s, p.earnCredit(h.Sender, size), &req, now)
		return nil
	}
	p.suppress(s, &req, now)
	return nil
}

// repair answers req for s's messages: repairs what is held (skipping what
// was repaired within the linger), and, only for own messages, MSG_NOT_FOUND
// for what lies at or below our low, only to a request for our current view.
//
// A request for another view comes from a member that would ignore the
// answer (onMsgNotFound takes only one for its own view): typically one
// that has left the view, a graceful leaver still delivering or a member
// excluded without knowing it yet, whose delivered point stability no
// longer waits for, so our low may legitimately have passed it. A member
// that is still installing our view cannot be behind our low (stability
// waits for its report in our view): if it is, its next request, in our
// view, gets the answer.
//
// A request for own seqnos at or below the stable point a STABILITY of
// the current view reached is stale when it comes from a member of that
// view (stableFor): it crossed its requester's own STABLE.
func (p *Protocol) repair(s *sender, requester digest.Member, credit *repairCredit, req *wire.XmitReq, now time.Duration) {
	if s.win == nil {
		return
	}
	w := s.win
	r := repairer{p: p, origin: s.m, credit: credit}
	var missing wire.Range
	var stable uint64
	if s.own {
		stable = p.stableFor(requester, req.View)
	}
	hi := w.Received()
	for i := 0; i < req.Ranges.Len(); i++ {
		rg := req.Ranges.At(i)
		if rg.To <= req.Delivered {
			p.stats.StaleRequests++
			continue
		}
		rg.From = max(rg.From, req.Delivered+1)
		rg.To = min(rg.To, hi)
		if rg.From <= stable {
			// The requester delivered these since (the STABILITY of this
			// view counted it): the request crossed its own STABLE.
			p.stats.StaleRequests++
			rg.From = stable + 1
		}
		if rg.From > rg.To {
			continue
		}
		if low := w.Low(); rg.From <= low {
			if s.own {
				if missing.From == 0 || rg.From < missing.From {
					missing.From = rg.From
				}
				missing.To = max(missing.To, min(rg.To, low))
			}
			rg.From = low + 1
		}
		if !p.repairRange(s, &r, rg, now, NoDeadline) {
			break
		}
	}
	r.flush()
	if missing.From == 0 {
		return
	}
	if !p.hasView || req.View != p.view.ID {
		p.stats.NotFoundOtherView++
		return
	}
	p.sendMsgNotFound(requester, missing, now)
}

// stableFor returns the own seqno up to which every request of requester
// made in view is stale: the current view's stable point (stablePoint)
// when view is the current view and requester a member of it, whose
// report the rounds that made it stable counted; else 0. A member outside
// the view (a departed sender B still serves) or a request of another
// view (a merge brings members that B's stability never waited for) is
// not covered: for them what lies at or below low may be truly gone, and
// they get MSG_NOT_FOUND.
func (p *Protocol) stableFor(requester digest.Member, view digest.ViewID) uint64 {
	if !p.hasView || view != p.view.ID {
		return 0
	}
	if _, in := p.viewPos[requester]; !in {
		return 0
	}
	return p.stablePoint
}

// repairRange adds s's held messages in rg to r, skipping those repaired
// within the linger or, by anyone, at or after since. It returns false
// once the repair budget or the requester's credit is spent.
func (p *Protocol) repairRange(s *sender, r *repairer, rg wire.Range, now, since time.Duration) bool {
	w := s.win
	if s.stamps == nil {
		s.stamps = make([]stamp, w.Capacity())
	}
	mask := uint64(len(s.stamps) - 1)
	rg.From = max(rg.From, w.Low()+1)
	for seq := rg.From; seq <= rg.To; seq++ {
		m, ok := w.Get(seq)
		if !ok {
			continue
		}
		st := &s.stamps[seq&mask]
		if st.seq == seq {
			if st.at >= since {
				p.stats.RepairsSuppressed++
				continue
			}
			if now-st.at < p.repairLinger {
				p.stats.RepairsSkipped++
				continue
			}
		}
		if !r.afford(m) {
			p.stats.RepairsOverCredit++
			return false
		}
		if !p.repairAllowed(now) {
			return false
		}
		st.seq, st.at = seq, now
		r.add(seq, m)
	}
	return true
}

// queueRepair takes a request for a departed sender's messages: every
// member holding them may answer, so the repair waits a random delay
// (Config.RepairJitter) during which a repair seen from another member
// suppresses ours (stamped on receipt, see stampDeparted). What is queued
// is charged to the requester's credit at once (chargeRange).
func (p *Protocol) queueRepair(s *sender, credit *repairCredit, req *wire.XmitReq, now time.Duration) {
	if s.win == nil {
		return
	}
	if p.cfg.RepairJitter <= 0 {
		p.repair(s, digest.Member{}, credit, req, now)
		return
	}
	w := s.win
	hi := w.Received()
	for i := 0; i < req.Ranges.Len(); i++ {
		rg := req.Ranges.At(i)
		if rg.To <= req.Delivered {
			p.stats.StaleRequests++
			continue
		}
		rg.From = max(rg.From, req.Delivered+1, w.Low()+1)
		rg.To = min(rg.To, hi)
		if rg.From > rg.To {
			continue
		}
		if rg = p.chargeRange(s, rg, credit); rg.From > rg.To {
			break
		}
		s.rq = addRange(s.rq, rg, p.cfg.MaxNakRanges)
	}
	if len(s.rq) == 0 || s.inRQ {
		return
	}
	s.inRQ = true
	s.rqSince = now
	s.rqAt = now + p.spread(p.cfg.RepairJitter)
	p.repairQ = append(p.repairQ, s)
}

// delayedRepair sends the queued repairs of departed sender s, minus what
// others repaired since the first request.
func (p *Protocol) delayedRepair(s *sender, now time.Duration) {
	r := repairer{p: p, origin: s.m}
	if s.win != nil {
		for _, rg := range s.rq {
			if !p.repairRange(s, &r, rg, now, s.rqSince) {
				break
			}
		}
	}
	r.flush()
	p.dequeueRepair(s)
}

func (p *Protocol) dequeueRepair(s *sender) {
	s.rq = s.rq[:0]
	if !s.inRQ {
		return
	}
	s.inRQ = false
	for i, q := range p.repairQ {
		if q == s {
			p.repairQ = append(p.repairQ[:i], p.repairQ[i+1:]...)
			break
		}
	}
}

// stampDeparted records that seqnos first..last of departed sender s were
// just seen on the network (someone repaired them): a delayed repair of
// ours for them is suppressed.
func (p *Protocol) stampDeparted(s *sender, first, last uint64, now time.Duration) {
	if !s.inRQ || s.win == nil {
		return
	}
	if s.stamps == nil {
		s.stamps = make([]stamp, s.win.Capacity())
	}
	mask := uint64(len(s.stamps) - 1)
	for seq := first; seq <= last && seq-first < uint64(len(s.stamps)); seq++ {
		s.stamps[seq&mask] = stamp{seq: seq, at: now}
	}
}

// addRange inserts r into the sorted disjoint list rs, merging overlapping
// and adjacent ranges; beyond max ranges the last one absorbs the rest.
func addRange(rs []wire.Range, r wire.Range, max int) []wire.Range {
	i := 0
	for i < len(rs) && rs[i].To+1 < r.From {
		i++
	}
	j := i
	for j < len(rs) && rs[j].From <= r.To+1 {
		r.From = min(r.From, rs[j].From)
		r.To = maxU(r.To, rs[j].To)
		j++
	}
	if i == j {
		rs = append(rs, wire.Range{})
		copy(rs[i+1:], rs[i:])
		rs[i] = r
	} else {
		rs[i] = r
		rs = append(rs[:i+1], rs[j:]...)
	}
	if len(rs) > max {
		rs[max-1].To = rs[len(rs)-1].To
		rs = rs[:max]
	}
	return rs
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// sendMsgNotFound tells requester (unicast) that missing is purged here:
// our low, highest sent and whole digest (truncated to one datagram).
func (p *Protocol) sendMsgNotFound(requester digest.Member, missing wire.Range, now time.Duration) {
	p.entries = p.appendDigest(p.entries[:0])
	n := min(len(p.entries), wire.MaxDigestEntries(p.cfg.MaxDatagram))
	b := p.getBuf(wire.MsgNotFoundOverhead + n*wire.EntryLen)
	if b == nil {
		return
	}
	d, err := wire.EncodeMsgNotFound(b.B, p.hdr, p.view.ID, requester, missing,
		p.own.win.Low(), p.nextSeq-1, wire.EntrySlice(p.entries[:n]))
	if err != nil {
		b.Release()
		return
	}
	p.emit(requester, b, len(d))
	p.stats.MsgNotFoundSent++
}

// SendBatch sends a run of messages as repeated Send calls would (same
// seqnos, same bundles, same datagrams), with the per-message work reduced
// to copying each payload into the open bundle: the window check is made
// once for the whole run and the counters are updated once per run.
//
// It takes the longest prefix of payloads that can be sent now and returns
// the seqno of its first message and its length n; its messages got seqnos
// first..first+n-1. It stops early, without error, at SendLimit, where
// flow control or the rate limit hold (flow.go), when no buffer is
// available for a new bundle (Held says which), and before a payload that
// needs fragments or is refused: the next call reports it. A first payload
// larger than a bundle takes the fragment path on its own (n = 1, and
// first..NextSeq()-1 are its fragments' seqnos). An error is returned only
// when the first payload cannot be sent (ErrBackPressure, ErrFlowControl,
// ErrRateLimit, ErrTooLarge), with n = 0 and nothing claimed.
func (p *Protocol) SendBatch(payloads [][]byte, now time.Duration) (first uint64, n int, err error) {
	p.fl.held = nil
	if len(payloads) == 0 {
		return p.nextSeq, 0, nil
	}
	if len(payloads[0]) > p.maxMsg {
		seq, err := p.Send(payloads[0], now)
		if err != nil {
			return 0, 0, err
		}
		return seq, 1, nil
	}
	todo := p.sendable(payloads, now)
	if len(todo) == 0 {
		return 0, 0, p.fl.held
	}
	first = p.nextSeq
	maxMsg, maxBundle := p.maxMsg, p.cfg.MaxBundle
	for n < len(todo) {
		if p.bundle == nil {
			size := p.cfg.MaxDatagram
			if !p.filledBundle {
				size = bundleSize(todo[n:], maxMsg, maxBundle, p.cfg.MaxDatagram/8)
			}
			if !p.openBundle(size) {
				p.fl.held = ErrBackPressure
				break
			}
		}
		// Fill the open bundle: wire's tight loop, then the window
		// entries from the offsets it wrote.
		ref, k := p.bundleRef, p.ownN
		offs := p.bundleOffs[:max(0, maxBundle-p.bw.Count())]
		taken := p.bw.AppendRun(todo[n:], len(offs), maxMsg, offs)
		pend, pls := p.ownPend[k:k+taken], todo[n:n+taken]
		for j, o := range offs[:taken] {
			pend[j] = msg{ref: ref, off: o, n: uint32(len(pls[j]))}
		}
		p.ownN = k + taken
		p.nextSeq += uint64(taken)
		n += taken
		if n == len(todo) || len(todo[n]) > maxMsg {
			if n < len(todo) {
				p.fl.held = nil // the next call takes the fragmented payload
			}
			if p.bw.Count() >= maxBundle {
				p.flushBundle(now)
			}
			break
		}
		if taken == 0 && p.bw.Count() == 0 {
			panic("nakack: message does not fit an empty bundle") // maxMsg checked above
		}
		// The bundle is full (count or bytes): emit it and open another,
		// unless it is a small one that can grow.
		if p.bw.Count() < maxBundle && p.growBundle() {
			continue
		}
		p.flushBundle(now)
		p.filledBundle = true
	}
	p.stats.Sent += uint64(n)
	if n == 0 {
		p.stats.BackPressure++
		return 0, 0, ErrBackPressure
	}
	p.took(todo[:n], first, p.nextSeq-1)
	return first, n, nil
}

// sendable returns the prefix of payloads that SendLimit, flow control and
// the rate limit let SendBatch take now (Held says why it is shorter).
// SendLimit does not move during the run (only STABILITY moves it).
func (p *Protocol) sendable(payloads [][]byte, now time.Duration) [][]byte {
	limit := p.SendLimit()
	if p.nextSeq > limit {
		p.stats.BackPressure++
		p.fl.held = ErrBackPressure
		return nil
	}
	todo := payloads[:min(uint64(len(payloads)), limit-p.nextSeq+1)]
	if len(todo) < len(payloads) {
		p.fl.held = ErrBackPressure
	}
	return todo[:p.admit(todo, now)]
}
