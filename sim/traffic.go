package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/nakack"
)

// ErrBackPressure is what a Sender returns when it cannot take a message
// now; the traffic generator retries later. It is nakack.ErrBackPressure.
var ErrBackPressure = nakack.ErrBackPressure

// Sender is the application-facing send side of a node.
type Sender interface {
	// Send sends payload (copied) and returns the seqnos it took (first ==
	// last unless fragmented), or an error wrapping ErrBackPressure when the
	// message cannot be taken now.
	Send(payload []byte, now time.Duration) (first, last uint64, err error)
	// Flush emits whatever the sender holds back for bundling.
	Flush(now time.Duration)
}

// Traffic describes a sending application: Count messages of sizes drawn
// uniformly from [MinSize, MaxSize], in bursts of Burst messages (then a
// Flush) separated by gaps drawn uniformly from [0, 2×Interval). A
// back-pressured send is retried after RetryDelay.
type Traffic struct {
	Count            int
	MinSize, MaxSize int
	Burst            int
	Interval         time.Duration
	RetryDelay       time.Duration
	// Start is the virtual time of the first burst.
	Start time.Duration
}

// Generator runs one Traffic on one node.
type Generator struct {
	t        Traffic
	sim      *Sim
	member   digest.Member
	sender   Sender
	ledger   *Ledger
	rng      *rand.Rand
	buf      []byte
	sent     int
	blocked  bool
	bpEvents int
	doneAt   time.Duration
	// blockedSince is when the current back-pressure began; blockedFor
	// sums the ended ones.
	blockedSince, blockedFor time.Duration
	// offered is the schedule's length: the sum of the gaps drawn;
	// offeredAt[i] is when message i would have gone out on it (relative
	// to Start), without the waits back-pressure added.
	offered   time.Duration
	offeredAt []time.Duration
}

// StartTraffic starts t on the node member through sender, recording every
// message in ledger. Its random choices come from s.NewRand.
func StartTraffic(s *Sim, member digest.Member, sender Sender, ledger *Ledger, t Traffic) (*Generator, error) {
	if t.Burst <= 0 {
		t.Burst = 1
	}
	if t.MinSize < 8 || t.MaxSize < t.MinSize {
		return nil, fmt.Errorf("sim: traffic sizes [%d,%d]: need 8 <= min <= max", t.MinSize, t.MaxSize)
	}
	if t.RetryDelay <= 0 {
		t.RetryDelay = time.Millisecond
	}
	g := &Generator{t: t, sim: s, member: member, sender: sender, ledger: ledger, rng: s.NewRand(),
		buf: make([]byte, t.MaxSize), doneAt: -1}
	if t.Count == 0 {
		g.doneAt = t.Start
		return g, nil
	}
	if err := s.Do(t.Start, member, g.burst); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *Generator) burst(now time.Duration) {
	for i := 0; i < g.t.Burst && g.sent < g.t.Count; i++ {
		size := g.t.MinSize + g.rng.IntN(g.t.MaxSize-g.t.MinSize+1)
		p := g.buf[:size]
		// Distinct contents: the message number, then random bytes.
		for j := range p {
			p[j] = byte(g.rng.Uint32())
		}
		n := uint64(g.sent)
		for j := 0; j < 8; j++ {
			p[j] = byte(n >> (8 * j))
		}
		first, last, err := g.sender.Send(p, now)
		if errors.Is(err, ErrBackPressure) {
			if !g.blocked {
				g.bpEvents++
				g.blockedSince = now
			}
			g.blocked = true
			g.sender.Flush(now)
			g.sim.Do(now+g.t.RetryDelay, g.member, g.burst)
			return
		}
		if err != nil {
			g.sim.Fail(fmt.Errorf("member %v: send: %w", g.member, err))
			return
		}
		if g.blocked {
			g.blockedFor += now - g.blockedSince
		}
		g.blocked = false
		g.offeredAt = append(g.offeredAt, g.offered)
		if err := g.ledger.Record(g.member, first, last, p); err != nil {
			g.sim.Fail(err)
			return
		}
		g.sent++
	}
	g.sender.Flush(now)
	if g.sent >= g.t.Count {
		g.doneAt = now
		return
	}
	var gap time.Duration
	if g.t.Interval > 0 {
		gap = time.Duration(g.rng.Int64N(int64(2 * g.t.Interval)))
	}
	g.offered += gap
	g.sim.Do(now+gap, g.member, g.burst)
}

// Sent returns how many messages have been sent.
func (g *Generator) Sent() int { return g.sent }

// Done reports whether every message has been sent.
func (g *Generator) Done() bool { return g.sent >= g.t.Count }

// DoneAt returns when the last message was sent, or -1 if not yet.
func (g *Generator) DoneAt() time.Duration { return g.doneAt }

// Blocked reports whether the last send attempt was back-pressured.
func (g *Generator) Blocked() bool { return g.blocked }

// BlockedTime returns how long the generator has been back-pressured in
// all: from each refused send to the next accepted one (to now while it
// still is).
func (g *Generator) BlockedTime() time.Duration {
	if g.blocked {
		return g.blockedFor + g.sim.Now() - g.blockedSince
	}
	return g.blockedFor
}

// Offered returns how long the traffic takes at its offered rate: the sum
// of the gaps drawn between bursts so far (all of them once Done), without
// the waits back-pressure added.
func (g *Generator) Offered() time.Duration { return g.offered }

// OfferedAt returns when message i (from 0) would have been sent at the
// offered rate, relative to Traffic.Start (-1 if not sent yet).
func (g *Generator) OfferedAt(i int) time.Duration {
	if i >= len(g.offeredAt) {
		return -1
	}
	return g.offeredAt[i]
}

// BackPressureEvents counts how often the generator went from sending to
// back-pressured.
func (g *Generator) BackPressureEvents() int { return g.bpEvents }
