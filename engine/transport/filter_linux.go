package transport

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// SetGroupFilter implements GroupFilterSetter: it replaces the group
// socket's kernel filter by prog (Config.GroupFilter's rules), or removes it
// when prog is empty. SO_ATTACH_FILTER swaps the program atomically: every
// datagram queued after the call was judged by prog, every one before by
// the old program (datagrams already queued stay). A SendOnly transport has
// no group socket: nothing to filter, it returns nil. Safe from any
// goroutine; it allocates (call it at human rates, e.g. on a new
// incarnation).
func (u *UDP) SetGroupFilter(prog []bpf.RawInstruction) error {
	if u.closed.Load() {
		return ErrClosed
	}
	if u.gfile == nil {
		return nil
	}
	if len(prog) == 0 {
		var serr error
		if err := u.graw.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DETACH_FILTER, 0)
		}); err != nil {
			return u.closedErr(err)
		}
		if serr != nil && !errors.Is(serr, unix.ENOENT) { // ENOENT: no filter attached
			return fmt.Errorf("transport: SO_DETACH_FILTER on the group socket: %w", os.NewSyscallError("setsockopt", serr))
		}
		return nil
	}
	return u.closedErr(u.attachFilter(prog))
}

// attachFilter attaches prog to the group socket (SO_ATTACH_FILTER).
func (u *UDP) attachFilter(prog []bpf.RawInstruction) error {
	filter := make([]unix.SockFilter, len(prog))
	for i, ins := range prog {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := onSocket(u.graw, func(s int) error {
		return os.NewSyscallError("setsockopt", unix.SetsockoptSockFprog(s, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog))
	}); err != nil {
		return fmt.Errorf("transport: SO_ATTACH_FILTER on the group socket: %w", err)
	}
	return nil
}
