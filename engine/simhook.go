package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nakcast/nakcast/nakack"
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

	finished bool // the member has closed (StepClose, then Steps)
}

// ErrNotStepped is returned by Step on a member opened by Open.
var ErrNotStepped = errors.New("engine: not a stepped member")

// OpenStepped opens a member that the caller drives with Step, for a
// simulator: Config as for Open, except that the agent runs only in Step
// (Config.Agent.Threading is ThreadingInvoked whatever it says) and that it
// returns at once: with dynamic membership the join (gms Join) has begun
// and completes in later Steps (an EventView tells). Close must not be
// called on it (StepClose is its Close); a simulator stops stepping a
// member to crash it.
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
	if m.step.finished {
		return 0, nakack.NoDeadline, ErrClosed
	}
	work, next, finished := m.ag.doWork()
	if finished {
		m.step.finished = true
		m.ag.cleanup()
		_ = m.tr.Close()
	}
	return work, next, nil
}

// StepClose begins a stepped member's Close: sending stops (TrySend
// returns ErrClosed) and the Steps that follow drain what it sent until
// it is stable, then leave the group (an EventLeft tells), as Close's
// agent does; once the member has left, Step returns ErrClosed. It
// returns ErrNotStepped on an Open'd member.
func (m *Member) StepClose() error {
	if m.step == nil {
		return ErrNotStepped
	}
	m.closing.Store(true)
	return nil
}

// StepClosed reports whether a stepped member has finished closing.
func (m *Member) StepClosed() bool { return m.step != nil && m.step.finished }

// membershipSeed is gms's Config.Seed: the simulator's for a stepped
// member, else random.
func (m *Member) membershipSeed() uint64 {
	if m.step != nil {
		return m.step.Seed
	}
	return rand.Uint64()
}
