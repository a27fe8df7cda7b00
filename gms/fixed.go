package gms

import (
	"errors"
	"fmt"
	"time"

	"github.com/nakcast/nakcast/digest"
)

// Fixed is membership with a fixed view (static membership): the members
// are given, in the same order at every member, the first coordinating
// stability; nothing joins, leaves or is excluded. It answers the calls a
// driver makes of a GMS (Join, Leave, Receive, Tick, NextDeadline, Outbox,
// Status), so that static and dynamic membership take one path through
// the driver: Join installs the view at once with one protocol
// incarnation (every window starts at 0), and Leave ends this member's
// part after Config.Linger with no message, since the others keep
// counting on every member of a fixed view; the linger gives a member
// that missed the last STABILITY or a repair another round. Membership
// datagrams are refused (ErrFixedView). Not safe for concurrent use.
type Fixed struct {
	cfg     FixedConfig
	status  Status
	proto   Protocol
	leaveAt time.Duration
	stats   Stats
}

// FixedConfig configures a Fixed membership.
type FixedConfig struct {
	// Self is this member, with its incarnation: a member of View.
	Self digest.Member
	// View is the fixed view, coordinator first.
	View View
	// NewProtocol returns the protocol for Self (called once, by Join).
	NewProtocol func(self digest.Member, now time.Duration) (Protocol, error)
	// Listener receives ViewInstalled on Join and Left(nil) when a Leave
	// ends (optional).
	Listener Listener
	// Linger is how long after Leave this member stays (0: none).
	Linger time.Duration
}

// ErrFixedView is what Fixed.Receive returns: a fixed view takes no
// membership datagram.
var ErrFixedView = errors.New("gms: fixed view: membership datagram refused")

// NewFixed returns a Fixed in StatusIdle: Join installs the view.
func NewFixed(cfg FixedConfig) (*Fixed, error) {
	if err := cfg.View.validate(); err != nil {
		return nil, fmt.Errorf("gms: fixed view: %w", err)
	}
	if !cfg.View.Contains(cfg.Self) {
		return nil, fmt.Errorf("gms: fixed view: %v is not a member", cfg.Self)
	}
	if cfg.NewProtocol == nil {
		return nil, errors.New("gms: fixed view: NewProtocol is required")
	}
	return &Fixed{cfg: cfg}, nil
}

// Join creates the protocol and installs the view: this member is in the
// group when it returns nil.
func (f *Fixed) Join(now time.Duration) error {
	if f.status != StatusIdle {
		return ErrBusy
	}
	p, err := f.cfg.NewProtocol(f.cfg.Self, now)
	if err != nil {
		return fmt.Errorf("gms: fixed view: %w", err)
	}
	f.proto, f.status = p, StatusMember
	p.InstallView(f.cfg.View, digest.Digest{}, now)
	f.stats.ViewsInstalled++
	if f.cfg.Listener != nil {
		f.cfg.Listener.ViewInstalled(f.cfg.View)
	}
	return nil
}

// Leave starts this member's departure: it ends (Left(nil)) once Linger
// has passed, at a Tick.
func (f *Fixed) Leave(now time.Duration) error {
	if f.status != StatusMember {
		return ErrNotMember
	}
	f.status, f.leaveAt = StatusLeaving, now+f.cfg.Linger
	f.Tick(now)
	return nil
}

// Tick ends a departure whose linger has passed.
func (f *Fixed) Tick(now time.Duration) {
	if f.status != StatusLeaving || now < f.leaveAt {
		return
	}
	f.status, f.proto = StatusIdle, nil
	if f.cfg.Listener != nil {
		f.cfg.Listener.Left(nil)
	}
}

// NextDeadline returns the end of a departure's linger, or Never.
func (f *Fixed) NextDeadline() time.Duration {
	if f.status == StatusLeaving {
		return f.leaveAt
	}
	return Never
}

// Receive refuses every membership datagram (counted as Refused).
func (f *Fixed) Receive(b []byte, now time.Duration) error {
	f.stats.Refused++
	return ErrFixedView
}

// RequestState returns ErrNoState: a fixed view has no state transfer.
func (f *Fixed) RequestState(now time.Duration) error { return ErrNoState }

// Outbox returns nothing: a fixed view sends no membership datagram.
func (f *Fixed) Outbox() []Outgoing { return nil }

// ClearOutbox does nothing.
func (f *Fixed) ClearOutbox() {}

// Status returns where this member stands.
func (f *Fixed) Status() Status { return f.status }

// Stats returns the counters (ViewsInstalled, Refused).
func (f *Fixed) Stats() Stats { return f.stats }

// Protocol returns the protocol while this member is in the view, or nil.
func (f *Fixed) Protocol() Protocol { return f.proto }

// View returns the fixed view while this member is in it, else the zero
// View.
func (f *Fixed) View() View {
	if f.status == StatusIdle {
		return View{}
	}
	return f.cfg.View
}
