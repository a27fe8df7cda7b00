//go:build !linux

package ebpf

import (
	"github.com/nakcast/nakcast/engine/transport"
)

// XDP is the AF_XDP backend; it exists on Linux only, where it implements
// transport.Transport. Open here always fails.
type XDP struct{ transport.Transport }

// Open returns an error wrapping ErrUnavailable: AF_XDP is Linux only.
func Open(Config) (*XDP, error) { return nil, unavailable("AF_XDP sockets exist on Linux only") }

// Probe returns an error wrapping ErrUnavailable: AF_XDP is Linux only.
func Probe(Config) error { return unavailable("AF_XDP sockets exist on Linux only") }

// Info is the transport's description (never called: Open fails).
func (t *XDP) Info() transport.Info { return transport.Info{} }
