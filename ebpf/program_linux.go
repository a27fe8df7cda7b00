package ebpf

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// XDP return codes.
const (
	xdpPass = 2
)

// xdp_md field offsets.
const (
	mdData         = 0
	mdDataEnd      = 4
	mdRxQueueIndex = 16
)

// le16 and le32 are the values a little-endian load of the big-endian
// (network order) bytes of v gives: what the program compares loaded
// header fields with, so that it never swaps bytes.
func le16(v uint16) int32 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return int32(binary.LittleEndian.Uint16(b[:]))
}

func le32(b []byte) int32 { return int32(binary.LittleEndian.Uint32(b)) }

// programInstructions is the XDP program that steers group's datagrams
// into the AF_XDP socket of the receive queue they arrived on (the XSKMAP
// whose descriptor is xsks, keyed by queue) and passes every other frame
// to the stack untouched: anything that is not an untagged Ethernet frame
// of at most maxFrame bytes carrying IPv4 or IPv6 UDP to group's address
// and port. An IPv4 datagram with options is matched too (variable
// header length). The stack gets what the sockets could not take whole:
// IPv4 fragments, which it reassembles, and frames longer than the MTU
// allows, which only a segmentation offload's run forwarded whole makes
// (a generic hook sees a veth peer's UDP GSO run as one buffer); the
// backend's group socket receives them. A queue without a socket in the
// map passes too (bpf_redirect_map's fallback).
//
// Written with cilium/ebpf's assembler: the program is some thirty
// instructions that depend on the group, so building it at run time
// costs nothing, needs no clang, and leaves no generated object to keep
// in step with the code.
func programInstructions(group netip.AddrPort, maxFrame int, xsks int) asm.Instructions {
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R1, mdData, asm.Word),
		asm.LoadMem(asm.R3, asm.R1, mdDataEnd, asm.Word),
		// Longer than a frame of this link can be: the stack's.
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, int32(maxFrame)),
		asm.JGT.Reg(asm.R3, asm.R4, "pass"),
	}
	if g := group.Addr(); g.Is4() {
		insns = append(insns, ipv4Match(g.As4())...)
	} else {
		insns = append(insns, ipv6Match(g.As16())...)
	}
	return append(insns,
		asm.LoadMem(asm.R5, asm.R4, ethLen+2, asm.Half), // the UDP header at R4+ethLen
		asm.JNE.Imm(asm.R5, le16(group.Port()), "pass"),
		asm.LoadMapPtr(asm.R1, xsks),
		asm.LoadMem(asm.R2, asm.R6, mdRxQueueIndex, asm.Word),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return(),
	)
}

// passUnless is a load of size at R2+off compared with v: unequal passes.
func passUnless(off int16, size asm.Size, v int32) asm.Instructions {
	return asm.Instructions{asm.LoadMem(asm.R5, asm.R2, off, size), asm.JNE.Imm32(asm.R5, v, "pass")}
}

// ipv4Match passes any frame but an unfragmented IPv4 UDP datagram to
// group and leaves R4 so that the UDP header is at R4+ethLen (after IHL*4
// bytes of IPv4 header; R2 is the frame, R3 its end).
func ipv4Match(group [4]byte) asm.Instructions {
	insns := asm.Instructions{
		// The shortest frame of interest: Ethernet, IPv4, UDP.
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, hdrLen4),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
	}
	insns = append(insns, passUnless(12, asm.Half, le16(etherTypeIPv4))...)
	insns = append(insns, passUnless(ethLen+9, asm.Byte, protoUDP)...)
	insns = append(insns, passUnless(ethLen+16, asm.Word, le32(group[:]))...)
	return append(insns,
		// A fragment (more fragments, or an offset): the stack's.
		asm.LoadMem(asm.R5, asm.R2, ethLen+6, asm.Half),
		asm.And.Imm(asm.R5, le16(0x3fff)),
		asm.JNE.Imm(asm.R5, 0, "pass"),
		asm.LoadMem(asm.R5, asm.R2, ethLen, asm.Byte),
		asm.And.Imm(asm.R5, 0x0f),
		asm.LSh.Imm(asm.R5, 2),
		asm.JLT.Imm(asm.R5, ipv4Len, "pass"),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Reg(asm.R4, asm.R5),
		asm.Mov.Reg(asm.R7, asm.R4),
		asm.Add.Imm(asm.R7, ethLen+udpLen),
		asm.JGT.Reg(asm.R7, asm.R3, "pass"),
	)
}

// ipv6Match passes any frame but an IPv6 UDP datagram (no extension
// headers) to group and leaves R4 so that the UDP header is at R4+ethLen.
func ipv6Match(group [16]byte) asm.Instructions {
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, hdrLen6),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
	}
	insns = append(insns, passUnless(12, asm.Half, le16(etherTypeIPv6))...)
	insns = append(insns, passUnless(ethLen+6, asm.Byte, protoUDP)...)
	for i := 0; i < 16; i += 4 {
		insns = append(insns, passUnless(int16(ethLen+24+i), asm.Word, le32(group[i:i+4]))...)
	}
	return append(insns,
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, ipv6Len),
	)
}

// newXSKMap returns an XSKMAP with one slot per receive queue.
func newXSKMap(queues int) (*cebpf.Map, error) {
	m, err := cebpf.NewMap(&cebpf.MapSpec{
		Name: "nakcast_xsks", Type: cebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(queues),
	})
	if err != nil {
		return nil, fmt.Errorf("XSKMAP: %w", err)
	}
	return m, nil
}

// newProgram loads the XDP program for group over the XSKMAP xsks, for
// frames of at most maxFrame bytes.
func newProgram(group netip.AddrPort, maxFrame int, xsks *cebpf.Map) (*cebpf.Program, error) {
	p, err := cebpf.NewProgram(&cebpf.ProgramSpec{
		Name:         "nakcast_xdp",
		Type:         cebpf.XDP,
		Instructions: programInstructions(group, maxFrame, xsks.FD()),
		License:      "Dual MIT/GPL",
	})
	if err != nil {
		return nil, fmt.Errorf("XDP program: %w", err)
	}
	return p, nil
}
