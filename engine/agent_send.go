package engine

import (
	"errors"
	"math"
	"time"

	"github.com/nakcast/nakcast/gms"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/wire"
)

// sendState is the send part's state (see agent).
type sendState struct {
	// pend and pendEnd are the payloads taken from the head term for
	// SendBatch and each one's end in the term (logBuffer.fill).
	pend      [][]byte
	pendEnd   []int
	burst     int  // datagrams bundled before a cycle writes them (the batch size)
	sending   bool // the last cycle handed messages to the protocol
	unflushed bool
	bundleAt  time.Duration // when the open bundle got its first message
	// spare is the buffer a term gets when SendDatagram adopts its own.
	spare *wire.Buffer
	// zcCount and zcBytes bound a term sent whole (SendDatagram): one the
	// send window, flow control or the rate limit could never take at
	// once goes through SendBatch, which takes a prefix.
	zcCount, zcBytes int
	// drainSeq and drainBundles are the protocol's NextSeq and Bundles
	// when drainSend last ended (see streaming).
	drainSeq, drainBundles uint64
	protoFull              bool // the protocol refused the last Send (retention window full, or flow control)
	// fullLow and fullRecv are the protocol's SendLimit and GroupReceived when
	// it last refused (or flow control held): with ThreadingDedicated the
	// receiver goroutine wakes the sender only once one of them moved.
	fullLow, fullRecv uint64
	// sw is the sender goroutine's write batch (ThreadingDedicated).
	sw wbatch
}

// initSend sizes the send part's state.
func (a *agent) initSend() {
	m := a.m
	a.pend = make([][]byte, m.q.perTerm)
	a.pendEnd = make([]int, m.q.perTerm)
	a.zcCount, a.zcBytes = m.cfg.Window/2, math.MaxInt
	if m.cfg.InFlightBytes > 0 {
		a.zcBytes = m.cfg.InFlightBytes / 2
	}
	if m.cfg.RateLimit > 0 {
		a.zcCount = 0
	}
}

// sendPart hands the log buffer's committed messages to the protocol and
// flushes the open bundle when the log buffer is idle (drainSend). With
// ThreadingDedicated that is the sender goroutine's duty (runSender): the
// cycle only wakes it when the protocol refused it and room may have been
// made (a purge, or the receivers read more); waking it every cycle while
// nothing moved would make it look again and be refused again.
func (a *agent) sendPart(now time.Duration, p *nakack.Protocol) int {
	if !a.dedicated {
		return a.drainSend(now)
	}
	if a.protoFull && (p.SendLimit() != a.fullLow || p.GroupReceived() != a.fullRecv) {
		a.signalSender()
	}
	return 0
}

// drainSend hands the log buffer's terms to the protocol, oldest first,
// until it holds them back or the log buffer is empty (the agent seals the
// open term when it reaches it: logBuffer.headTerm), then flushes the open
// bundle if the log buffer is idle. A term at least a quarter full with
// only inline messages goes as it is (nakack SendDatagram: no copy, no
// per-message work but the protocol's bookkeeping of the run); any other
// goes through SendBatch in runs up to an aborted claim, of which the
// protocol takes what its window, flow control and rate limit let go.
func (a *agent) drainSend(now time.Duration) int {
	m := a.m
	p := m.proto
	q := m.q
	work := 0
	a.sending = false
	if m.g.Status() != gms.StatusMember {
		return 0 // leaving: nothing more goes out
	}
	for {
		t, end, count, sealed, ok := q.headTerm()
		if !ok {
			break
		}
		if sealed && q.curOff == end {
			q.recycle(t)
			m.signalSpace()
			continue
		}
		if sealed && q.curOff == 0 && a.whole(t, end, count) {
			took, stop := a.sendTerm(t, end, count, now)
			if stop {
				return work + a.flushHeld(now)
			}
			if took {
				m.ctr.sentInPlace.Add(1)
				work += count
				q.recycle(t)
				m.signalSpace()
				if len(p.Outbox()) >= a.burst {
					return work
				}
				continue
			}
		}
		k := q.fill(t, end, a.pend, a.pendEnd)
		if k == 0 {
			continue // skipped an aborted claim
		}
		pls := a.pend[:k]
		_, n, err := p.SendBatch(pls, now)
		if err != nil && !errors.Is(err, nakack.ErrBackPressure) {
			// The first message is refused for good: drop it.
			m.ctr.sendErrors.Add(1)
			m.log.rateLimited("send", err)
			q.release(pls[0])
			q.advanceCursor(a.pendEnd, 1)
			clear(pls)
			continue
		}
		a.noteSent(pls[:n], true, now)
		q.advanceCursor(a.pendEnd, n)
		clear(pls)
		work += n
		if n < k && a.holdBack(p.Held()) {
			return work + a.flushHeld(now)
		}
		if len(p.Outbox()) >= a.burst {
			// A write batch's worth of datagrams: write them before
			// bundling more (the log buffer is not idle, so the open
			// bundle stays open). One iteration must not bundle what
			// producers keep adding, up to a whole retention window,
			// before it writes any of it or delivers the member's own
			// messages (which stability waits for).
			return work
		}
	}
	if a.unflushed && (m.cfg.BundleDelay == 0 || now-a.bundleAt >= m.cfg.BundleDelay) {
		if !a.streaming() {
			p.Flush(now)
			a.unflushed = false
		}
		work++ // a held bundle is flushed by the next iteration
	}
	a.drainSeq, a.drainBundles = p.NextSeq(), p.Bundles()
	return work
}

// whole reports whether term t, sealed with count messages ending at end
// and not yet taken from, goes to the protocol as it is: no out-of-line
// or aborted message, at least a quarter full (a short datagram would pin
// a MaxDatagram buffer until stable; SendBatch copies it into one of its
// size), and within what the protocol can ever take at once.
func (a *agent) whole(t *logTerm, end, count int) bool {
	return !t.special.Load() && 4*end >= a.m.q.termBytes && count <= a.zcCount && end <= a.zcBytes
}

// sendTerm hands term t to the protocol as its datagram (SendDatagram):
// took when it did (the term has the spare buffer now), stop when the
// protocol holds it back (window, flow control): the agent retries later.
// Neither: no spare buffer (the pool's budget), the term goes through
// SendBatch.
func (a *agent) sendTerm(t *logTerm, end, count int, now time.Duration) (took, stop bool) {
	m := a.m
	p := m.proto
	if a.spare == nil {
		if a.spare = m.pool.Get(m.cfg.MaxDatagram); a.spare == nil {
			return false, false
		}
	}
	if _, err := p.SendDatagram(t.buf, count, wire.DataOverhead+end, now); err != nil {
		if why := p.Held(); why != nil {
			return false, a.holdBack(why)
		}
		return false, false
	}
	t.buf, a.spare = a.spare, nil
	// Write the term's new buffer before producers claim in it. A pool
	// buffer comes back from retention long after its last use, its
	// lines out of every cache; a producer's stores into cold lines make
	// its next locked instruction (the claim's compare-and-swap, the
	// commit's add) wait for them to complete, once a message. Written
	// here they are cached, and the agent pays one clear a datagram.
	clear(t.buf.B)
	a.sending = true
	a.protoFull = false
	a.unflushed = false // SendDatagram flushed the open bundle first
	return true, false
}

// holdBack records why the protocol took less than it was given and reports
// whether sending stops for now: the retention window is full (or no pool
// buffer: retry after a purge or a release) or flow control holds (retry
// after the next STABILITY), counted once per episode, or the rate limit
// holds (retry a little later). nil: it stopped before a fragmented
// payload, which the next SendBatch takes.
func (a *agent) holdBack(why error) bool {
	m := a.m
	switch {
	case why == nil:
		return false
	case errors.Is(why, nakack.ErrRateLimit):
		return true
	case !a.protoFull && errors.Is(why, nakack.ErrFlowControl):
		m.ctr.flowControlWaits.Add(1)
	case !a.protoFull:
		m.ctr.protocolBackPressure.Add(1)
	}
	a.protoFull = true
	a.noteFull()
	return true
}

// streaming reports whether an invoked member's application is streaming:
// since the last drainSend it sent enough to fill at least one datagram
// (the protocol closed a full bundle) and some of it is in the open bundle.
// drainSend then leaves that bundle open until the next iteration instead
// of flushing it as idle.
//
// With ThreadingInvoked the ring is empty at every DoWork (the goroutine
// that fills it also drains it), so "the ring is idle", the flush rule of
// the other modes, is true at every DoWork, and an application that sends
// between its DoWork calls would get a short datagram each time (with
// DoWork every 1024 messages of 64 B, every other datagram an eighth
// full). A message sent alone, or a trickle of less than a datagram
// between two DoWork calls, is still flushed at once; a held bundle waits
// one DoWork at most: the next one either fills it, holds it again because
// a datagram's worth more came (the application is still sending), or
// flushes it.
func (a *agent) streaming() bool {
	p := a.m.proto
	return a.m.invoked() && p.NextSeq() != a.drainSeq && p.Bundles() != a.drainBundles
}

// sendDirect is TrySendBatch with ThreadingInvoked when the calling
// goroutine could take the agent (owner) and nothing waits in the
// log buffer: the payloads go straight into the protocol's open
// bundle, one copy, with no ring slot and no hand-over to the goroutine
// that runs DoWork next (the same one, usually). For one message (TrySend)
// taking the agent costs more than the ring's claim and publication, which
// TrySend keeps. It takes the longest prefix that the protocol accepts
// (its window, flow control, the rate limit) and returns its length; the
// caller queues the rest in the ring, which DoWork drains. A full write
// batch (DoWork has not written for a while) or a member not in a view
// leave it all to the ring. The clock is the last iteration's (the
// protocol uses it for its idle announcements, the bundle's age and the
// rate limit), not read again per batch. Called with the agent owned.
func (a *agent) sendDirect(pls [][]byte) int {
	m := a.m
	p := m.proto
	if p == nil || m.q.pending() || len(p.Outbox()) >= a.burst {
		return 0
	}
	if m.g.Status() != gms.StatusMember {
		return 0
	}
	now := a.lastNow
	_, n, err := p.SendBatch(pls, now)
	if err != nil && !errors.Is(err, nakack.ErrBackPressure) {
		return 0 // the ring's path counts and drops it
	}
	a.noteSent(pls[:n], false, now)
	return n
}

// noteSent records pls as taken by the protocol: the open bundle's start,
// that this member is sending. ring says pls are the log buffer's
// payloads, whose out-of-line buffers go back to their free lists now that
// the protocol has copied them (sendDirect's are the caller's).
func (a *agent) noteSent(pls [][]byte, ring bool, now time.Duration) {
	if len(pls) == 0 {
		return
	}
	if q := a.m.q; ring && q.bigOut.Load() > 0 {
		for j, pl := range pls {
			if q.isBig(pl) {
				q.release(pl)
				pls[j] = nil
			}
		}
	}
	a.sending = true
	a.protoFull = false
	if !a.unflushed {
		a.unflushed, a.bundleAt = true, now
	}
}

// noteFull records where the protocol stood when it refused (or flow
// control held): see fullLow.
func (a *agent) noteFull() {
	p := a.m.proto
	a.fullLow, a.fullRecv = p.SendLimit(), p.GroupReceived()
}

// flushHeld flushes the open bundle when the agent stops handing messages
// to the protocol for a while (rate limit, flow control, back-pressure):
// what it holds should not wait for the hold to end.
func (a *agent) flushHeld(now time.Duration) int {
	if !a.unflushed {
		return 0
	}
	a.m.proto.Flush(now)
	a.unflushed = false
	return 1
}

// signalSender wakes the sender goroutine (ThreadingDedicated) if it
// waits; it never blocks.
func (a *agent) signalSender() {
	select {
	case a.sendWake <- struct{}{}:
	default:
	}
}

// runSender is the sender goroutine of ThreadingDedicated: it hands the
// log buffer's messages to the protocol (drainSend, under the lock),
// writes the bundles it produced, and waits on sendWake when there is
// nothing to do: producers signal it (through the send queue's parked
// flag), the receiver goroutine does when the protocol refused for lack
// of room and an iteration may have made some, and Close does. A held
// bundle (BundleDelay) or a rate limit wakes it by a timer.
func (a *agent) runSender() {
	m := a.m
	defer close(a.sendDone)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-a.quit:
			return
		case <-m.stop:
			return
		default:
		}
		work, retry := a.sendIterate()
		a.write(&a.sw)
		if work > 0 {
			continue
		}
		m.q.parked.Store(true)
		if retry == 0 && m.q.pending() {
			// A producer committed after drainSend looked.
			m.q.parked.Store(false)
			continue
		}
		var tc <-chan time.Time
		if retry > 0 {
			t.Reset(retry)
			tc = t.C
		}
		select {
		case <-a.sendWake:
		case <-tc:
		case <-a.quit:
		case <-m.stop:
		}
		m.q.parked.Store(false)
		if tc != nil && !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
	}
}

// sendIterate is one sender-goroutine iteration under the lock. retry is
// how long to wait at most before the next when it did nothing (0: until
// signalled): the open bundle's BundleDelay, or a rate-limit hold.
func (a *agent) sendIterate() (work int, retry time.Duration) {
	m := a.m
	m.lockProto()
	work, retry = a.sendParts()
	m.unlockProto()
	return work, retry
}

// sendParts is sendIterate's work (under the lock).
func (a *agent) sendParts() (work int, retry time.Duration) {
	m := a.m
	p := m.proto
	if p == nil {
		return 0, 0 // not in a view: the receiver goroutine joins
	}
	now := m.now()
	work = a.drainSend(now)
	a.takeOutbox(&a.sw)
	if work > 0 {
		a.lastTraffic = now
		return work, 0
	}
	if a.unflushed && m.cfg.BundleDelay > 0 {
		retry = max(a.bundleAt+m.cfg.BundleDelay-now, time.Microsecond)
	}
	if held := m.q.pending(); held && !a.protoFull {
		// The rate limit holds the ring (the protocol and flow control
		// would have set protoFull and wait for a signal instead).
		retry = rateLimitRetry
	} else if held && a.protoFull {
		// Waiting for the receiver goroutine's signal (room made); look
		// again after a while anyway: a refusal for want of a pool buffer
		// ends with a release, which moves neither OwnLow nor
		// GroupReceived.
		retry = protoFullRetry
	}
	return 0, retry
}

// rateLimitRetry is how often a dedicated sender held by the rate limit
// looks again.
const rateLimitRetry = 200 * time.Microsecond

// protoFullRetry is how often a dedicated sender refused by the protocol
// looks again without a signal.
const protoFullRetry = time.Millisecond
