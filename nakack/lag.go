package nakack

import "time"

// This file measures how far the application lags behind what this member
// received (Config.LagInterval, LagThreshold) and says when everything is
// stable (Drained), both on the protocol's clock.

// lagState is the delivery backlog measurement: at is the next one
// (NoDeadline without a LagInterval).
type lagState struct {
	at      time.Duration
	backlog uint64
	lagging bool
}

// checkLag measures the backlog and opens or ends a lagging episode: it
// opens above LagThreshold and ends below half of it, so a backlog near
// the threshold does not report an episode per measurement.
func (p *Protocol) checkLag(now time.Duration) {
	p.lag.at = now + p.cfg.LagInterval
	var worst uint64
	for _, m := range p.view.Members {
		if s := p.senders[m]; s != nil && !s.own {
			if e := p.entryOf(s); e.Received > e.Delivered {
				worst = max(worst, e.Received-e.Delivered)
			}
		}
	}
	p.lag.backlog = worst
	switch th := uint64(p.cfg.LagThreshold); {
	case !p.lag.lagging && worst > th:
		p.lag.lagging = true
		p.stats.LaggingEpisodes++
		p.cfg.Logger.Warn("application is not consuming: delivery backlog above the lag threshold",
			"self", p.self.String(), "backlog", worst, "threshold", th)
	case p.lag.lagging && worst < th/2:
		p.lag.lagging = false
	}
}

// Backlog returns the delivery backlog at the last measurement: the most
// messages of one other sender of the view received and not yet delivered
// (waiting for a gap to be repaired, or for the application).
func (p *Protocol) Backlog() uint64 { return p.lag.backlog }

// Lagging reports whether a lagging episode is open (see
// Config.LagInterval).
func (p *Protocol) Lagging() bool { return p.lag.lagging }

// Drained reports whether everything this member sent or received, of
// every member of the view, is stable: delivered by every member and
// purged. A member that is closing leaves once it is, taking nothing from
// anybody: the others have all it sent, and it owes no one a repair.
func (p *Protocol) Drained() bool {
	for _, m := range p.view.Members {
		if s := p.senders[m]; s != nil {
			if e := p.entryOf(s); e.Low < e.Received {
				return false
			}
		}
	}
	return true
}
