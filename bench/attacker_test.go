package bench

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine/transport"
	"github.com/nakcast/nakcast/wire"
)

// The attacker process of TestNetnsAttack: a stranger in its own network
// namespace on the members' bridge, not a member of the group. It reads
// the group's multicast (member ids and their addresses, the view id, the
// sender's highest seqno, data datagrams to replay), as anyone on the
// segment can, and then, until its stdin closes, sends every member:
//
//   - from its own address, datagrams that claim members (the coordinator,
//     which is the sender, and the others): MSG_NOT_FOUND for everything
//     sent, STABILITY and STABLE purging everything, HIGHEST far ahead,
//     XMIT_REQ for the whole window, guessed ECHOs, forged data, and
//     replays of captured data datagrams;
//   - the same under random sender ids;
//   - through a raw socket, with the sender's source address: forged
//     MSG_NOT_FOUNDs to the receivers, and replays of captured data; with
//     each receiver's source address: XMIT_REQs for the sender's whole
//     window;
//   - at least -random datagrams of garbage: wrong version, foreign group,
//     unknown type.
//
// It writes an attackReport (what it sent, by kind and destination) to
// -out when stdin closes. Nothing leaves the namespaces: destinations are
// checked against the group and NetnsSubnet.

// attackerEnv makes the test binary run attackerMain.
const attackerEnv = "NAKCAST_BENCH_ATTACKER_PROCESS"

// attackReport is what the attacker sent. Per destination (member
// address): the datagrams each member's engine must drop by reason.
type attackReport struct {
	Learned   map[string]string `json:"learned"` // member address -> id
	View      string            `json:"view"`
	Sent      uint64            `json:"sent"`
	Random    uint64            `json:"random"`
	Spoofed   uint64            `json:"spoofed"`
	PerMember map[string]*perMember
}

// perMember counts what the attacker sent to one member's unicast address,
// by kind. Each kind lands under one drop reason at the member (open mode;
// with a key, everything without a valid tag is an auth drop first).
type perMember struct {
	Forged       uint64 `json:"forged"`        // claims of members from the attacker's address: WrongSource
	Stranger     uint64 `json:"stranger"`      // random sender ids: NotMember
	Replayed     uint64 `json:"replayed"`      // captured data from the attacker's address: WrongSource (with a key: Replay too)
	Malformed    uint64 `json:"malformed"`     // wrong version, unknown type: Malformed
	ForeignGroup uint64 `json:"foreign_group"` // another group id: ForeignGroup
	SpoofedMNF   uint64 `json:"spoofed_mnf"`   // MSG_NOT_FOUND with the sender's source address: challenged (open)
	SpoofedData  uint64 `json:"spoofed_data"`  // captured data with the sender's source address: duplicates, or genuine
	SpoofedXmit  uint64 `json:"spoofed_xmit"`  // (at the sender) XMIT_REQ with a receiver's source address: served within credit (open)
}

// total is everything the attacker sent this member.
func (p *perMember) total() uint64 {
	return p.Forged + p.Stranger + p.Replayed + p.Malformed + p.ForeignGroup + p.SpoofedMNF + p.SpoofedData + p.SpoofedXmit
}

// attackerState is what the attacker has learned from the multicast.
type attackerState struct {
	mu      sync.Mutex
	group   uint32
	view    digest.ViewID
	members map[netip.AddrPort]digest.Member
	sender  digest.Member // origin of the data
	highest uint64
	capture [][]byte // recent data datagrams
	capN    int
}

func attackerMain(args []string, stdin io.Reader) error {
	fs := flag.NewFlagSet("attacker", flag.ContinueOnError)
	local := fs.String("local", "", "own unicast ADDR (in the namespace)")
	iface := fs.String("interface", "eth0", "interface")
	want := fs.Int("members", 3, "members to learn before attacking")
	random := fs.Uint64("random", 1_000_000, "garbage datagrams to send at least")
	within := fs.Duration("within", 6*time.Second, "send the -random garbage datagrams evenly over this long")
	lasting := fs.Duration("for", 0, "stop attacking this long after the group was learned (0: when stdin closes)")
	out := fs.String("out", "", "report file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tr, err := transport.Open(transport.Config{Group: NetnsGroup, Interface: *iface, TTL: 1, AllowNonLoopback: true,
		Unicast: netip.AddrPortFrom(netip.MustParseAddr(*local), 0), BatchSize: 64, NoLoopback: true})
	if err != nil {
		return err
	}
	defer tr.Close()
	raw, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
	if err != nil {
		return fmt.Errorf("raw socket: %w", err)
	}
	defer unix.Close(raw)
	st := &attackerState{members: map[netip.AddrPort]digest.Member{}, capture: make([][]byte, 64)}
	stop := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, bufio.NewReader(stdin)); close(stop) }()
	go st.sniff(tr, stop)
	if err := st.waitLearned(*want, stop); err != nil {
		return err
	}
	a := &attack{st: st, tr: tr, raw: raw, rep: attackReport{PerMember: map[string]*perMember{}}, random: *random, within: *within}
	var end <-chan struct{} = stop
	if *lasting > 0 {
		timeUp := make(chan struct{})
		t := time.AfterFunc(*lasting, func() { close(timeUp) })
		defer t.Stop()
		end = anyOf(stop, timeUp)
	}
	a.run(end)
	a.rep.Learned, a.rep.View = map[string]string{}, st.view.String()
	for ad, m := range st.members {
		a.rep.Learned[ad.String()] = m.String()
	}
	b, err := json.Marshal(a.rep)
	if err != nil {
		return err
	}
	return os.WriteFile(*out, b, 0o644)
}

// anyOf returns a channel closed when a or b is.
func anyOf(a, b <-chan struct{}) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		select {
		case <-a:
		case <-b:
		}
		close(c)
	}()
	return c
}

// sniff reads the group's multicast until stop: who sends from where, the
// view id, the data.
func (st *attackerState) sniff(tr transport.Transport, stop <-chan struct{}) {
	n := tr.BatchSize()
	bufs, sizes, srcs := make([][]byte, n), make([]int, n), make([]netip.AddrPort, n)
	for i := range bufs {
		bufs[i] = make([]byte, 65536)
	}
	for {
		select {
		case <-stop:
			return
		default:
		}
		_ = tr.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		k, _ := tr.ReadBatch(bufs, sizes, srcs)
		for i := range k {
			st.learn(bufs[i][:sizes[i]], srcs[i])
		}
	}
}

func (st *attackerState) learn(b []byte, src netip.AddrPort) {
	if len(b) < wire.HeaderLen || b[0] != wire.VersionMajor {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.group == 0 {
		st.group = binary.LittleEndian.Uint32(b[4:])
	}
	h, body, err := wire.DecodeHeader(b, st.group)
	if err != nil || !NetnsSubnet.Contains(src.Addr()) {
		return
	}
	st.members[src] = h.Sender
	switch h.Type {
	case wire.TypeData:
		if h.Repair() {
			break
		}
		st.sender = h.Sender
		st.capture[st.capN%len(st.capture)] = append(st.capture[st.capN%len(st.capture)][:0], b...)
		st.capN++
		if d, err := wire.DecodeData(h, body); err == nil { // an encrypted body does not decode
			st.highest = max(st.highest, d.Last())
		}
	case wire.TypeXmitReq:
		if x, err := wire.DecodeXmitReq(h, body); err == nil {
			st.view = x.View
		}
	case wire.TypeStability:
		if x, err := wire.DecodeStability(h, body); err == nil {
			st.view = x.View
		}
	}
}

// waitLearned waits until want members, the sender and the view are known.
func (st *attackerState) waitLearned(want int, stop <-chan struct{}) error {
	for {
		st.mu.Lock()
		ok := len(st.members) >= want && !st.sender.IsZero() && st.capN > 0
		st.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-stop:
			return errors.New("attacker: stopped before it learned the group")
		case <-time.After(10 * time.Millisecond): // polling what the sniffer learned
		}
	}
}

// attack is one attacker's sending side.
type attack struct {
	st     *attackerState
	tr     transport.Transport
	raw    int
	rep    attackReport
	random uint64        // garbage datagrams to send at least,
	within time.Duration // evenly over this long
	buf    []byte
	bufs   [][]byte
	dsts   []netip.AddrPort
	kinds  []func(*perMember) // what each queued datagram counts as, per destination
}

// snapshot returns what the attacker knows now.
func (st *attackerState) snapshot() (group uint32, view digest.ViewID, members map[netip.AddrPort]digest.Member, sender digest.Member, hi uint64, capture [][]byte) {
	st.mu.Lock()
	defer st.mu.Unlock()
	members = make(map[netip.AddrPort]digest.Member, len(st.members))
	for a, m := range st.members {
		members[a] = m
	}
	for _, c := range st.capture[:min(st.capN, len(st.capture))] {
		capture = append(capture, append([]byte(nil), c...))
	}
	return st.group, st.view, members, st.sender, st.highest, capture
}

// run attacks in rounds until stop (and at least until -random garbage
// datagrams went out), the garbage spread evenly over -within.
func (a *attack) run(stop <-chan struct{}) {
	a.buf = make([]byte, 4096)
	start := time.Now()
	for round := 0; ; round++ {
		select {
		case <-stop:
			if a.rep.Random >= a.random {
				a.flush()
				return
			}
		default:
		}
		group, view, members, sender, hi, capture := a.st.snapshot()
		for addr, victim := range members {
			a.claims(group, view, members, sender, hi, addr, victim, capture)
			a.spoof(group, view, members, sender, hi, addr, victim, capture)
		}
		due := uint64(float64(a.random) * min(1, float64(time.Since(start))/float64(a.within)))
		n := 64 // a trickle once the target is reached
		if due > a.rep.Random {
			n = int(min(due-a.rep.Random, 4096))
		}
		a.garbage(group, members, n)
		a.flush()
		time.Sleep(time.Millisecond) // pacing: the members must keep up with the flood, not synchronisation
	}
}

func (a *attack) pm(addr netip.AddrPort) *perMember {
	p := a.rep.PerMember[addr.String()]
	if p == nil {
		p = &perMember{}
		a.rep.PerMember[addr.String()] = p
	}
	return p
}

// queue adds a datagram from the attacker's own address to dst, counted as
// count says once it is sent.
func (a *attack) queue(dst netip.AddrPort, b []byte, count func(*perMember)) {
	a.bufs = append(a.bufs, append([]byte(nil), b...))
	a.dsts = append(a.dsts, dst)
	a.kinds = append(a.kinds, count)
	if len(a.bufs) >= 64 {
		a.flush()
	}
}

func (a *attack) flush() {
	if len(a.bufs) == 0 {
		return
	}
	n, _ := a.tr.WriteBatch(a.bufs, a.dsts)
	for i := range n {
		a.kinds[i](a.pm(a.dsts[i]))
		a.rep.Sent++
	}
	a.bufs, a.dsts, a.kinds = a.bufs[:0], a.dsts[:0], a.kinds[:0]
}

// forged returns one of every control datagram that could steer a member,
// claiming sender, aimed at victim, about the data of origin up to hi.
func forged(buf []byte, group uint32, view digest.ViewID, sender, victim, origin digest.Member, hi uint64) [][]byte {
	var out [][]byte
	add := func(b []byte, err error) {
		if err == nil {
			out = append(out, append([]byte(nil), b...))
		}
	}
	h := wire.Header{Group: group, Sender: sender}
	es := wire.EntrySlice{{Member: origin, Low: hi, Delivered: hi, Received: hi}, {Member: victim, Low: hi, Delivered: hi, Received: hi}}
	add(wire.EncodeMsgNotFound(buf, h, view, victim, wire.Range{From: 1, To: hi}, hi, hi, es))
	add(wire.EncodeStability(buf, h, view, es))
	add(wire.EncodeStable(buf, h, view, es))
	add(wire.EncodeHighest(buf, h, wire.Highest{View: view, Low: hi, Highest: hi + 1<<20}))
	add(wire.EncodeXmitReq(buf, h, view, origin, 0, []wire.Range{{From: 1, To: hi}}))
	add(wire.EncodeChallenge(buf, h, wire.TypeEcho, view, sender, rand.Uint64(), wire.ChallengeNotFound, wire.RangeSlice{{From: 1, To: hi}}))
	var w wire.DataWriter
	if w.Reset(buf, h, origin, hi+1) == nil && w.Append([]byte("forged")) {
		out = append(out, append([]byte(nil), w.Finish()...))
	}
	return out
}

// claims sends victim (at addr), from the attacker's own address, the
// forged set claiming every member, the captured data, and the forged set
// under random ids.
func (a *attack) claims(group uint32, view digest.ViewID, members map[netip.AddrPort]digest.Member, sender digest.Member, hi uint64,
	addr netip.AddrPort, victim digest.Member, capture [][]byte) {
	for _, claimed := range members {
		for _, d := range forged(a.buf, group, view, claimed, victim, sender, max(hi, 1)) {
			a.queue(addr, d, func(p *perMember) { p.Forged++ })
		}
	}
	for range 2 {
		r := digest.Member{ID: rand.Uint64() | 1, Inc: 1}
		for _, d := range forged(a.buf, group, view, r, victim, sender, max(hi, 1)) {
			a.queue(addr, d, func(p *perMember) { p.Stranger++ })
		}
	}
	for _, d := range capture[:min(2, len(capture))] {
		a.queue(addr, d, func(p *perMember) { p.Replayed++ })
	}
}

// spoof sends, through the raw socket, what only a spoofed source address
// gets past the engine: MSG_NOT_FOUND and replayed data with the sender's
// address (to a receiver), XMIT_REQ for the whole window with the
// victim's address (to the sender).
func (a *attack) spoof(group uint32, view digest.ViewID, members map[netip.AddrPort]digest.Member, sender digest.Member, hi uint64,
	addr netip.AddrPort, victim digest.Member, capture [][]byte) {
	var senderAddr netip.AddrPort
	for ad, m := range members {
		if m == sender {
			senderAddr = ad
		}
	}
	if !senderAddr.IsValid() {
		return
	}
	hi = max(hi, 1)
	if victim == sender {
		return
	}
	es := wire.EntrySlice{{Member: sender, Low: hi, Delivered: hi, Received: hi}}
	if b, err := wire.EncodeMsgNotFound(a.buf, wire.Header{Group: group, Sender: sender}, view, victim,
		wire.Range{From: 1, To: hi}, hi, hi, es); err == nil && a.rawSend(senderAddr, addr, b) {
		a.pm(addr).SpoofedMNF++
	}
	if len(capture) > 0 && a.rawSend(senderAddr, addr, capture[rand.IntN(len(capture))]) {
		a.pm(addr).SpoofedData++
	}
	if b, err := wire.EncodeXmitReq(a.buf, wire.Header{Group: group, Sender: victim}, view, sender, 0,
		[]wire.Range{{From: 1, To: hi}}); err == nil && a.rawSend(addr, senderAddr, b) {
		a.pm(senderAddr).SpoofedXmit++
	}
}

// rawSend sends payload in a UDP datagram from src to dst, both inside the
// namespaces' subnet, through the raw socket (IP_HDRINCL): the source
// address is whatever the attacker says.
func (a *attack) rawSend(src, dst netip.AddrPort, payload []byte) bool {
	if !NetnsSubnet.Contains(src.Addr()) || !NetnsSubnet.Contains(dst.Addr()) {
		return false // never anything outside the namespaces
	}
	pkt := make([]byte, 28+len(payload))
	pkt[0], pkt[8], pkt[9] = 0x45, 64, unix.IPPROTO_UDP // version 4, header 20 bytes; TTL; protocol
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(pkt[12:], s4[:])
	copy(pkt[16:], d4[:])
	binary.BigEndian.PutUint16(pkt[20:], src.Port())
	binary.BigEndian.PutUint16(pkt[22:], dst.Port())
	binary.BigEndian.PutUint16(pkt[24:], uint16(8+len(payload))) // checksum 0: none (IPv4)
	copy(pkt[28:], payload)
	if unix.Sendto(a.raw, pkt, 0, &unix.SockaddrInet4{Addr: d4}) != nil {
		return false
	}
	a.rep.Spoofed++
	return true
}

// garbage sends n garbage datagrams, round robin to the members: random
// bytes with a wrong version, a heartbeat of another group, a header of an
// unknown type.
func (a *attack) garbage(group uint32, members map[netip.AddrPort]digest.Member, n int) {
	var dsts []netip.AddrPort
	for ad := range members {
		dsts = append(dsts, ad)
	}
	if len(dsts) == 0 {
		return
	}
	b := make([]byte, 200)
	for i := range n {
		dst := dsts[i%len(dsts)]
		k := b[:24+rand.IntN(len(b)-24)]
		for j := range k {
			k[j] = byte(rand.Uint32())
		}
		count := func(p *perMember) { p.Malformed++; a.rep.Random++ }
		switch (i / len(dsts)) % 3 {
		case 0:
			k[0] = 2 + byte(rand.IntN(254)) // not major 1
		case 1:
			hb, err := wire.EncodeHeartbeat(a.buf, wire.Header{Group: group ^ 0x5a5a, Sender: digest.Member{ID: rand.Uint64() | 1}}, wire.Heartbeat{})
			if err != nil {
				continue
			}
			k = hb
			count = func(p *perMember) { p.ForeignGroup++; a.rep.Random++ }
		case 2:
			k[0], k[1], k[2] = wire.VersionMajor, wire.VersionMinor, 11+byte(rand.IntN(5)) // unknown type 11..15
			binary.LittleEndian.PutUint32(k[4:], group)
		}
		a.queue(dst, k, count)
	}
}
