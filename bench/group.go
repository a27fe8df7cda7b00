package bench

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"

	"github.com/nakcast/nakcast/engine"
)

// RandomGroup returns a loopback benchmark group: 239.77.x.y with a random
// port, so that runs at the same time do not share traffic.
func RandomGroup() netip.AddrPort {
	a := netip.AddrFrom4([4]byte{239, 77, byte(128 + rand.IntN(128)), byte(1 + rand.IntN(254))})
	return netip.AddrPortFrom(a, uint16(20000+rand.IntN(40000)))
}

// RandomRunID returns a run id for MemberConfig.RunID: random, with room
// for 2^16 members above it.
func RandomRunID() uint64 {
	for {
		if id := rand.Uint64() &^ 0xffff; id != 0 {
			return id
		}
	}
}

// RunGroup runs cfg.Members members in this process, one goroutine each,
// with cfg as the template (Index is set per member; RunID and Group are
// picked at random when unset): all open first, then the senders start
// together. mod, if not nil, adjusts member i's config (for example the
// loss rate of receivers only). onOpen, if not nil, is called with every
// member once all are open (for a live stats view). The results are in
// view order; the error joins the members' errors.
func RunGroup(ctx context.Context, cfg MemberConfig, mod func(i int, c *MemberConfig), onOpen func([]*engine.Member)) ([]MemberResult, error) {
	if cfg.RunID == 0 {
		cfg.RunID = RandomRunID()
	}
	if !cfg.Group.IsValid() {
		cfg.Group = RandomGroup()
	}
	if cfg.Members == 0 {
		cfg.Members = 1
	}
	n := cfg.Members
	gctx, gcancel := context.WithCancel(ctx)
	defer gcancel()
	start := make(chan struct{})
	var ready sync.WaitGroup
	ready.Add(n)
	members := make([]*engine.Member, n)
	results := make([]MemberResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		c := cfg
		c.Index = i
		if mod != nil {
			mod(i, &c)
		}
		var once sync.Once
		c.Ready = func(m *engine.Member) { members[i] = m; once.Do(ready.Done) }
		c.Start = start
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer once.Do(ready.Done) // a member that failed to open
			results[i], errs[i] = RunMember(gctx, c)
		}()
	}
	ready.Wait()
	failed := false
	for _, m := range members {
		failed = failed || m == nil
	}
	if !failed && onOpen != nil {
		onOpen(members)
	}
	if failed {
		// Someone could not open: the others would wait for it forever.
		gcancel()
	}
	close(start)
	wg.Wait()
	return results, errors.Join(errs...)
}
