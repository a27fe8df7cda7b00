package engine

import (
	"net/netip"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/stretchr/testify/require"
)

var (
	rSelf = digest.Member{ID: 1, Inc: 1}
	rB    = digest.Member{ID: 2, Inc: 1}
	rC    = digest.Member{ID: 3, Inc: 1}
	aSelf = netip.MustParseAddrPort("10.0.0.1:5000")
	aB    = netip.MustParseAddrPort("10.0.0.2:5000")
	aC    = netip.MustParseAddrPort("10.0.0.3:5000")
	aEvil = netip.MustParseAddrPort("10.0.0.66:5000")
)

// TestRoutesDatagramsNeverChangeEntries: whatever datagrams claim, only a
// view (or the configuration) sets an address; the old freeze (one
// datagram claiming the coordinator, then a hundred random sender ids
// filling the table) has nothing to hold on to.
func TestRoutesDatagramsNeverChangeEntries(t *testing.T) {
	r := newRoutes(rSelf, aSelf)
	r.setView(map[digest.Member]netip.AddrPort{rSelf: aSelf, rB: aB, rC: aC})
	require.Equal(t, wrongSource, r.check(rB, aEvil), "a member's identity from another address")
	for i := range 1000 {
		require.Equal(t, stranger, r.check(digest.Member{ID: uint64(1000 + i), Inc: 1}, aEvil))
	}
	require.Equal(t, fromMember, r.check(rB, aB))
	got, ok := r.lookup(rB)
	require.True(t, ok)
	require.Equal(t, aB, got, "the coordinator's address comes from the view")

	// A new view corrects an address at once, whatever came before.
	moved := netip.MustParseAddrPort("10.0.0.2:6000")
	r.setView(map[digest.Member]netip.AddrPort{rSelf: aSelf, rB: moved, rC: aC})
	require.Equal(t, wrongSource, r.check(rB, aB))
	require.Equal(t, fromMember, r.check(rB, moved))
	require.Equal(t, fromMember, r.check(rSelf, aSelf), "own multicast looped back")
}

// TestRoutesDeparted: a member a view drops stays reachable while the
// protocol holds its window, and is forgotten once it does not.
func TestRoutesDeparted(t *testing.T) {
	r := newRoutes(rSelf, aSelf)
	r.setView(map[digest.Member]netip.AddrPort{rB: aB, rC: aC})
	r.setView(map[digest.Member]netip.AddrPort{rB: aB})
	require.Equal(t, fromMember, r.check(rC, aC))
	r.pruneDeparted(func(m digest.Member) bool { return m == rC })
	require.Equal(t, fromMember, r.check(rC, aC))
	r.pruneDeparted(func(digest.Member) bool { return false })
	require.Equal(t, stranger, r.check(rC, aC))
	require.Equal(t, fromMember, r.check(rB, aB), "members are never pruned")
}

// TestRoutesExchange: a peer outside the view is heard from only at the
// address gms sent it a unicast; the ring's oldest entry gives way and a
// view member's entry is never shadowed.
func TestRoutesExchange(t *testing.T) {
	r := newRoutes(rSelf, aSelf)
	r.setView(map[digest.Member]netip.AddrPort{rB: aB})
	r.noteExchange(rC, aC)
	require.Equal(t, fromMember, r.check(rC, aC))
	require.Equal(t, wrongSource, r.check(rC, aEvil))
	r.noteExchange(rB, aEvil)
	require.Equal(t, fromMember, r.check(rB, aB), "an exchange never overrides a member")
	for i := range exchangeSize {
		r.noteExchange(digest.Member{ID: uint64(100 + i), Inc: 1}, aEvil)
	}
	require.Equal(t, stranger, r.check(rC, aC), "the oldest exchange gave way")
	r.setView(map[digest.Member]netip.AddrPort{rB: aB, rC: aC})
	require.Equal(t, fromMember, r.check(rC, aC), "the view brings it back")
}

// TestRoutesStaticBinding: without MemberAddrs a static member is bound
// to an address only by the echo of a probe sent there (its nonce a keyed
// hash of member and address, so no claim from elsewhere can displace it);
// an address is probed once per probeInterval; once bound, an entry never
// changes.
func TestRoutesStaticBinding(t *testing.T) {
	r := newRoutes(rSelf, aSelf)
	r.setStatic([]digest.Member{rSelf, rB, rC}, nil)
	require.Equal(t, unbound, r.check(rB, aEvil))
	nEvil, ok := r.probe(rB, aEvil, 0) // a spoofer's datagram came first
	require.True(t, ok)
	_, ok = r.probe(rB, aEvil, time.Millisecond)
	require.False(t, ok, "not the same address again within probeInterval")
	for i := range 1000 { // and a stream of claims from elsewhere
		_, _ = r.probe(rB, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 9), time.Millisecond)
	}
	nB, ok := r.probe(rB, aB, time.Millisecond)
	require.True(t, ok, "the real member's address is probed all the same")
	require.NotEqual(t, nEvil, nB)
	require.False(t, r.bind(rB, aB, nEvil), "a nonce sent elsewhere binds nothing")
	require.False(t, r.bind(rB, aEvil, nB), "nor does the right nonce from elsewhere")
	require.False(t, r.bind(rC, aB, nB), "nor for another member")
	require.True(t, r.bind(rB, aB, nB))
	require.Equal(t, fromMember, r.check(rB, aB))
	require.Equal(t, wrongSource, r.check(rB, aEvil))
	require.False(t, r.bind(rB, aEvil, nEvil), "a bound member never moves")
	got, _ := r.lookup(rB)
	require.Equal(t, aB, got)
	_, ok = r.probe(rC, aC, 2*probeInterval)
	require.True(t, ok)

	// With addresses configured nothing is probed.
	r2 := newRoutes(rSelf, aSelf)
	r2.setStatic([]digest.Member{rSelf, rB}, []netip.AddrPort{aSelf, aB})
	require.Equal(t, fromMember, r2.check(rB, aB))
	require.Equal(t, wrongSource, r2.check(rB, aEvil))
}

func TestSameAddrIgnoresZones(t *testing.T) {
	a := netip.MustParseAddrPort("[fe80::1%eth0]:5000")
	b := netip.MustParseAddrPort("[fe80::1]:5000")
	require.True(t, sameAddr(a, b))
	require.False(t, sameAddr(a, netip.MustParseAddrPort("[fe80::1]:5001")))
}
