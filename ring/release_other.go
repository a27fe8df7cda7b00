//go:build !amd64 || race

package ring

import "sync/atomic"

// storeRelease is p.Store(v): elsewhere than amd64 (and under the race
// detector, which must see the synchronisation) the sequentially
// consistent store is the release store.
func storeRelease(p *atomic.Uint64, v uint64) { p.Store(v) }

// StoreRelease stores v into *p with release ordering only (a plain MOV on
// amd64; p.Store elsewhere and under the race detector): for a single
// writer publishing what it wrote before, without the locked exchange of
// atomic.Uint64.Store. Readers use p.Load.
func StoreRelease(p *atomic.Uint64, v uint64) { storeRelease(p, v) }
