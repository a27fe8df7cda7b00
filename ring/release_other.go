//go:build !amd64 || race

package ring

import "sync/atomic"

// storeRelease is p.Store(v): elsewhere than amd64 (and under the race
// detector, which must see the synchronisation) the sequentially
// consistent store is the release store.
func storeRelease(p *atomic.Uint64, v uint64) { p.Store(v) }
