package nakack

import "math"

// Close releases every pool buffer the protocol holds: the datagrams its
// windows retain (own and received, delivered or not, stable or not), the
// open bundle, the datagrams pending a window and the outbox not yet taken.
// The engine calls it when an incarnation's protocol is replaced (a rejoin
// after an exclusion) or dropped, so that what the old windows held stops
// counting against the pool's budget instead of waiting for the garbage
// collector, which never returns it to the pool.
//
// After Close the protocol keeps its counters and window numbers: Stats,
// Digest, WindowState, View and Self still answer (for a member's last
// statistics); every other call is invalid (the windows' messages are
// gone). Close is idempotent and allocates nothing.
func (p *Protocol) Close() {
	clear(p.ownPend[:p.ownN]) // claimed in the open bundle, not yet in the own window
	p.ownN = 0
	for _, s := range p.order {
		p.releaseRefs(s, math.MaxUint64)
	}
	if p.bundle != nil {
		// releaseRefs left the open bundle's dref unheld: free it, and drop
		// the protocol's own reference to the bundle.
		ref := p.bundleRef
		p.bundle.Release()
		p.bundle, p.bundleRef = nil, nil
		if ref != nil {
			p.dropRef(ref)
		}
	}
	for i := range p.pending {
		p.pending[i].buf.Release()
	}
	clear(p.pending)
	p.pending = p.pending[:0]
	for _, o := range p.out {
		if o.Buf != nil {
			o.Buf.Release()
		}
	}
	p.ClearOutbox()
}
