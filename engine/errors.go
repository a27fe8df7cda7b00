package engine

import (
	"errors"

	"github.com/nakcast/nakcast/nakack"
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrInvalidConfig is wrapped by every Config validation error; the
	// message names the field and the allowed range.
	ErrInvalidConfig = errors.New("engine: invalid config")
	// ErrBackPressure is returned by TrySend and TryClaim when the
	// log buffer has no room: the agent has not drained it yet, or
	// the protocol's retention window is full until stability purges it.
	// It is the Aeron offer() contract: retry later, or use Send. It is
	// nakack.ErrBackPressure, the protocol's own, so one errors.Is test
	// covers both causes.
	ErrBackPressure = nakack.ErrBackPressure
	// ErrClosed is returned by calls on a member that is closing or closed.
	ErrClosed = errors.New("engine: member closed")
	// ErrPushMode is returned by Receive on a member with a Handler: its
	// messages go to the Handler.
	ErrPushMode = errors.New("engine: member is in push mode (Config.Handler set)")
	// ErrTooLarge is returned by Send, TrySend and TryClaim for a payload
	// larger than Config.Tuning.MaxMessage.
	ErrTooLarge = errors.New("engine: message too large")
	// ErrJoinFailed is wrapped by Open's error when the join did not
	// complete: its context ended, or Config.Membership.JoinAttempts were spent.
	ErrJoinFailed = errors.New("engine: join failed")
	// ErrStateTransfer is wrapped by Open's error when Config.Membership.FetchState
	// could not install the state (no member provided it, or ctx ended).
	ErrStateTransfer = errors.New("engine: state transfer failed")
	// ErrDrainTimeout is wrapped by Close's error when what the member
	// sent or received was not stable within Config.Tuning.DrainTimeout
	// (a member of the view that does not run or does not answer).
	ErrDrainTimeout = errors.New("engine: drain timeout")
)
