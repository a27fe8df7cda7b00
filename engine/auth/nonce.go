package auth

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"
)

// NonceSource hands out nonce counters: one counter for every seal of a
// process, starting at the wall clock in nanoseconds (see the package doc,
// "Nonces never repeat"), and a salt. Safe for concurrent use.
type NonceSource struct {
	salt uint32
	ctr  atomic.Uint64
}

// NewNonceSource returns a source whose first counter is just above start
// in Unix nanoseconds, with salt. Tests use it to stand for processes
// started at given times; members use ProcessNonces.
func NewNonceSource(start time.Time, salt uint32) *NonceSource {
	n := &NonceSource{salt: salt}
	n.ctr.Store(uint64(max(start.UnixNano(), 0)))
	return n
}

// Next returns the next counter: never the same twice from one source.
func (n *NonceSource) Next() uint64 { return n.ctr.Add(1) }

// Salt returns the source's salt.
func (n *NonceSource) Salt() uint32 { return n.salt }

var (
	processOnce   sync.Once
	processSource *NonceSource
)

// ProcessNonces returns the process-wide source, created at its first use
// from the wall clock and a random salt. Every Sealer of the process should
// use it: counters are unique per source, not across sources.
func ProcessNonces() *NonceSource {
	processOnce.Do(func() {
		var b [4]byte
		_, _ = rand.Read(b[:]) // never fails on Linux; a zero salt only weakens the extra margin
		processSource = NewNonceSource(time.Now(), binary.LittleEndian.Uint32(b[:]))
	})
	return processSource
}
