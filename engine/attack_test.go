package engine

import (
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine/transport/memtransport"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// forger builds the datagrams a stranger sends: control messages that
// claim a member of the view (or a random identity), with the view id and
// seqnos of the running group.
type forger struct {
	group uint32
	view  digest.ViewID
	buf   []byte
}

func (f *forger) hdr(sender digest.Member) wire.Header {
	return wire.Header{Group: f.group, Sender: sender}
}

// claims returns one of every control datagram that could steer a member,
// claiming sender, aimed at victim, about the seqnos of origin up to hi.
func (f *forger) claims(sender, victim, origin digest.Member, hi uint64) [][]byte {
	var out [][]byte
	add := func(b []byte, err error) {
		if err == nil {
			out = append(out, append([]byte(nil), b...))
		}
	}
	es := wire.EntrySlice{{Member: origin, Low: hi, Delivered: hi, Received: hi}, {Member: victim, Low: hi, Delivered: hi, Received: hi}}
	add(wire.EncodeMsgNotFound(f.buf, f.hdr(sender), f.view, victim, wire.Range{From: 1, To: hi}, hi, hi, es))
	add(wire.EncodeStability(f.buf, f.hdr(sender), f.view, es))
	add(wire.EncodeStable(f.buf, f.hdr(sender), f.view, es))
	add(wire.EncodeHighest(f.buf, f.hdr(sender), wire.Highest{View: f.view, Low: hi, Highest: hi + 1<<20}))
	add(wire.EncodeXmitReq(f.buf, f.hdr(sender), f.view, origin, 0, []wire.Range{{From: 1, To: hi}}))
	add(wire.EncodeChallenge(f.buf, f.hdr(sender), wire.TypeEcho, f.view, sender, rand.Uint64(), wire.ChallengeNotFound,
		wire.RangeSlice{{From: 1, To: hi}}))
	var w wire.DataWriter
	if w.Reset(f.buf, f.hdr(sender), origin, hi+1) == nil && w.Append([]byte("forged")) {
		out = append(out, append([]byte(nil), w.Finish()...))
	}
	return out
}

// TestAttackLoopback: a stranger at its own loopback address keeps
// sending, to every member of a lossy 3-member static group, datagrams
// that claim the coordinator and the sender (MSG_NOT_FOUND, STABILITY,
// STABLE, HIGHEST, XMIT_REQ, forged echoes and data), the same under
// hundreds of random sender ids (the old way to freeze the group: fill
// the address table so that STABLE went to the attacker), and random
// bytes. The group delivers everything exactly, nobody is told anything
// lost, stability keeps purging (a small window would stall otherwise),
// and every forged datagram is counted as a drop by reason. Both with
// Config.Membership.MemberAddrs and with addresses bound on first contact (the
// stranger starts once the members have been heard).
func TestAttackLoopback(t *testing.T) {
	for _, withAddrs := range []bool{true, false} {
		t.Run(map[bool]string{true: "member-addrs", false: "bound-on-first-contact"}[withAddrs], func(t *testing.T) {
			attackLoopback(t, withAddrs)
		})
	}
}

func attackLoopback(t *testing.T, withAddrs bool) {
	const n = 20000
	g := testGroup()
	ids := testMembers(3)
	var addrs []netip.AddrPort
	if withAddrs {
		port := uint16(20000 + rand.IntN(40000))
		for i := range ids {
			addrs = append(addrs, netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(i + 1)}), port))
		}
	}
	recs := make([]*recorder, 3)
	ms := make([]*Member, 3)
	for i := range ms {
		recs[i] = newRecorder(n)
		c := Config{Group: g, Self: ids[i], Logger: quietLogger(), Handler: recs[i], Membership: MembershipConfig{Members: ids, MemberAddrs: addrs}, Tuning: TuningConfig{Window: 1024}}
		if i > 0 {
			wrapFaults(&c, memtransport.Faults{Loss: 0.1, Seed: uint64(i)}) // UDP: the attacker's datagrams are real
		}
		m, err := Open(context.Background(), c)
		require.NoError(t, err)
		ms[i] = m
	}
	defer closeAll(t, ms, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Warm up: every member heard from every other (binding on first
	// contact is the window a stranger on the path could race).
	for i := range 200 {
		require.NoError(t, ms[0].Send(ctx, payloadOf(0, i, 200)))
	}
	for _, r := range recs {
		require.NoError(t, r.waitFor(ctx, func() bool { return r.total >= 200 }))
	}

	stop := make(chan struct{})
	var sent atomic.Uint64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sent.Store(runLoopbackStranger(t, ms, ids, stop))
	}()
	for i := 200; i < n; i++ {
		require.NoError(t, ms[0].Send(ctx, payloadOf(0, i, 200)))
	}
	for i, r := range recs {
		require.NoError(t, r.waitFor(ctx, func() bool { return r.total >= n }), "member %d: %+v", i, ms[i].Stats())
	}
	close(stop)
	wg.Wait()
	require.Positive(t, sent.Load())
	want := expectedHash(n, func(i int) []byte { return payloadOf(0, i, 200) })
	for i, r := range recs {
		r.mu.Lock()
		require.Empty(t, r.errs, "member %d", i)
		require.Zero(t, r.lost, "member %d", i)
		require.Equal(t, n, r.count[ids[0]], "member %d", i)
		require.Equal(t, want, r.hash[ids[0]], "member %d", i)
		r.mu.Unlock()
		s := ms[i].Stats()
		require.Positive(t, s.Drops.WrongSource, "member %d: claims of members from the stranger's address", i)
		require.Positive(t, s.Drops.NotMember, "member %d: random sender ids", i)
		require.Positive(t, s.Drops.Malformed+s.Drops.ForeignGroup, "member %d: random bytes", i)
		require.Zero(t, s.Protocol.NotFoundConfirmed, "member %d", i)
		if !withAddrs && i > 0 {
			require.Equal(t, uint64(2), s.AddressesBound, "member %d bound both others", i)
		}
	}
	st := ms[0].Stats().Protocol
	require.LessOrEqual(t, st.RepairBytes, uint64(ms[0].proto.Config().RepairRatio)*st.NakBytes+2*uint64(ms[0].proto.Config().RepairBurst))
}

// runLoopbackStranger sends forged and random datagrams from its own
// loopback address to every member's unicast address until stop, and
// returns how many it sent.
func runLoopbackStranger(t *testing.T, ms []*Member, ids []digest.Member, stop <-chan struct{}) uint64 {
	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Error(err)
		return 0
	}
	defer conn.Close()
	view, _ := ms[1].View()
	f := &forger{group: ms[0].Config().Network.GroupID, view: view, buf: make([]byte, 2048)}
	random := make([]byte, 1500)
	var sent uint64
	for round := 0; ; round++ {
		select {
		case <-stop:
			return sent
		default:
		}
		hi := ms[0].Stats().Sent
		for v, m := range ms {
			dst := net.UDPAddrFromAddrPort(m.LocalAddr())
			var ds [][]byte
			for _, claimed := range []digest.Member{ids[0], ids[(v+1)%3]} {
				ds = append(ds, f.claims(claimed, ids[v], ids[0], hi)...)
			}
			for range 4 {
				ds = append(ds, f.claims(digest.Member{ID: rand.Uint64() | 1, Inc: 1}, ids[v], ids[0], hi)...)
			}
			for range 8 {
				for j := range random {
					random[j] = byte(rand.Uint32())
				}
				if rand.IntN(2) == 0 {
					random[0] = wire.VersionMajor // most get past the version byte
				}
				ds = append(ds, random[:24+rand.IntN(len(random)-24)])
			}
			for _, d := range ds {
				if _, err := conn.WriteToUDP(d, dst); err == nil {
					sent++
				}
			}
		}
		time.Sleep(200 * time.Microsecond) // pacing the flood, not synchronisation
	}
}
