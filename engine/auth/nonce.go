package auth

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nakcast/nakcast/wire"
)

// Path is the way a sealed datagram travels: to the group address or to
// one member's unicast address. Each has a counter space of its own in the
// nonce (wire.NonceUnicast) and a replay window of its own at receivers:
// a receiver reads the two through different sockets, so a datagram of one
// path can overtake any number of the other's (see the package doc,
// "Replay window").
type Path uint8

// Paths.
const (
	PathGroup Path = iota
	PathUnicast
	numPaths
)

// nonceCounter is the nonce counter of count c (below wire.NonceUnicast)
// on path p.
func nonceCounter(p Path, c uint64) uint64 {
	if p == PathUnicast {
		return c | wire.NonceUnicast
	}
	return c
}

// pathOf splits a nonce counter into its path and its count.
func pathOf(ctr uint64) (Path, uint64) {
	if ctr&wire.NonceUnicast != 0 {
		return PathUnicast, ctr &^ wire.NonceUnicast
	}
	return PathGroup, ctr
}

// NonceSource hands out nonce counts: for each path, one count for every
// seal of a process on that path, starting at the wall clock in
// nanoseconds (see the package doc, "Nonces never repeat"), and a salt.
// Safe for concurrent use.
type NonceSource struct {
	salt uint32
	ctr  [numPaths]atomic.Uint64 // by Path
}

// NewNonceSource returns a source whose first count on each path is just
// above start in Unix nanoseconds, with salt. Tests use it to stand for
// processes started at given times; members use ProcessNonces.
func NewNonceSource(start time.Time, salt uint32) *NonceSource {
	n := &NonceSource{salt: salt}
	for p := range n.ctr {
		n.ctr[p].Store(uint64(max(start.UnixNano(), 0)))
	}
	return n
}

// Next returns the next count on path p: never the same twice for one path
// of one source (the path bit, which nonceCounter adds, keeps the paths'
// counters apart). A sealer refuses a count that reaches wire.NonceUnicast
// (the wall clock's nanoseconds get there in the year 2262).
func (n *NonceSource) Next(p Path) uint64 { return n.ctr[p].Add(1) }

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
