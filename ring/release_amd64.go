//go:build amd64 && !race

package ring

import (
	"sync/atomic"
	"unsafe"
)

// storeRelease stores v into *p with release ordering only: on amd64 every
// store is a release (TSO), so a plain MOV, written in assembly so that the
// compiler neither reorders the caller's earlier stores past it (it cannot
// see through the call) nor turns it into the locked exchange that
// atomic.Uint64.Store is (a full barrier: it waits for the store buffer to
// drain, about a fifth of a small message's cost in TrySend).
func storeRelease(p *atomic.Uint64, v uint64) { storeRelease64((*uint64)(unsafe.Pointer(p)), v) }

//go:noescape
func storeRelease64(p *uint64, v uint64)

// StoreRelease stores v into *p with release ordering only (a plain MOV on
// amd64; p.Store elsewhere and under the race detector): for a single
// writer publishing what it wrote before, without the locked exchange of
// atomic.Uint64.Store. Readers use p.Load.
func StoreRelease(p *atomic.Uint64, v uint64) { storeRelease(p, v) }
