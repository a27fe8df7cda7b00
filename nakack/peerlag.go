package nakack

import "github.com/nakcast/nakcast/digest"

// This file measures, on the coordinator, how far every member of the
// view lags behind the group (MemberLags), from the STABLE reports that
// every member sends it: the same reports stability is computed from,
// so the measure costs O(entries) per report folded and nothing per
// message, and a member whose application stops consuming still reports
// (the protocol runs without it) and is seen to fall behind.
//
// A member's lag is the number of seqnos of the group's traffic that it
// has not delivered while another member has: the sum, over every other
// sender S of the view, of the highest Delivered for S that any member
// other than S reported in this view, less the member's own reported
// Delivered for S (its last report). A sender's own messages count only
// at the others, so in-flight data is not lag; a member reporting late
// (one StableInterval at most while it runs) shows the traffic of that
// interval; a silent member's last report ages, so its lag grows as the
// others deliver. A digest capture (join, merge, state transfer) holds a
// member's reported Delivered back while it lasts: a timeout longer than
// those operations (gms's LagTimeout) keeps that from making a laggard.

// memberLags is the coordinator's bookkeeping for MemberLags, for the
// installed view (reset by every view: reports of an older view do not
// count). Positions are view positions; a member's report comes in
// chunks of per entries (stableRound).
type memberLags struct {
	chunks int
	maxD   []uint64 // per sender: the highest Delivered reported by a member other than the sender
	total  uint64   // sum of maxD
	sum    []uint64 // per member*chunks+chunk: the chunk's Delivered summed over senders other than the member
	got    []bool   // per member*chunks+chunk: reported in this view
}

func (l *memberLags) init(n, chunks int) {
	l.chunks, l.total = chunks, 0
	l.maxD = make([]uint64, n)
	l.sum = make([]uint64, n*chunks)
	l.got = make([]bool, n*chunks)
}

// entry notes that the member at view position from delivered d of the
// sender at position j, and returns what it adds to from's sum.
func (l *memberLags) entry(from, j int, d uint64) uint64 {
	if j == from || j >= len(l.maxD) {
		return 0
	}
	if d > l.maxD[j] {
		l.total += d - l.maxD[j]
		l.maxD[j] = d
	}
	return d
}

// report stores the sum of the chunk just folded for the member at view
// position from.
func (l *memberLags) report(from, chunk int, sum uint64) {
	if i := from*l.chunks + chunk; i < len(l.sum) {
		l.sum[i], l.got[i] = sum, true
	}
}

// MemberLag is a member's lag behind the group, in seqnos (see
// MemberLags).
type MemberLag struct {
	Member digest.Member
	Lag    uint64
}

// AppendMemberLags appends, on the coordinator, the lag of every member of
// the view that has reported in this view (every chunk of its digest),
// itself included, in view order, to dst and returns it. Elsewhere, and
// before the first reports, it appends nothing. The lag is measured from
// the members' last STABLE reports (see the file comment). It costs
// O(members × chunks) and allocates only if dst lacks capacity.
func (p *Protocol) AppendMemberLags(dst []MemberLag) []MemberLag {
	l := &p.mlag
	if !p.hasView || p.coord != p.self || len(l.maxD) != len(p.view.Members) {
		return dst
	}
	for pos, m := range p.view.Members {
		var sum uint64
		known := true
		for c := 0; c < l.chunks && known; c++ {
			i := pos*l.chunks + c
			known = l.got[i]
			sum += l.sum[i]
		}
		if !known {
			continue
		}
		others := l.total - l.maxD[pos]
		dst = append(dst, MemberLag{Member: m, Lag: others - min(sum, others)})
	}
	return dst
}
