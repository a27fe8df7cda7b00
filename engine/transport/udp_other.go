//go:build !linux

package transport

import (
	"net/netip"
	"time"

	"golang.org/x/net/bpf"
)

// UDP is the UDP multicast backend of Transport; it is implemented on Linux
// only, elsewhere Open returns ErrUnsupported.
type UDP struct{}

var (
	_ Transport         = (*UDP)(nil)
	_ GroupFilterSetter = (*UDP)(nil)
)

// Open returns ErrUnsupported on this platform (after validating cfg).
func Open(cfg Config) (*UDP, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, ErrUnsupported
}

// ReadBatch implements Transport.
func (*UDP) ReadBatch([][]byte, []int, []netip.AddrPort) (int, error) { return 0, ErrUnsupported }

// TryReadBatch implements Transport.
func (*UDP) TryReadBatch([][]byte, []int, []netip.AddrPort) (int, error) { return 0, ErrUnsupported }

// WriteBatch implements Transport.
func (*UDP) WriteBatch([][]byte, []netip.AddrPort) (int, error) { return 0, ErrUnsupported }

// SetGroupFilter implements GroupFilterSetter.
func (*UDP) SetGroupFilter([]bpf.RawInstruction) error { return ErrUnsupported }

// SetReadDeadline implements Transport.
func (*UDP) SetReadDeadline(time.Time) error { return ErrUnsupported }

// LocalAddr implements Transport.
func (*UDP) LocalAddr() netip.AddrPort { return netip.AddrPort{} }

// Group implements Transport.
func (*UDP) Group() netip.AddrPort { return netip.AddrPort{} }

// BatchSize implements Transport.
func (*UDP) BatchSize() int { return 0 }

// Info describes the open sockets.
func (*UDP) Info() Info { return Info{} }

// Stats returns the transport's counters.
func (*UDP) Stats() Stats { return Stats{} }

// Close implements Transport.
func (*UDP) Close() error { return ErrUnsupported }
