package engine

import (
	"encoding/binary"

	"golang.org/x/net/bpf"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine/transport"
	"github.com/nakcast/nakcast/wire"
)

// selfFilter is the group socket's kernel filter: it drops this member's
// own protocol datagrams (nakack's types, DATA through HIGHEST, and the
// CHALLENGE and ECHO of the routing table's group probe), which
// multicast loopback (needed by the other members on the host) hands back
// to the sender. Without it the sender's agent reads every datagram it sent
// a second time, a 64 KB copy and part of a system call each, only for the
// protocol to drop it (nakack drops every datagram whose sender is itself:
// Drops.Self), and its group socket's buffer fills with them while it is
// busy sending. Own control datagrams (an idle sender's HIGHEST, the
// coordinator's STABILITY, multicast XMIT_REQs) go the same way: the
// protocol never uses them either. Membership and state-transfer datagrams
// (gms's types) and anything else still pass.
//
// Offsets count from the UDP header (8 bytes); the wire header's type is at
// payload offset 2 and the sender (ID uint64, Inc uint32, little-endian) at
// payload offset 8. Classic BPF loads words big-endian, so each word is
// compared byte-swapped.
func selfFilter(self digest.Member) []bpf.RawInstruction {
	const udp = 8
	var id [12]byte
	binary.LittleEndian.PutUint64(id[0:], self.ID)
	binary.LittleEndian.PutUint32(id[8:], self.Inc)
	w := func(i int) uint32 { return binary.BigEndian.Uint32(id[4*i:]) }
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: udp + 2, Size: 1},                                           // 0: type
		bpf.JumpIf{Cond: bpf.JumpLessThan, Val: uint32(wire.TypeData), SkipTrue: 9},       // 1: -> keep
		bpf.JumpIf{Cond: bpf.JumpLessOrEqual, Val: uint32(wire.TypeHighest), SkipTrue: 2}, // 2: -> 5
		bpf.JumpIf{Cond: bpf.JumpLessThan, Val: uint32(wire.TypeChallenge), SkipTrue: 7},  // 3: -> keep
		bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: uint32(wire.TypeEcho), SkipTrue: 6},    // 4: -> keep
		bpf.LoadAbsolute{Off: udp + 8, Size: 4},                                           // 5: ID low word
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: w(0), SkipTrue: 4},                        // 6: -> keep
		bpf.LoadAbsolute{Off: udp + 12, Size: 4},                                          // 7: ID high word
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: w(1), SkipTrue: 2},                        // 8: -> keep
		bpf.LoadAbsolute{Off: udp + 16, Size: 4},                                          // 9: Inc
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: w(2), SkipTrue: 1},                           // 10: -> drop
		bpf.RetConstant{Val: 0xffffffff},                                                  // 11: keep, whole
		bpf.RetConstant{Val: 0},                                                           // 12: drop
	})
	if err != nil {
		panic(err) // a fixed program: cannot fail
	}
	return prog
}

// followSelfFilter replaces the group socket's filter by self's when the
// member starts a new incarnation (newProtocol): the filter installed by
// Open names Config.Self, while gms picks a new incarnation for every join
// attempt and after an exclusion, and the protocol's datagrams carry it.
// One setsockopt per incarnation, under the lock. If the transport cannot
// replace its filter, the member still works: it reads its own data
// datagrams back and the protocol drops them (Drops.Self).
func (m *Member) followSelfFilter(self digest.Member) {
	fs, ok := m.tr.(transport.GroupFilterSetter)
	if !ok {
		return
	}
	if err := fs.SetGroupFilter(selfFilter(self)); err != nil {
		m.log.l.Warn("self filter not replaced: own data datagrams will be read back", "self", self.String(), "err", err)
	}
}
