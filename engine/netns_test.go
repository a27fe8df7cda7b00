//go:build linux

package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The multi-process tests of issue 5: one member process per network
// namespace on a bridge (veth, MTU 1500), joined through gms, 5% loss
// injected at every member's receive path. They need root with
// CAP_NET_ADMIN and CAP_SYS_ADMIN and iproute2, and skip otherwise. The
// harness is in harness_netns_test.go, the member process in
// member_netns_test.go.

// netnsCount is the number of messages per sender: modest, since up to
// five (race-instrumented, under -race) processes share two cores.
func netnsCount() int {
	if netnsRace || testing.Short() {
		return 1000
	}
	return 2000
}

// netnsTimeout bounds one test's run once the namespaces exist.
func netnsTimeout() time.Duration {
	if netnsRace {
		return 60 * time.Second
	}
	return 40 * time.Second
}

// netnsRate is a sender's payload rate that spreads n messages over about
// d (sizes average about 230 bytes).
func netnsRate(n int, d time.Duration) int64 {
	return int64(float64(n*230) / d.Seconds())
}

// TestNetnsExactDelivery: four members, three of them sending, 5% loss at
// every member: every member delivers every message of every sender
// exactly once, in order (count and order-sensitive hash per sender).
func TestNetnsExactDelivery(t *testing.T) {
	const members, senders = 4, 3
	n := netnsCount()
	r := newNetnsRun(t, members)
	ctx, cancel := context.WithTimeout(context.Background(), netnsTimeout())
	defer cancel()
	var cfgs []netnsMemberConfig
	for i := range members {
		c := r.config(i)
		if i < senders {
			c.Send = n
		}
		c.Expect, c.PerSender = r.ids[:senders], n
		cfgs = append(cfgs, c)
	}
	ps := r.startJoined(ctx, cfgs...)
	id, _ := r.waitView(ctx, ps)
	t.Logf("view %v installed at every member", id)
	for _, p := range ps[:senders] {
		p.command(r, "go")
	}
	for _, p := range ps {
		r.waitFor(ctx, p, "every message delivered", func(st *netnsState) bool { return st.done })
	}
	for _, p := range ps {
		p.mu.Lock()
		require.Equal(t, id, p.st.view, "member %d: no view change while the messages flowed", p.i)
		p.mu.Unlock()
	}
	res := r.finish(ctx, ps)
	for k := range senders {
		r.requireExact(res, k, n, false)
	}
	requireInjected(t, res)
}
