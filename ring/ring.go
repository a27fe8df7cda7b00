package ring

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"

	"github.com/nakcast/nakcast/digest"
)

// Errors callers may branch on.
var (
	// ErrCapacity reports a capacity that is not a power of two >= 1.
	ErrCapacity = errors.New("ring: capacity must be a power of two")
	// ErrNotRetained reports a Rewind below the purge point or over seqnos
	// that are no longer held (skipped or never received).
	ErrNotRetained = errors.New("ring: seqnos not retained")
	// ErrRange reports a seqno argument on the wrong side of a limit (a
	// Rewind above delivered).
	ErrRange = errors.New("ring: seqno out of range")
)

// cacheLine separates fields written by different goroutines.
const cacheLine = 64

// Range is digest.Range: an inclusive range of seqnos [From, To].
type Range = digest.Range

// AddResult is what Window.Add did with a seqno; callers count them.
type AddResult uint8

// Add results.
const (
	// Added: the entry is now held.
	Added AddResult = iota
	// Duplicate: the seqno is already held (delivered or not); v was dropped.
	Duplicate
	// Old: the seqno is settled and will never be accepted again: at or
	// below delivered (hence at or below low), or marked lost by MarkLost.
	Old
	// Full: the seqno lies beyond Low()+Capacity(); nothing was stored. The
	// caller drops it (a receiver: it will be retransmitted) or waits for a
	// purge (a sender: back-pressure).
	Full
)

// String returns the result's name.
func (r AddResult) String() string {
	switch r {
	case Added:
		return "Added"
	case Duplicate:
		return "Duplicate"
	case Old:
		return "Old"
	case Full:
		return "Full"
	}
	return "AddResult(" + strconv.Itoa(int(r)) + ")"
}

// RunResult is what Window.AddRun did with a run of seqnos.
// Added+Duplicate+Old is the length of the prefix of the run that was
// processed: when Full is set, the seqnos after that prefix lie beyond
// capacity and were not looked at.
type RunResult struct {
	Added     int // newly held
	Duplicate int // already held, dropped
	Old       int // at or below delivered or marked lost, dropped
	Full      bool
}

// Processed returns Added+Duplicate+Old: how many leading seqnos of the run
// were dealt with (the rest, if Full, did not fit).
func (r RunResult) Processed() int { return r.Added + r.Duplicate + r.Old }

// checkCapacity validates a ring capacity.
func checkCapacity(capacity int) error {
	if capacity < 1 || capacity&(capacity-1) != 0 {
		return fmt.Errorf("%w: %d", ErrCapacity, capacity)
	}
	return nil
}

// wordMask returns span one-bits starting at bit (bit+span <= 64, span >= 1).
func wordMask(bit, span uint64) uint64 {
	if span >= 64 {
		return ^uint64(0)
	}
	return (uint64(1)<<span - 1) << bit
}

// popcount counts the one-bits of x.
func popcount(x uint64) int { return bits.OnesCount64(x) }
