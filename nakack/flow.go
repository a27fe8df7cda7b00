package nakack

import (
	"fmt"
	"math"
	"time"
)

// This file is the sender's admission control beyond SendLimit, on the
// protocol's clock: flow control (Config.InFlightBytes of own payload not
// yet read by every member) and the rate limit (Config.RateLimit payload
// bytes a second). Send and SendBatch apply both before claiming a seqno;
// Held tells a driver why the last call stopped short.

var (
	// ErrFlowControl: Config.InFlightBytes of this member's payload are in
	// flight (sent, not yet read by every member as GroupReceived tells);
	// nothing was claimed. Retry after the next STABILITY. It wraps
	// ErrBackPressure.
	ErrFlowControl = fmt.Errorf("%w: flow control", ErrBackPressure)
	// ErrRateLimit: Config.RateLimit holds the message back; nothing was
	// claimed. Retry a little later. It wraps ErrBackPressure.
	ErrRateLimit = fmt.Errorf("%w: rate limit", ErrBackPressure)
)

// flow is the sender's admission state. Flow control measures the own
// payload bytes above GroupReceived: cum[seq&mask] is the payload sent up
// to and including own seqno seq (for each fragment of a message, up to
// the end of the message), kept for the seqnos SendLimit lets be in
// flight.
type flow struct {
	limit uint64 // InFlightBytes; 0: no flow control
	sent  uint64 // own payload bytes claimed
	cum   []uint64
	mask  uint64

	rate     float64 // RateLimit, bytes a second; 0: none
	burst    float64
	tokens   float64
	tokensAt time.Duration

	// held is why the last Send or SendBatch stopped before taking
	// everything (nil: it took everything, or stopped at a fragmented
	// payload that the next call takes); waiting marks a flow-control
	// episode, counted once (Stats.FlowControlWaits).
	held    error
	waiting bool
}

func (f *flow) init(c *Config) {
	if c.InFlightBytes > 0 {
		f.limit = uint64(c.InFlightBytes)
		f.cum = make([]uint64, 2*c.SendWindow)
		f.mask = uint64(2*c.SendWindow - 1)
	}
	if c.RateLimit > 0 {
		f.rate = float64(c.RateLimit)
		f.burst = float64(c.MaxDatagram)
		f.tokens = f.burst
	}
}

// inFlight returns the own payload bytes above seqno recv.
func (f *flow) inFlight(recv uint64) uint64 {
	if recv == 0 {
		return f.sent
	}
	return f.sent - f.cum[recv&f.mask]
}

// Held returns why the last Send or SendBatch took less than it was given:
// ErrBackPressure (SendLimit, or no pool buffer: retry after the next
// STABILITY or a release), ErrFlowControl (retry after the next
// STABILITY), ErrRateLimit (retry a little later), or nil (it took
// everything, or stopped before a payload that needs fragments, which the
// next call takes).
func (p *Protocol) Held() error { return p.fl.held }

// InFlight returns the own payload bytes sent and not yet read by every
// member of the view (above GroupReceived): what flow control measures.
func (p *Protocol) InFlight() uint64 {
	if p.fl.limit == 0 {
		return 0
	}
	return p.fl.inFlight(p.GroupReceived())
}

// admit returns how many of ps, a prefix, flow control and the rate limit
// let go now, and records why when it is fewer. Flow control lets
// InFlightBytes minus what is in flight go, and always the first message
// when nothing is in flight; the rate limit what its tokens cover, with a
// burst of one datagram (or of the first message, when larger).
func (p *Protocol) admit(ps [][]byte, now time.Duration) int {
	f := &p.fl
	if f.limit == 0 && f.rate == 0 {
		return len(ps)
	}
	room, inflight := p.flowRoom()
	tokens := math.Inf(1)
	if f.rate > 0 {
		f.refill(now, len(ps[0]))
		tokens = f.tokens
	}
	var bytes uint64
	if f.rate == 0 {
		// Flow control alone: no float compare a message.
		for k, pl := range ps {
			n := uint64(len(pl))
			if bytes+n > room && inflight+bytes > 0 {
				p.flowHeld()
				return k
			}
			bytes += n
		}
		f.waiting = false
		return len(ps)
	}
	for k, pl := range ps {
		n := uint64(len(pl))
		if bytes+n > room && inflight+bytes > 0 {
			p.flowHeld()
			return k
		}
		if float64(bytes+n) > tokens {
			f.held, f.waiting = ErrRateLimit, false
			return k
		}
		bytes += n
	}
	f.waiting = false
	return len(ps)
}

// flowHeld records that flow control held a message back: a wait,
// counted once an episode.
func (p *Protocol) flowHeld() {
	f := &p.fl
	if !f.waiting {
		f.waiting = true
		p.stats.FlowControlWaits++
	}
	f.held = ErrFlowControl
}

// admitAll reports whether admit lets every message of a run go that
// holds total payload bytes, the first of them firstLen long: true when
// the run fits whole in flow control's room and the rate limit's tokens
// (admit would take every message, and its effects are the same), false
// when admit must look at the messages one by one to tell.
func (p *Protocol) admitAll(total, firstLen uint64, now time.Duration) bool {
	f := &p.fl
	if f.limit == 0 && f.rate == 0 {
		return true
	}
	if room, _ := p.flowRoom(); total > room {
		return false
	}
	if f.rate > 0 {
		if f.refill(now, int(firstLen)); float64(total) > f.tokens {
			return false
		}
	}
	f.waiting = false
	return true
}

// flowRoom returns the payload bytes flow control lets go now (all, without
// it) and the bytes in flight.
func (p *Protocol) flowRoom() (room, inflight uint64) {
	f := &p.fl
	if f.limit == 0 {
		return math.MaxUint64, 0
	}
	inflight = f.inFlight(p.GroupReceived())
	return f.limit - min(inflight, f.limit), inflight
}

// refill adds the rate limit's tokens earned since the last refill, up to
// a burst of one datagram (or of the next message, first bytes, when
// larger).
func (f *flow) refill(now time.Duration, first int) {
	f.tokens = min(f.tokens+f.rate*(now-f.tokensAt).Seconds(), max(f.burst, float64(first)))
	f.tokensAt = now
}

// spend takes the bytes claimed since the cumulative count was sent0
// from the rate limit's tokens.
func (f *flow) spend(sent0 uint64) {
	if f.rate > 0 {
		f.tokens -= float64(f.sent - sent0)
	}
}

// took accounts for the messages ps just claimed from seqno first (one
// seqno each, or, for a lone fragmented payload, through last): flow
// control's cumulative bytes, the rate limit's tokens.
func (p *Protocol) took(ps [][]byte, first, last uint64) {
	f := &p.fl
	if f.limit == 0 && f.rate == 0 {
		return
	}
	// The running count stays in a local: updating f.sent a message
	// would load and store it each time.
	sent0, sent, seq := f.sent, f.sent, first
	if f.limit > 0 {
		cum, mask := f.cum, f.mask
		for _, pl := range ps {
			sent += uint64(len(pl))
			cum[seq&mask] = sent
			seq++
		}
		for ; seq <= last; seq++ {
			cum[seq&mask] = sent // the further fragments of a lone payload
		}
	} else {
		for _, pl := range ps {
			sent += uint64(len(pl))
		}
	}
	f.sent = sent
	f.spend(sent0)
}
