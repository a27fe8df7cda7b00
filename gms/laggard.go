package gms

import (
	"slices"
	"time"

	"github.com/nakcast/nakcast/digest"
)

// This file handles slow members (laggards): the coordinator follows
// every member's lag behind the group (the protocol measures it:
// LagSource), names a member whose lag stayed above Config.LagLimit for
// Config.LagTimeout in its heartbeats, so that every member reports it
// (LagListener), and with Config.LagExclude excludes it.

// Lag is a member's lag behind the group, as the protocol measures it
// (nakack: seqnos of the group's traffic that the member has not
// delivered while another member has, from the members' STABLE reports).
type Lag struct {
	Member digest.Member
	Lag    uint64
}

// LagSource is implemented by a Protocol that measures the members' lag
// (NakackProtocol does). Without it gms finds no laggard.
type LagSource interface {
	// AppendLags appends, on the coordinator, the lag of every member of
	// the installed view it has measured (itself included) to dst, and
	// returns it; elsewhere nothing. gms calls it once per
	// HeartbeatInterval while LagLimit is set.
	AppendLags(dst []Lag) []Lag
}

// LagListener is implemented by a Listener that wants laggards reported.
type LagListener interface {
	// Lagging is called once per lagging episode of m, a member of the
	// installed view (this member included), on every member that hears
	// of it: the coordinator when it opens the episode, the others on its
	// next heartbeat. lag is m's lag then. With Config.LagExclude a view
	// without m usually follows (not when m coordinates).
	Lagging(m digest.Member, lag uint64)
}

// AppendLags implements LagSource (nakack's AppendMemberLags).
func (a *NakackProtocol) AppendLags(dst []Lag) []Lag {
	a.lags = a.P.AppendMemberLags(a.lags[:0])
	for _, l := range a.lags {
		dst = append(dst, Lag{Member: l.Member, Lag: l.Lag})
	}
	return dst
}

// lagEpisode is an open lagging episode (coordinator): its number, unique
// for this member's GMS, and the member's lag at the last check; exclude:
// the member is to be excluded at the next check (LagExclude), so that
// the heartbeat naming it goes out before the view without it; gone:
// until when it is still named after it left the view (lagLinger).
type lagEpisode struct {
	id      uint64
	lag     uint64
	exclude bool
	gone    time.Duration
}

// lagLinger is how many heartbeats still name a laggard after the view
// excluded it: members that lost the heartbeats before hear of it from a
// later one (they report a laggard outside their view too).
const lagLinger = 5

// laggards is the slow-member state. The coordinator side: since when
// each member's lag has been above the limit (over), the episodes opened
// (open), the episode counter. The member side: the episode last reported
// per member, from the coordinator that numbered it (seen, seenCoord).
type laggards struct {
	over      map[digest.Member]time.Duration
	open      map[digest.Member]lagEpisode
	episodes  uint64
	seen      map[digest.Member]uint64
	seenCoord digest.Member
	buf       []Lag
}

// checkLaggards (coordinator, once per heartbeat) follows every measured
// member's lag: above LagLimit it starts (or keeps) the member's clock,
// at LagLimit or below it stops it; a member whose clock has run for
// LagTimeout opens an episode (reported here and named in our
// heartbeats: lagDigest), which ends once its lag is at most LagLimit/2.
// A member not measured (no complete report in this view yet) keeps its
// clock as it is. Members no longer in the view are forgotten.
func (g *GMS) checkLaggards(now time.Duration) {
	src, ok := g.proto.(LagSource)
	if g.cfg.LagLimit == 0 || !ok || !g.IsCoordinator() {
		return
	}
	lg := &g.lag
	if lg.over == nil {
		lg.over, lg.open = make(map[digest.Member]time.Duration), make(map[digest.Member]lagEpisode)
	}
	for m := range lg.over {
		if !g.view.Contains(m) {
			delete(lg.over, m)
		}
	}
	g.followEpisodes(now)
	lg.buf = src.AppendLags(lg.buf[:0])
	for _, l := range lg.buf {
		if ep, ok := lg.open[l.Member]; ok {
			if l.Lag <= g.cfg.LagLimit/2 {
				delete(lg.open, l.Member)
				delete(lg.over, l.Member)
				continue
			}
			ep.lag = l.Lag
			lg.open[l.Member] = ep
			continue
		}
		since, running := lg.over[l.Member]
		switch {
		case l.Lag <= g.cfg.LagLimit:
			delete(lg.over, l.Member)
		case !running:
			lg.over[l.Member] = now
		case now-since >= g.cfg.LagTimeout:
			g.openLagEpisode(l, now)
		}
	}
}

// followEpisodes excludes the laggards whose exclusion is due and ends
// the episodes of members that left the view lagLinger heartbeats ago.
func (g *GMS) followEpisodes(now time.Duration) {
	lg := &g.lag
	for m, ep := range lg.open {
		switch {
		case !g.view.Contains(m) && ep.gone == 0:
			ep.gone = now + lagLinger*g.cfg.HeartbeatInterval
		case !g.view.Contains(m) && now >= ep.gone:
			delete(lg.open, m)
			continue
		case ep.exclude:
			ep.exclude = false
			g.excludeLaggard(m, now)
		}
		lg.open[m] = ep
	}
}

// openLagEpisode makes l.Member a laggard: an episode opens (named in our
// heartbeats from now on) and this member reports it; with LagExclude
// the member is excluded at the next check (not ourselves: a coordinator
// is reported only).
func (g *GMS) openLagEpisode(l Lag, now time.Duration) {
	lg := &g.lag
	lg.episodes++
	ex := g.cfg.LagExclude && l.Member != g.self.Member
	lg.open[l.Member] = lagEpisode{id: lg.episodes, lag: l.Lag, exclude: ex}
	g.stats.Laggards++
	g.log.Warn("gms: member lags behind the group", "self", g.self.Member, "member", l.Member,
		"lag", l.Lag, "limit", g.cfg.LagLimit, "for", g.cfg.LagTimeout, "exclude", ex)
	g.reportLagging(l.Member, l.Lag)
}

// excludeLaggard suspects m, a laggard, and excludes it like a failed
// member. Hearing from it (it heartbeats) withdraws nothing.
func (g *GMS) excludeLaggard(m digest.Member, now time.Duration) {
	g.stats.LaggardsExcluded++
	g.fd.stopProbing(m)
	g.fd.suspected[m] = true
	g.fd.quiet[m] = inert
	g.stats.Suspicions++
	if g.cfg.Listener != nil {
		g.cfg.Listener.Suspected(m)
	}
	g.queueExclusion(m)
	g.tryViewChange(now)
}

// reportLagging tells the listener that m lags by lag.
func (g *GMS) reportLagging(m digest.Member, lag uint64) {
	g.stats.LagReports++
	if ll, ok := g.cfg.Listener.(LagListener); ok {
		ll.Lagging(m, lag)
	}
}

// lagDigest returns the open episodes as a heartbeat's digest section
// (zero when there is none), ordered by member: per laggard, Delivered is
// its lag and Received the episode's number (Low 0).
func (g *GMS) lagDigest() digest.Digest {
	if len(g.lag.open) == 0 || !g.IsCoordinator() {
		return digest.Digest{}
	}
	es := make([]digest.Entry, 0, len(g.lag.open))
	for m, ep := range g.lag.open {
		es = append(es, digest.Entry{Member: m, Delivered: ep.lag, Received: ep.id})
	}
	slices.SortFunc(es, func(a, b digest.Entry) int {
		switch {
		case a.Member.Less(b.Member):
			return -1
		case b.Member.Less(a.Member):
			return 1
		}
		return 0
	})
	return digest.New(es)
}

// onLagDigest reports the laggards named by a heartbeat of our view's
// coordinator (its digest section, lagDigest) whose episode we have not
// reported yet, members of the view or laggards it has just excluded.
// Episode numbers are the coordinator's: another coordinator starts
// afresh.
func (g *GMS) onLagDigest(m *msg) {
	if m.kind != 1 || !m.has(secDigest) || g.status != StatusMember ||
		m.view != g.view.ID || m.sender != g.view.Coord().Member {
		return
	}
	lg := &g.lag
	if lg.seen == nil || lg.seenCoord != m.sender {
		lg.seen, lg.seenCoord = make(map[digest.Member]uint64), m.sender
	}
	for i := 0; i < m.dig.Len(); i++ {
		e := m.dig.At(i)
		if lg.seen[e.Member] == e.Received {
			continue
		}
		lg.seen[e.Member] = e.Received
		g.reportLagging(e.Member, e.Delivered)
	}
	for x := range lg.seen {
		if _, named := m.dig.Lookup(x); !named && !g.view.Contains(x) {
			delete(lg.seen, x)
		}
	}
}
