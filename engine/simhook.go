package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// A stepped member is driven by a simulator (package sim/stepped): it
// starts no goroutine, reads the simulator's clock, and runs one duty
// cycle of its agent (doWork: receive, membership, send, timers,
// delivery, write) per Step, on the simulator's goroutine. Its transport
// is the simulator's (Config.Transport.Open), so the same Config and the
// same seed give the same run, event for event.

// Stepping is what a stepped member takes from its simulator.
type Stepping struct {
	// Now is the simulated clock: the protocol clock of every duty cycle.
	Now func() time.Duration
	// Seed seeds membership's random choices (gms Config.Seed), which an
	// opened member draws at random.
	Seed uint64
}

// ErrNotStepped is returned by Step on a member opened by Open.
var ErrNotStepped = errors.New("engine: not a stepped member")

// OpenStepped opens a member that the caller drives with Step, for a
// simulator: Config as for Open, except that the agent runs only in Step
// (Config.Agent.Threading is ThreadingInvoked whatever it says) and that it
// returns at once: with dynamic membership the join (gms Join) has begun
// and completes in later Steps (an EventView tells). Close must not be
// called on it: a simulator stops stepping a member to crash it.
func OpenStepped(config Config, s Stepping) (*Member, error) {
	if s.Now == nil {
		return nil, fmt.Errorf("open: %w: Stepping.Now is nil", ErrInvalidConfig)
	}
	config.Agent.Threading = ThreadingInvoked
	m, err := newMember(config, &s)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	err = m.g.Join(m.now())
	m.mu.Unlock()
	if err != nil {
		m.abort()
		return nil, fmt.Errorf("open: %w: %w", ErrJoinFailed, err)
	}
	return m, nil
}

// Step runs one duty cycle at the simulated clock's time and returns how
// much it did (datagrams read, messages sent and delivered; 0: idle) and
// the time of its next timer (nakack.NoDeadline: none). A cycle reads one
// batch: a simulator steps again while work > 0.
func (m *Member) Step() (work int, next time.Duration, err error) {
	if m.step == nil {
		return 0, 0, ErrNotStepped
	}
	work, next, _ = m.ag.doWork()
	return work, next, nil
}

// membershipSeed is gms's Config.Seed: the simulator's for a stepped
// member, else random.
func (m *Member) membershipSeed() uint64 {
	if m.step != nil {
		return m.step.Seed
	}
	return rand.Uint64()
}
