package engine

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nakcast/nakcast/engine/auth"
	"github.com/nakcast/nakcast/wire"
)

// Key is a group key (engine/auth.Key): a key id and a secret that no
// print or log path shows. Build one with auth.NewKey, auth.GenerateKey or
// auth.ParseKeys (the key file mcastbench -key-file reads).
type Key = auth.Key

// security is a member's authentication: the sealer on the write path and
// the verifier on the receive path (engine/auth). A nil *security is open
// mode: nothing is sealed, and authenticated datagrams are dropped (NoKey).
type security struct {
	sealer   *auth.Sealer
	verifier *auth.Verifier
	// next is the keyring SetKeys installed; the writing goroutine moves
	// the sealer to it at its next batch (sealRing is the sealer's).
	next     atomic.Pointer[auth.Keyring]
	sealRing *auth.Keyring
}

// newSecurity returns cfg's authentication (nil without keys).
func newSecurity(cfg *settings) (*security, error) {
	if len(cfg.Keys) == 0 {
		return nil, nil
	}
	r, err := auth.NewKeyring(cfg.GroupID, cfg.Keys)
	if err != nil {
		return nil, err
	}
	s := &security{
		sealer:   auth.NewSealer(r, auth.ProcessNonces(), cfg.Encrypt),
		verifier: auth.NewVerifier(r),
		sealRing: r,
	}
	s.next.Store(r)
	return s, nil
}

// checkKeys validates the authentication fields of c; off says whether
// the member is off loopback (interface or unicast address).
func (c *Config) checkKeys(off bool) error {
	if len(c.Keys) > 0 {
		if err := auth.CheckKeys(c.Keys); err != nil {
			return fmt.Errorf("%w: Keys: %w", ErrInvalidConfig, err)
		}
		if c.Insecure {
			return fmt.Errorf("%w: Insecure true with Keys: choose one (Insecure is open mode, without a key)", ErrInvalidConfig)
		}
		return nil
	}
	if c.Encrypt {
		return fmt.Errorf("%w: Encrypt true without Keys: encryption needs a group key", ErrInvalidConfig)
	}
	if off && !c.Insecure {
		return fmt.Errorf("%w: Keys empty off loopback: set Keys (a group key) or Insecure (open mode, unauthenticated datagrams) explicitly", ErrInvalidConfig)
	}
	return nil
}

// authMode names the mode for logs and Stats: "open", "signed" or
// "encrypted".
func (c *settings) authMode() string {
	switch {
	case len(c.Keys) == 0:
		return "open"
	case c.Encrypt:
		return "encrypted"
	}
	return "signed"
}

// logAuthMode says once, at Open, how datagrams are protected; open mode
// chosen explicitly (Insecure) is a warning.
func (m *Member) logAuthMode() {
	switch {
	case m.sec != nil:
		m.log.l.Info("datagrams authenticated", "mode", m.cfg.authMode(), "key_id", m.cfg.Keys[0].ID(), "keys", len(m.cfg.Keys))
	case m.cfg.Insecure:
		m.log.l.Warn("insecure: open mode (Config.Insecure): datagrams are not authenticated; anyone who can spoof a member's address can steer the group")
	}
}

// protoDatagram is the largest datagram the protocol builds: BundleBytes,
// less the trailer's room when datagrams are sealed.
func (m *Member) protoDatagram() int {
	if m.sec != nil {
		return min(m.cfg.BundleBytes, m.cfg.MaxDatagram-wire.TrailerLen)
	}
	return m.cfg.BundleBytes
}

// verify is the receive path's check of datagram d (its common header h
// decoded), before anything else reads it: OK, or the reason it is
// dropped (counted). Under the lock.
func (a *agent) verify(d []byte, h wire.Header, now time.Duration) bool {
	s := a.m.sec
	r := auth.OK
	switch {
	case s != nil:
		r = s.verifier.Open(d, now)
	case h.Auth():
		r = auth.NoKey
	}
	if r != auth.OK {
		a.m.ctr.dropAuth[r].Add(1)
		return false
	}
	return true
}

// seal seals every datagram of w in place of the original, just before
// the write (with ThreadingDedicated under the write lock: the sealer is
// the writers'), so that each path's counters go out in the order sealed;
// a datagram with a destination goes on the unicast path, one without to
// the group. A datagram that cannot be sealed (no pool buffer for an
// encrypted copy) is dropped and counted.
func (s *security) seal(w *wbatch, pool *wire.Pool, ctr *counters) {
	if r := s.next.Load(); r != s.sealRing {
		s.sealer.SetKeyring(r)
		s.sealRing = r
	}
	j := 0
	for i := range w.b {
		path := auth.PathGroup
		if w.dsts[i].IsValid() {
			path = auth.PathUnicast
		}
		d, holder, err := s.sealOne(w.q[i], w.b[i], path, pool)
		if err != nil {
			ctr.dropNoBuffer.Add(1)
			continue
		}
		w.q[j], w.b[j], w.dsts[j] = holder, d, w.dsts[i]
		j++
	}
	clear(w.q[j:])
	clear(w.b[j:])
	w.q, w.b, w.dsts = w.q[:j], w.b[:j], w.dsts[:j]
}

// errNoSealBuffer: the pool had no buffer for a sealed copy.
var errNoSealBuffer = errors.New("engine: no buffer to seal a datagram")

// sealOne seals datagram d, held by b (nil: gms's bytes, which are not
// ours to change), for path p. A protocol datagram with room behind it is
// signed in place (the trailer goes after the datagram; the messages a
// retention buffer holds are not touched); anything else is sealed into a
// pool buffer (Encrypt never changes its source). It takes over b's
// reference: it returns b itself as the holder, or releases it.
func (s *security) sealOne(b *wire.Buffer, d []byte, p auth.Path, pool *wire.Pool) ([]byte, *wire.Buffer, error) {
	n := len(d)
	if b != nil && !s.sealer.Encrypts() && len(b.B) >= n+wire.TrailerLen {
		out, err := s.sealer.Sign(b.B, n, p)
		if err != nil {
			b.Release()
			return nil, nil, err
		}
		return out, b, nil
	}
	c := pool.Get(n + wire.TrailerLen)
	var dst []byte
	switch {
	case c != nil:
		dst = c.B
	case n+wire.TrailerLen > pool.MaxDatagram() && b == nil:
		// A membership datagram beyond the largest pool class (a large
		// view or state chunk on a small-MTU interface): rare.
		dst = make([]byte, n+wire.TrailerLen)
	default:
		if b != nil {
			b.Release()
		}
		return nil, nil, errNoSealBuffer
	}
	var out []byte
	var err error
	if s.sealer.Encrypts() {
		out, err = s.sealer.Encrypt(dst, d, p)
	} else {
		copy(dst, d)
		out, err = s.sealer.Sign(dst, n, p)
	}
	if b != nil {
		b.Release()
	}
	if err != nil {
		if c != nil {
			c.Release()
		}
		return nil, nil, err
	}
	return out, c, nil
}

// authStats returns the authentication state for Stats (under the lock).
func (m *Member) authStats() AuthStats {
	s := AuthStats{Mode: m.cfg.authMode()}
	if m.sec != nil {
		vs := m.sec.verifier.Stats()
		s.KeyID = m.sec.next.Load().Current()
		s.Senders, s.Derived, s.Forgotten = vs.Senders, vs.Derived, vs.Forgotten
	}
	return s
}

// authDrops reads the authentication drop counters.
func (m *Member) authDrops() AuthDrops {
	c := &m.ctr.dropAuth
	return AuthDrops{
		NoTrailer: c[auth.NoTrailer].Load(), UnknownKey: c[auth.UnknownKey].Load(), Replay: c[auth.Replay].Load(),
		TooOld: c[auth.TooOld].Load(), Throttled: c[auth.Throttled].Load(), BadTag: c[auth.BadTag].Load(), NoKey: c[auth.NoKey].Load(),
	}
}

// SetKeys replaces the keys of a member opened with Config.Keys: keys[0]
// seals from the next datagram on, every key in keys verifies, and a key
// left out is refused from now on (auth.UnknownKey). Rotate in three
// steps on every member (see engine/auth): [current, next], then [next,
// current] once all have the first, then [next]. A member opened without
// keys (open mode) cannot switch: ErrInvalidConfig.
func (m *Member) SetKeys(keys []Key) error {
	if m.sec == nil {
		return fmt.Errorf("%w: SetKeys on a member opened without Keys (open mode)", ErrInvalidConfig)
	}
	r, err := auth.NewKeyring(m.cfg.GroupID, keys)
	if err != nil {
		return fmt.Errorf("%w: SetKeys: %w", ErrInvalidConfig, err)
	}
	m.mu.Lock()
	m.sec.verifier.SetKeyring(r)
	m.mu.Unlock()
	m.sec.next.Store(r)
	m.log.l.Info("keys replaced", "key_id", keys[0].ID(), "keys", len(keys))
	return nil
}
