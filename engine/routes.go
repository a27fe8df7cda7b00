package engine

import (
	"crypto/hmac"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/nakcast/nakcast/digest"
)

// routes is the agent's routing table (design.md, "Security"): for every
// member this member may hear from, the one unicast address its datagrams
// must come from, which is also where its unicasts go. A datagram never
// creates or changes an entry: the addresses come from
//
//   - the view: with dynamic membership, the unicast address each member
//     gave gms when it joined (gms.View's peers, installed by setView); a
//     member the view drops keeps its entry, marked departed, while the
//     protocol still holds its window (a graceful leaver answers repairs
//     until its cut closes);
//   - the membership exchanges this member takes part in with peers
//     outside its view (exchange): a joiner learns its coordinator's
//     address from where gms sent the JOIN_REQ, a coordinator its joiners'
//     from where it sent their JoinRsp; a small ring whose oldest entry
//     gives way, and which a view member's entry always overrides;
//   - the configuration, with static membership and Config.Membership.MemberAddrs;
//   - with static membership without them, a bind on first contact that
//     an off-path spoofer cannot complete: an ADDRESS challenge goes to the
//     address a datagram claiming the member came from, with a nonce only
//     this member can compute (probeNonce), and only the echo from that
//     address binds it. Until then nothing from the member is taken. Once
//     bound, an entry never changes.
//
// Entries are per member of the view (or per exchange, bounded), so the
// table is never full: a correction (a new view) always lands.
type routes struct {
	self    digest.Member
	members map[digest.Member]route
	ex      [exchangeSize]exPeer
	exNext  int // the exchange slot taken next
	// Binding static members: the nonce of an ADDRESS probe is a keyed
	// hash of the member and the probed address (probeNonce), so an echo
	// is checked without remembering the probe, and no stream of claims
	// from other addresses can push a real member's probe out; probed
	// remembers the recent probes only so that one address is not probed
	// again for every datagram.
	secret [32]byte
	probed [probedSize]probeRec
	prNext int
}

// route is one member's entry: addr is invalid while a static member is
// not bound yet.
type route struct {
	addr     netip.AddrPort
	departed bool
}

// exPeer is a peer outside the view in a membership exchange with us.
type exPeer struct {
	m    digest.Member
	addr netip.AddrPort
}

// probeRec is a recent ADDRESS probe: who, where and when.
type probeRec struct {
	m    digest.Member
	addr netip.AddrPort
	at   time.Duration
}

// probedSize bounds the recent probes remembered.
const probedSize = 64

// exchangeSize bounds the exchange entries: joiners a coordinator admits
// at once, a joiner's coordinator, merge partners.
const exchangeSize = 64

// probeInterval is how long a member is not probed again at the same
// address (the echo is on its way, or nobody answers there).
const probeInterval = 50 * time.Millisecond

// verdict is what the table says of a datagram's claimed sender and its
// source address.
type verdict uint8

const (
	// fromMember: the sender has an entry and the datagram came from its
	// address.
	fromMember verdict = iota
	// wrongSource: the sender has an entry, and the datagram came from
	// another address (a stranger using its identity, or a stale member).
	wrongSource
	// stranger: the sender has no entry (not in the view, no exchange).
	stranger
	// unbound: a static member whose address is not bound yet.
	unbound
)

func newRoutes(self digest.Member, selfAddr netip.AddrPort) *routes {
	r := &routes{members: make(map[digest.Member]route)}
	_, _ = crand.Read(r.secret[:]) // never fails (Go 1.24+: it crashes the program instead)
	r.setSelf(self, selfAddr)
	return r
}

// setSelf makes self (a new incarnation) this member's own entry: its own
// multicast, looped back, comes from its own address.
func (r *routes) setSelf(self digest.Member, addr netip.AddrPort) {
	delete(r.members, r.self)
	r.self = self
	r.members[self] = route{addr: addr}
}

// setStatic installs a static view: members with their addresses (addrs
// nil or shorter: the rest are bound on first contact).
func (r *routes) setStatic(members []digest.Member, addrs []netip.AddrPort) {
	for i, m := range members {
		if m == r.self {
			continue
		}
		var a netip.AddrPort
		if i < len(addrs) {
			a = addrs[i]
		}
		r.members[m] = route{addr: a}
	}
}

// setView installs a dynamic view's addresses (peers with a valid address;
// those without cannot be heard from). Members of the previous view that
// it drops stay, departed, until pruneDeparted.
func (r *routes) setView(peers map[digest.Member]netip.AddrPort) {
	for m, rt := range r.members {
		if _, in := peers[m]; !in && m != r.self {
			rt.departed = true
			r.members[m] = rt
		}
	}
	for m, a := range peers {
		if m != r.self {
			r.members[m] = route{addr: a}
		}
	}
}

// pruneDeparted forgets departed members for which held reports false.
func (r *routes) pruneDeparted(held func(digest.Member) bool) {
	for m, rt := range r.members {
		if rt.departed && !held(m) {
			delete(r.members, m)
		}
	}
}

// noteExchange records that gms sent m, a peer outside the view, a unicast
// to addr: its answers must come from there.
func (r *routes) noteExchange(m digest.Member, addr netip.AddrPort) {
	if m.IsZero() {
		return
	}
	if _, member := r.members[m]; member {
		return
	}
	for i := range r.ex {
		if r.ex[i].m == m {
			r.ex[i].addr = addr
			return
		}
	}
	r.ex[r.exNext] = exPeer{m: m, addr: addr}
	r.exNext = (r.exNext + 1) % exchangeSize
}

// lookup returns where unicasts to m go (false: unknown, or a static member
// not bound yet: reach it through the group).
func (r *routes) lookup(m digest.Member) (netip.AddrPort, bool) {
	if rt, ok := r.members[m]; ok {
		return rt.addr, rt.addr.IsValid()
	}
	for i := range r.ex {
		if r.ex[i].m == m {
			return r.ex[i].addr, true
		}
	}
	return netip.AddrPort{}, false
}

// check judges a datagram that claims sender and came from src.
func (r *routes) check(sender digest.Member, src netip.AddrPort) verdict {
	a, ok := r.members[sender]
	if ok && !a.addr.IsValid() {
		return unbound
	}
	if !ok {
		if a.addr, ok = r.exchange(sender); !ok {
			return stranger
		}
	}
	if !sameAddr(a.addr, src) {
		return wrongSource
	}
	return fromMember
}

func (r *routes) exchange(m digest.Member) (netip.AddrPort, bool) {
	for i := range r.ex {
		if r.ex[i].m == m {
			return r.ex[i].addr, true
		}
	}
	return netip.AddrPort{}, false
}

// probe returns the nonce of an ADDRESS probe of unbound static member m
// at src, or false when one was sent there within probeInterval.
func (r *routes) probe(m digest.Member, src netip.AddrPort, now time.Duration) (uint64, bool) {
	for _, p := range r.probed {
		if p.m == m && sameAddr(p.addr, src) && now-p.at < probeInterval && p.at != 0 {
			return 0, false
		}
	}
	r.probed[r.prNext] = probeRec{m: m, addr: src, at: max(now, 1)}
	r.prNext = (r.prNext + 1) % probedSize
	return r.probeNonce(m, src), true
}

// bind takes an ADDRESS echo from m at src: if it carries the nonce of a
// probe of m sent to src, or of one sent to the group (groupProbe), m is
// bound to src for good.
func (r *routes) bind(m digest.Member, src netip.AddrPort, nonce uint64) bool {
	rt, member := r.members[m]
	if !member || rt.addr.IsValid() || (nonce != r.probeNonce(m, src) && nonce != r.probeNonce(m, netip.AddrPort{})) {
		return false
	}
	r.members[m] = route{addr: src}
	return true
}

// unbound appends the static members not bound yet to dst.
func (r *routes) unbound(dst []digest.Member) []digest.Member {
	for m, rt := range r.members {
		if !rt.addr.IsValid() {
			dst = append(dst, m)
		}
	}
	return dst
}

// probeNonce is the nonce of a probe of m at addr (the zero addr: a probe
// sent to the group): a keyed hash that only
// who knows the secret, or received the probe at addr, can produce.
func (r *routes) probeNonce(m digest.Member, addr netip.AddrPort) uint64 {
	mac := hmac.New(sha256.New, r.secret[:])
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:], m.ID)
	binary.LittleEndian.PutUint32(b[8:], m.Inc)
	mac.Write(b[:])
	ab, _ := netip.AddrPortFrom(addr.Addr().WithZone("").Unmap(), addr.Port()).MarshalBinary()
	mac.Write(ab)
	return binary.LittleEndian.Uint64(mac.Sum(nil))
}

// sameAddr compares unicast addresses without their zones (a link-local
// IPv6 source carries the interface as zone, a configured address not).
func sameAddr(a, b netip.AddrPort) bool {
	return a.Port() == b.Port() && a.Addr().WithZone("").Unmap() == b.Addr().WithZone("").Unmap()
}
