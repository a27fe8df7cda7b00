package gms

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/nakcast/nakcast/digest"
)

// fakeProto is a small NAKACK model, the protocol of newHarness's nodes:
// for tests of gms's own rules (views, suspicion, merges, exclusion); the
// scenarios that need real data (cuts, state transfer, joins under
// traffic, seed 002) run on the real nakack (newNakHarness). It models
// per-sender windows, NAKs answered by the original sender (or by any
// holder once the sender departed), MSG_NOT_FOUND for purged seqnos,
// STABLE/STABILITY with the capture rule, set/merge/overwrite
// digest, cuts. Its datagrams start with fakeMagic, so they never collide
// with wire's version byte.
type fakeProto struct {
	self     digest.Member
	view     View
	seq      uint64
	wins     map[digest.Member]*fwin
	closed   map[digest.Member]uint64 // delivered when the window was closed
	captures map[uint64]digest.Digest
	capSeq   uint64
	out      []fakeOut
	app      *fakeApp
	hide     map[digest.Member]bool // Digest() omits these (seed 002's unset entry)
	pending  [][]byte               // data from senders without a window
	stable   map[digest.Member]digest.Digest
	nextNak  time.Duration
	nextStab time.Duration
	nextHigh time.Duration
	notFound int
	xmits    []fakeXmit // requests this member sent
	errs     []string
}

type fakeXmit struct {
	origin   digest.Member
	from, to uint64
}

type fakeOut struct {
	to   digest.Member // zero: multicast
	data []byte
}

type fwin struct {
	low, hd, hr uint64
	purged      uint64 // highest seqno removed by purge (not by a window start)
	msgs        map[uint64][]byte
	lost        map[uint64]bool
	fresh       bool // created by InstallView at 0, nothing received yet
}

func newWin(at uint64) *fwin {
	return &fwin{low: at, hd: at, hr: at, msgs: make(map[uint64][]byte), lost: make(map[uint64]bool)}
}

const (
	fakeMagic     = 0xEE
	fkData        = 1
	fkXmit        = 2
	fkNotFound    = 3
	fkStable      = 4
	fkStability   = 5
	fkHighest     = 6
	fakeNak       = 20 * time.Millisecond
	fakeStable    = 50 * time.Millisecond
	fakeHighest   = 40 * time.Millisecond
	fakeMaxQueued = 512
)

func newFakeProto(self digest.Member, app *fakeApp, now time.Duration) *fakeProto {
	return &fakeProto{
		self: self, app: app,
		wins:     map[digest.Member]*fwin{self: newWin(0)},
		closed:   make(map[digest.Member]uint64),
		captures: make(map[uint64]digest.Digest),
		hide:     make(map[digest.Member]bool),
		stable:   make(map[digest.Member]digest.Digest),
		nextNak:  now + fakeNak, nextStab: now + fakeStable, nextHigh: now + fakeHighest,
	}
}

func (p *fakeProto) errorf(f string, a ...any) { p.errs = append(p.errs, fmt.Sprintf(f, a...)) }

// --- encoding (test-only, trusted input) ---

func fenc(kind byte, origin digest.Member, a, b uint64, payload []byte) []byte {
	buf := []byte{fakeMagic, kind}
	buf = appendMemberB(buf, origin)
	buf = binary.LittleEndian.AppendUint64(buf, a)
	buf = binary.LittleEndian.AppendUint64(buf, b)
	return append(buf, payload...)
}

func fdec(buf []byte) (kind byte, origin digest.Member, a, b uint64, payload []byte) {
	return buf[1], getMember(buf[2:]), binary.LittleEndian.Uint64(buf[14:]), binary.LittleEndian.Uint64(buf[22:]), buf[30:]
}

func encEntries(d digest.Digest) []byte {
	var b []byte
	for i := 0; i < d.Len(); i++ {
		e := d.At(i)
		b = appendMemberB(b, e.Member)
		b = binary.LittleEndian.AppendUint64(b, e.Delivered)
	}
	return b
}

func decEntries(b []byte) []digest.Entry {
	var es []digest.Entry
	for len(b) >= 20 {
		es = append(es, digest.Entry{Member: getMember(b), Delivered: binary.LittleEndian.Uint64(b[12:])})
		b = b[20:]
	}
	return es
}

// --- application traffic ---

// send multicasts payload as our next message and delivers it to ourselves.
func (p *fakeProto) send(payload []byte) uint64 {
	p.seq++
	w := p.wins[p.self]
	w.msgs[p.seq] = payload
	w.hr = p.seq
	p.out = append(p.out, fakeOut{data: fenc(fkData, p.self, p.seq, 0, payload)})
	return p.seq
}

// poll delivers every deliverable message and lost run, senders in order.
func (p *fakeProto) poll() {
	for _, m := range sortedKeys(p.wins) {
		p.pollWin(m, p.wins[m])
	}
}

func (p *fakeProto) pollWin(m digest.Member, w *fwin) {
	for {
		s := w.hd + 1
		if pl, ok := w.msgs[s]; ok {
			w.fresh = false
			w.hd = s
			p.app.deliver(m, s, pl)
			continue
		}
		if w.lost[s] {
			e := s
			for w.lost[e+1] {
				e++
			}
			for x := s; x <= e; x++ {
				delete(w.lost, x)
			}
			w.hd = e
			p.app.lostRange(m, s, e)
			continue
		}
		return
	}
}

// --- receive ---

func (p *fakeProto) receive(buf []byte, now time.Duration) {
	kind, origin, a, b, payload := fdec(buf)
	switch kind {
	case fkData:
		w := p.wins[origin]
		if w == nil {
			if origin != p.self && len(p.pending) < fakeMaxQueued {
				p.pending = append(p.pending, slices.Clone(buf))
			}
			return
		}
		if a <= w.hd || a <= w.low {
			return
		}
		if _, ok := w.msgs[a]; !ok {
			w.msgs[a] = slices.Clone(payload)
			delete(w.lost, a)
		}
		w.hr = max(w.hr, a)
	case fkHighest:
		if w := p.wins[origin]; w != nil && origin != p.self {
			w.hr = max(w.hr, a)
		}
	case fkXmit:
		p.onXmit(origin, a, b, getMember(payload))
	case fkNotFound:
		requester := getMember(payload)
		if requester != p.self || !p.view.Contains(origin) {
			return
		}
		if w := p.wins[origin]; w != nil {
			p.notFound++
			for s := w.hd + 1; s <= a; s++ {
				if _, ok := w.msgs[s]; !ok {
					w.lost[s] = true
				}
			}
			w.hr = max(w.hr, a)
		}
	case fkStable:
		if p.view.Coord().Member != p.self || a != p.view.ID.Counter {
			return
		}
		sender := getMember(payload)
		p.stable[sender] = digest.New(decEntries(payload[12:]))
		p.maybeStability()
	case fkStability:
		if a != p.view.ID.Counter || getMember(payload) != p.view.Coord().Member {
			return
		}
		for _, e := range decEntries(payload[12:]) {
			if w := p.wins[e.Member]; w != nil {
				w.purge(min(e.Delivered, w.hd))
			}
		}
	}
}

func (w *fwin) purge(upto uint64) {
	for s := w.low + 1; s <= upto; s++ {
		delete(w.msgs, s)
	}
	w.low = max(w.low, upto)
	w.purged = max(w.purged, upto)
}

func (p *fakeProto) onXmit(origin digest.Member, from, to uint64, requester digest.Member) {
	w := p.wins[origin]
	if w == nil {
		return
	}
	departed := !p.view.Contains(origin)
	if origin != p.self && !departed {
		return
	}
	var nf uint64
	for s := from; s <= to; s++ {
		if pl, ok := w.msgs[s]; ok {
			p.out = append(p.out, fakeOut{data: fenc(fkData, origin, s, 0, pl)})
		} else if origin == p.self && s <= w.low {
			nf = s
		}
	}
	if nf > 0 {
		p.out = append(p.out, fakeOut{data: fenc(fkNotFound, p.self, w.low, 0, appendMemberB(nil, requester))})
	}
}

// maybeStability: once every view member reported, multicast the minimum.
func (p *fakeProto) maybeStability() {
	for _, m := range p.view.Members {
		if _, ok := p.stable[m.Member]; !ok {
			return
		}
	}
	var es []digest.Entry
	for _, s := range p.view.Members {
		low := ^uint64(0)
		for _, m := range p.view.Members {
			e, ok := p.stable[m.Member].Lookup(s.Member)
			if !ok {
				low = 0 // some member's digest lacks the sender: never purged
				break
			}
			low = min(low, e.Delivered)
		}
		if low > 0 {
			es = append(es, digest.Entry{Member: s.Member, Delivered: low})
		}
	}
	clear(p.stable)
	payload := appendMemberB(nil, p.self)
	payload = append(payload, encEntries(digest.New(es))...)
	buf := fenc(fkStability, p.self, p.view.ID.Counter, 0, payload)
	p.out = append(p.out, fakeOut{data: buf})
	p.receive(buf, 0)
}

// advertised is what STABLE carries: live delivered values, lowered to every
// capture held (design.md, "Stability").
func (p *fakeProto) advertised() digest.Digest {
	var es []digest.Entry
	for _, m := range sortedKeys(p.wins) {
		e := digest.Entry{Member: m, Delivered: p.wins[m].hd}
		for _, id := range sortedIDs(p.captures) {
			if c, ok := p.captures[id].Lookup(m); ok {
				e.Delivered = min(e.Delivered, c.Delivered)
			}
		}
		es = append(es, e)
	}
	return digest.New(es)
}

// --- timers ---

func (p *fakeProto) tick(now time.Duration) {
	if now >= p.nextNak {
		p.nextNak = now + fakeNak
		for _, m := range sortedKeys(p.wins) {
			if m == p.self {
				continue
			}
			w := p.wins[m]
			for _, r := range w.gaps(nil) {
				p.xmits = append(p.xmits, fakeXmit{m, r.From, r.To})
				p.out = append(p.out, fakeOut{data: fenc(fkXmit, m, r.From, r.To, appendMemberB(nil, p.self))})
				break // one range per round is enough for the model
			}
		}
	}
	if now >= p.nextHigh {
		p.nextHigh = now + fakeHighest
		if p.seq > 0 {
			p.out = append(p.out, fakeOut{data: fenc(fkHighest, p.self, p.seq, 0, nil)})
		}
	}
	if now >= p.nextStab {
		p.nextStab = now + fakeStable
		if !p.view.IsZero() {
			payload := appendMemberB(nil, p.self)
			payload = append(payload, encEntries(p.advertised())...)
			buf := fenc(fkStable, p.self, p.view.ID.Counter, 0, payload)
			if c := p.view.Coord(); c.Member == p.self {
				p.receive(buf, now)
			} else {
				p.out = append(p.out, fakeOut{to: c.Member, data: buf})
			}
		}
	}
}

func (p *fakeProto) nextDeadline() time.Duration { return min(p.nextNak, p.nextHigh, p.nextStab) }

func (w *fwin) gaps(dst []Range) []Range {
	return appendRuns(dst, w.hd+1, w.hr, func(s uint64) bool {
		_, held := w.msgs[s]
		return !held && !w.lost[s]
	})
}

// appendRuns appends to dst the runs of seqnos in [from, to] that in
// reports true for.
func appendRuns(dst []Range, from, to uint64, in func(uint64) bool) []Range {
	var cur *Range
	for s := from; s <= to; s++ {
		if !in(s) {
			cur = nil
			continue
		}
		if cur == nil {
			dst = append(dst, Range{From: s, To: s})
			cur = &dst[len(dst)-1]
		} else {
			cur.To = s
		}
	}
	return dst
}

// --- Protocol ---

func (p *fakeProto) InstallView(v View, jd digest.Digest, now time.Duration) {
	p.view = v
	clear(p.stable)
	for i := 0; i < jd.Len(); i++ {
		e := jd.At(i)
		if p.wins[e.Member] == nil {
			p.wins[e.Member] = newWin(e.Delivered)
		}
	}
	for _, m := range v.Members {
		if p.wins[m.Member] == nil {
			w := newWin(0)
			w.fresh = true
			p.wins[m.Member] = w
		}
	}
	q := p.pending
	p.pending = nil
	for _, b := range q {
		p.receive(b, now)
	}
}

func (p *fakeProto) Digest() digest.Digest {
	var es []digest.Entry
	add := func(m digest.Member) {
		if w := p.wins[m]; w != nil && !p.hide[m] {
			es = append(es, digest.Entry{Member: m, Low: w.low, Delivered: w.hd, Received: w.hr})
		}
	}
	for _, m := range p.view.Members {
		add(m.Member)
	}
	for _, m := range sortedKeys(p.wins) {
		if !p.view.Contains(m) {
			add(m)
		}
	}
	return digest.New(es)
}

func (p *fakeProto) CaptureDigest(now time.Duration) (uint64, digest.Digest) {
	p.capSeq++
	d := p.Digest()
	p.captures[p.capSeq] = d
	return p.capSeq, d
}

func (p *fakeProto) CaptureMergeDigest(now time.Duration) (uint64, digest.Digest) {
	return p.CaptureDigest(now)
}

func (p *fakeProto) ReleaseCapture(id uint64, now time.Duration) {
	if _, ok := p.captures[id]; !ok {
		p.errorf("release of unknown capture %d", id)
	}
	delete(p.captures, id)
}

func (p *fakeProto) InstallMergeView(v View, d digest.Digest, now time.Duration) {
	p.InstallView(v, digest.Digest{}, now)
	p.mergeDigest(d, now)
}

func (p *fakeProto) CheckOverwrite(d digest.Digest) error { return nil }

func (p *fakeProto) mergeDigest(d digest.Digest, now time.Duration) {
	for i := 0; i < d.Len(); i++ {
		e := d.At(i)
		if e.Member == p.self {
			continue
		}
		w := p.wins[e.Member]
		if w == nil || w.fresh {
			at, known := p.closed[e.Member]
			if !known {
				at = e.Delivered // never seen: its history is not ours
			}
			nw := newWin(at)
			if w != nil {
				for s, pl := range w.msgs {
					if s > at {
						nw.msgs[s] = pl
					}
				}
				nw.hr = max(nw.hr, w.hr)
			}
			w = nw
			p.wins[e.Member] = w
		}
		w.hr = max(w.hr, e.Received)
	}
}

func (p *fakeProto) OverwriteDigest(d digest.Digest, now time.Duration) error {
	for i := 0; i < d.Len(); i++ {
		e := d.At(i)
		w := p.wins[e.Member]
		if w == nil {
			p.wins[e.Member] = newWin(e.Delivered)
			continue
		}
		if w.hd > e.Delivered {
			for s := e.Delivered + 1; s <= w.hd; s++ {
				if _, ok := w.msgs[s]; !ok {
					p.errorf("overwrite: %v %d not retained for re-delivery", e.Member, s)
				}
			}
		}
		w.hd = e.Delivered
		w.low = min(w.low, w.hd)
		w.hr = max(w.hr, w.hd)
	}
	return nil
}

func (p *fakeProto) SenderState(sender digest.Member, gaps []Range) (uint64, uint64, []Range, bool) {
	w := p.wins[sender]
	if w == nil {
		return 0, 0, gaps, false
	}
	return w.hd, w.hr, w.gaps(gaps), true
}

func (p *fakeProto) Unheld(sender digest.Member, dst []Range) []Range {
	w := p.wins[sender]
	if w == nil {
		return dst
	}
	if w.low > 0 {
		dst = append(dst, Range{From: 1, To: w.low})
	}
	return appendRuns(dst, w.low+1, w.hd, func(s uint64) bool {
		_, held := w.msgs[s]
		return !held
	})
}

func (p *fakeProto) ClosedWindow(sender digest.Member) (uint64, bool) {
	if p.wins[sender] != nil {
		return 0, false
	}
	at, ok := p.closed[sender]
	return at, ok
}

func (p *fakeProto) CompleteCut(sender digest.Member, cut uint64, lost []Range, now time.Duration) {
	w := p.wins[sender]
	if w == nil {
		return
	}
	w.hr = max(w.hr, cut)
	for _, r := range lost {
		for s := max(r.From, w.hd+1); s <= r.To; s++ {
			if _, ok := w.msgs[s]; !ok {
				w.lost[s] = true
			}
		}
	}
}

// PurgeCut: the fake windows are maps without a capacity, so nothing
// waits for room.
func (p *fakeProto) PurgeCut(sender digest.Member, stable uint64, now time.Duration) {}

func (p *fakeProto) CloseWindow(sender digest.Member, now time.Duration) {
	w := p.wins[sender]
	if w == nil {
		return
	}
	p.pollWin(sender, w)
	p.closed[sender] = w.hd
	delete(p.wins, sender)
}
