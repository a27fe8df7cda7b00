package ebpf

import (
	"encoding/binary"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Attachment is an XDP program attached to an interface, as the kernel
// reports it in its link dump (RTM_GETLINK, IFLA_XDP).
type Attachment struct {
	Interface string
	Index     int
	// ProgramID is the attached program's id; Mode is "native",
	// "generic", "offload" or "multi" (several modes at once).
	ProgramID uint32
	Mode      string
}

// AttachedPrograms lists the interfaces of the calling thread's network
// namespace that have an XDP program attached, through netlink (no
// bpftool needed). A member that closed, or whose process died, leaves
// none: its program hangs on a bpf_link that only its process holds.
func AttachedPrograms() ([]Attachment, error) {
	b, err := syscall.NetlinkRIB(unix.RTM_GETLINK, unix.AF_UNSPEC)
	if err != nil {
		return nil, fmt.Errorf("ebpf: link dump: %w", os.NewSyscallError("netlink", err))
	}
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return nil, fmt.Errorf("ebpf: link dump: %w", err)
	}
	var out []Attachment
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWLINK || len(m.Data) < unix.SizeofIfInfomsg {
			continue
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(&m)
		if err != nil {
			return nil, fmt.Errorf("ebpf: link dump: %w", err)
		}
		a := Attachment{Index: int(int32(binary.NativeEndian.Uint32(m.Data[4:8])))}
		var xdp []byte
		for _, at := range attrs {
			switch at.Attr.Type {
			case unix.IFLA_IFNAME:
				a.Interface = cString(at.Value)
			case unix.IFLA_XDP:
				xdp = at.Value
			}
		}
		if a.parseXDP(xdp) {
			out = append(out, a)
		}
	}
	return out, nil
}

// parseXDP reads the nested IFLA_XDP attributes: whether a program is
// attached, in which mode, and its id.
func (a *Attachment) parseXDP(b []byte) bool {
	attached := false
	for len(b) >= unix.SizeofRtAttr {
		l := int(binary.NativeEndian.Uint16(b))
		t := binary.NativeEndian.Uint16(b[2:])
		if l < unix.SizeofRtAttr || l > len(b) {
			break
		}
		v := b[unix.SizeofRtAttr:l]
		switch {
		case t == unix.IFLA_XDP_ATTACHED && len(v) >= 1:
			attached = v[0] != 0
			a.Mode = [...]string{"", "native", "generic", "offload", "multi"}[min(int(v[0]), 4)]
		case t == unix.IFLA_XDP_PROG_ID && len(v) >= 4:
			a.ProgramID = binary.NativeEndian.Uint32(v)
		}
		b = b[min((l+unix.RTA_ALIGNTO-1)&^(unix.RTA_ALIGNTO-1), len(b)):]
	}
	return attached
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
