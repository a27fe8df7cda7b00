package memtransport

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"

	"golang.org/x/net/bpf"

	"github.com/nakcast/nakcast/engine/transport"
)

// Faults says what a Faulty transport does to the datagrams it receives,
// each decided by a generator seeded with Seed: the same seed and the same
// datagrams in the same order give the same faults. Loss drops a
// datagram; Duplicate delivers it twice; Reorder holds it back until the
// next read, behind what that read receives. Each is a fraction in [0, 1);
// all zero passes everything through.
type Faults struct {
	Loss, Duplicate, Reorder float64
	Seed                     uint64
}

// Validate reports a fraction outside [0, 1).
func (f Faults) Validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"Loss", f.Loss}, {"Duplicate", f.Duplicate}, {"Reorder", f.Reorder}} {
		if !(p.v >= 0 && p.v < 1) { // also refuses NaN
			return fmt.Errorf("memtransport: Faults.%s %v: want 0 <= %s < 1", p.name, p.v, p.name)
		}
	}
	return nil
}

// Wrap returns t with f applied to what it receives (f must be valid).
func (f Faults) Wrap(t transport.Transport) *Faulty {
	return &Faulty{Transport: t, f: f, rng: rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))}
}

// WrapTransport is Wrap as engine.TransportConfig.Wrap takes it:
// Transport: engine.TransportConfig{Wrap: f.WrapTransport}.
func (f Faults) WrapTransport(t transport.Transport) transport.Transport { return f.Wrap(t) }

// FaultCounts counts what a Faulty transport did.
type FaultCounts struct {
	Dropped, Duplicated, Reordered uint64
}

// Faulty is a transport with Faults applied to its reads. Its reads and
// counters follow the wrapped transport's concurrency contract (one
// reader); Counts is safe from any goroutine. It passes the wrapped
// transport's optional methods (Info, Stats, SetGroupFilter) through.
type Faulty struct {
	transport.Transport
	f   Faults
	rng *rand.Rand
	// held are copies delivered at the start of the next read: reordered
	// and duplicated datagrams.
	held []datagram

	dropped, duplicated, reordered atomic.Uint64
}

// Counts returns what f did so far.
func (f *Faulty) Counts() FaultCounts {
	return FaultCounts{Dropped: f.dropped.Load(), Duplicated: f.duplicated.Load(), Reordered: f.reordered.Load()}
}

// ReadBatch implements transport.Transport: held datagrams first, without
// blocking; else a read of the wrapped transport, with the faults applied,
// repeated while the faults took everything it read.
func (f *Faulty) ReadBatch(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (int, error) {
	return f.read(bufs, sizes, srcs, f.Transport.ReadBatch)
}

// TryReadBatch implements transport.Transport.
func (f *Faulty) TryReadBatch(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (int, error) {
	return f.read(bufs, sizes, srcs, f.Transport.TryReadBatch)
}

type readFunc func(bufs [][]byte, sizes []int, srcs []netip.AddrPort) (int, error)

func (f *Faulty) read(bufs [][]byte, sizes []int, srcs []netip.AddrPort, rd readFunc) (int, error) {
	if len(f.held) > 0 {
		return f.release(bufs, sizes, srcs), nil
	}
	for {
		n, err := rd(bufs, sizes, srcs)
		if n == 0 || err != nil {
			return n, err
		}
		if n = f.apply(bufs, sizes, srcs, n); n > 0 {
			return n, nil
		}
		if len(f.held) > 0 {
			return f.release(bufs, sizes, srcs), nil
		}
	}
}

// apply decides the faults of the n datagrams read and moves the ones
// delivered now to the front, each into the buffer at its new index; it
// returns how many.
func (f *Faulty) apply(bufs [][]byte, sizes []int, srcs []netip.AddrPort, n int) int {
	k := 0
	for i := range n {
		var src netip.AddrPort
		if i < len(srcs) {
			src = srcs[i]
		}
		switch {
		case f.f.Loss > 0 && f.rng.Float64() < f.f.Loss:
			f.dropped.Add(1)
			continue
		case f.f.Reorder > 0 && f.rng.Float64() < f.f.Reorder:
			f.reordered.Add(1)
			f.held = append(f.held, datagram{b: append([]byte(nil), bufs[i][:sizes[i]]...), src: src})
			continue
		case f.f.Duplicate > 0 && f.rng.Float64() < f.f.Duplicate:
			f.duplicated.Add(1)
			f.held = append(f.held, datagram{b: append([]byte(nil), bufs[i][:sizes[i]]...), src: src})
		}
		if k != i {
			// Copy, not swap: the caller may know its buffers by index.
			sizes[k] = copy(bufs[k], bufs[i][:sizes[i]])
			if i < len(srcs) {
				srcs[k] = src
			}
		}
		k++
	}
	return k
}

// release copies held datagrams into bufs, as many as fit.
func (f *Faulty) release(bufs [][]byte, sizes []int, srcs []netip.AddrPort) int {
	n := min(len(bufs), len(sizes), len(f.held))
	for i := range n {
		sizes[i] = copy(bufs[i], f.held[i].b)
		if i < len(srcs) {
			srcs[i] = f.held[i].src
		}
	}
	f.held = append(f.held[:0], f.held[n:]...)
	return n
}

// Info returns the wrapped transport's Info, if it has one.
func (f *Faulty) Info() transport.Info {
	if i, ok := f.Transport.(interface{ Info() transport.Info }); ok {
		return i.Info()
	}
	return transport.Info{Group: f.Group(), Local: f.LocalAddr(), BatchSize: f.BatchSize()}
}

// Stats returns the wrapped transport's Stats, if it has any.
func (f *Faulty) Stats() transport.Stats {
	if s, ok := f.Transport.(interface{ Stats() transport.Stats }); ok {
		return s.Stats()
	}
	return transport.Stats{}
}

// SetGroupFilter implements transport.GroupFilterSetter when the wrapped
// transport does.
func (f *Faulty) SetGroupFilter(prog []bpf.RawInstruction) error {
	if s, ok := f.Transport.(transport.GroupFilterSetter); ok {
		return s.SetGroupFilter(prog)
	}
	return fmt.Errorf("memtransport: %T cannot replace its group filter", f.Transport)
}

// Add returns the sum of c and o.
func (c FaultCounts) Add(o FaultCounts) FaultCounts {
	return FaultCounts{Dropped: c.Dropped + o.Dropped, Duplicated: c.Duplicated + o.Duplicated, Reordered: c.Reordered + o.Reordered}
}
