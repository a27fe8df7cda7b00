package ebpf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/nakcast/nakcast/engine/transport"
)

// XDP is the AF_XDP backend of transport.Transport on Linux.
//
// The group's datagrams bypass the socket stack both ways. An XDP
// program on the interface redirects every frame to the group's address
// and port into the AF_XDP socket of the receive queue it arrived on (one
// socket per queue, each with a UMEM of its own); the reader takes frames
// from the RX rings, checks and copies their payload into the caller's
// buffers and hands the frames back through the fill rings, all in
// shared memory, without a system call while frames keep coming. The
// writer builds each group datagram's Ethernet, IP and UDP headers into a
// UMEM frame and puts it on the first socket's TX ring; one sendto sends
// the batch.
//
// Unicast stays on ordinary sockets: a UDP transport (transport.UDP)
// sends and receives it, so the backend sends no frame to a unicast
// address and needs no neighbour resolution, and the XDP program matches
// one destination only; unicast carries only membership and repair
// requests. The unicast socket's address and port are the source of the
// group frames too, so a receiver answers a group datagram by unicast as
// it does over UDP. The UDP transport's group socket holds the group
// membership (IGMP, MLD), so switches keep forwarding the group here, and
// receives what the XDP program leaves to the stack (IPv4 fragments, a
// segmentation offload's run forwarded whole); it is read with the
// unicast socket.
//
// Limits: a frame sent here is not looped back to this host (members on
// one host need network namespaces of their own, or the UDP backend); one
// AF_XDP member per interface (one XDP program); datagrams up to the MTU,
// which must fit a 4 KB frame (no fragmentation, no multi-buffer). The
// XDP program hangs on a bpf_link held only by this process: Close
// detaches it, and so does the kernel when the process dies, however it
// dies.
type XDP struct {
	cfg      Config
	ifname   string
	group    netip.AddrPort
	local    netip.AddrPort
	info     transport.Info
	mode     string
	maxLen   int // largest datagram payload
	frameMax int // largest frame: the MTU and the Ethernet header
	zone     string

	uni    *transport.UDP
	uniEp  int // uni's epoll set, which says when its sockets have something
	xsks   *cebpf.Map
	prog   *cebpf.Program
	lnk    link.Link
	socks  []*xsk
	ep     *os.File // epoll set of the AF_XDP sockets and uni's epoll set
	epraw  syscall.RawConn
	tmpl   frameTemplate
	filter atomic.Pointer[bpf.VM]

	closed atomic.Bool
	// active counts the calls that use the rings: Close waits for them
	// before it unmaps.
	active atomic.Int32
	ctr    xdpCounters
	rd     xdpReader
	wr     xdpWriter
}

// xdpCounters are the backend's own counters.
type xdpCounters struct {
	malformed, foreign, filtered, truncated atomic.Uint64
	kicks, txWaits                          atomic.Uint64
}

// xdpReader is the read side's state; only the reading goroutine uses it.
type xdpReader struct {
	bufs      [][]byte
	sizes     []int
	srcs      []netip.AddrPort
	max, n    int
	next      int // the socket read first
	calls     uint
	socketsAt time.Time // the last read of the UDP transport's sockets
	events    [1]unix.EpollEvent
	err       error
	boundPoll func(uintptr) bool
}

// xdpWriter is the write side's state; only the writing goroutine uses it.
type xdpWriter struct {
	id uint16 // next IPv4 identification
}

var (
	_ transport.Transport         = (*XDP)(nil)
	_ transport.GroupFilterSetter = (*XDP)(nil)
)

// Open validates cfg, attaches the XDP program to cfg.Interface through a
// bpf_link, opens one AF_XDP socket per receive queue (zero-copy where the
// driver has it, else copy mode), the unicast socket, and joins the group.
// An error wrapping ErrUnavailable names what this host lacks; errors
// from validation wrap transport.ErrInvalidConfig.
func Open(cfg Config) (*XDP, error) {
	t := &XDP{}
	if err := t.configure(cfg); err != nil {
		return nil, err
	}
	if err := t.open(); err != nil {
		t.closeAll()
		return nil, err
	}
	t.rd.boundPoll = t.pollRead
	return t, nil
}

// open attaches the program, opens the sockets and joins, in that order:
// until a socket is in the map the program passes the group's frames to
// the stack, so nothing is lost or redirected to nobody.
func (t *XDP) open() error {
	ifi, err := net.InterfaceByName(t.ifname)
	if err != nil {
		return fmt.Errorf("%w: Interface %q: %v", transport.ErrInvalidConfig, t.ifname, err)
	}
	queues, driver := ethtoolInfo(t.ifname)
	if err := t.attach(ifi.Index, queues, driver); err != nil {
		return err
	}
	xc := xskConfig{ifindex: ifi.Index, frameSize: frameSizeFor(ifi.MTU), copyOnly: t.mode == ModeGeneric, o: t.cfg.Options}
	for q := range queues {
		xc.queue = q
		x, err := newXSK(xc)
		if err != nil {
			return err
		}
		t.socks = append(t.socks, x)
		if err := t.xsks.Put(uint32(q), uint32(x.fd)); err != nil {
			return fmt.Errorf("ebpf: XSKMAP entry for queue %d: %w", q, err)
		}
	}
	if err := t.openSockets(); err != nil {
		return err
	}
	tmpl, err := newFrameTemplate(ifi.HardwareAddr, t.local, t.group, t.cfg.TTL)
	if err != nil {
		return err
	}
	t.tmpl = tmpl
	if len(t.cfg.GroupFilter) > 0 {
		if err := t.setRingFilter(t.cfg.GroupFilter); err != nil {
			return err
		}
	}
	return t.openEpoll()
}

// attach loads the program and attaches it where Options.Mode says, or,
// by default, natively where the driver has a hook and generically where
// it has none; on veth natively only (see Options.Mode: a generic hook
// there takes a peer's UDP segmentation offload run for one datagram).
func (t *XDP) attach(ifindex, queues int, driver string) error {
	var err error
	if t.xsks, err = newXSKMap(queues); err != nil {
		return mapError(err)
	}
	if t.prog, err = newProgram(t.group, t.frameMax, t.xsks); err != nil {
		return mapError(err)
	}
	modes := []string{ModeNative, ModeGeneric}
	switch {
	case t.cfg.Mode != "":
		modes = []string{t.cfg.Mode}
	case driver == "veth":
		modes = []string{ModeNative}
	}
	var errs []error
	for _, m := range modes {
		flags := link.XDPDriverMode
		if m == ModeGeneric {
			flags = link.XDPGenericMode
		}
		t.lnk, err = link.AttachXDP(link.XDPOptions{Program: t.prog, Interface: ifindex, Flags: flags})
		if err == nil {
			t.mode = m
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", m, err))
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
			return unavailable("interface %s already has an XDP program (another AF_XDP member, or another tool): one AF_XDP member per interface", t.ifname)
		}
	}
	if errors.Is(err, cebpf.ErrNotSupported) {
		return unavailable("the kernel cannot attach XDP through a bpf_link (Linux 5.9 or later): %v", errors.Join(errs...))
	}
	return unavailable("attaching the XDP program to %s: %v", t.ifname, errors.Join(errs...))
}

// mapError names what a failed map or program load lacks.
func mapError(err error) error {
	switch {
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return unavailable("loading BPF maps and programs needs CAP_BPF and CAP_NET_ADMIN (run as root): %v", err)
	case errors.Is(err, cebpf.ErrNotSupported):
		return unavailable("the kernel lacks XDP or XSKMAP support: %v", err)
	}
	return unavailable("%v", err)
}

// openSockets opens the UDP transport beside the AF_XDP sockets: its
// unicast socket on the unicast address, its group socket (with the group
// filter) joined to the group. The group socket does not ask for UDP GRO:
// with it, a receive offload ahead of a generic XDP hook would merge the
// group's datagrams into runs the program takes for one.
func (t *XDP) openSockets() error {
	c := t.cfg.Config
	c.Unicast, c.SendOnly, c.GRO = t.local, false, false
	uni, err := transport.Open(c)
	if err != nil {
		return err
	}
	t.uni = uni
	t.local = uni.LocalAddr()
	t.info = uni.Info()
	t.info.MulticastLoop = false
	return nil
}

// openEpoll makes the epoll set of every AF_XDP socket and the UDP
// transport's own set, watched by Go's poller, on which ReadBatch blocks.
func (t *XDP) openEpoll() error {
	var fds []int
	for _, x := range t.socks {
		fds = append(fds, x.fd)
	}
	if err := t.uni.PollConn().Control(func(fd uintptr) { t.uniEp = int(fd) }); err != nil {
		return err
	}
	fds = append(fds, t.uniEp)
	var err error
	t.ep, t.epraw, err = transport.NewPollSet("xdp-epoll", fds...)
	return err
}

// enter marks a call that uses the rings; it fails once Close began.
func (t *XDP) enter() bool {
	t.active.Add(1)
	if t.closed.Load() {
		t.active.Add(-1)
		return false
	}
	return true
}

func (t *XDP) exit() { t.active.Add(-1) }

// SetReadDeadline implements transport.Transport.
func (t *XDP) SetReadDeadline(d time.Time) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	return t.ep.SetReadDeadline(d)
}

// LocalAddr implements transport.Transport: the unicast socket's address,
// also the source of the group frames.
func (t *XDP) LocalAddr() netip.AddrPort { return t.local }

// Group implements transport.Transport.
func (t *XDP) Group() netip.AddrPort { return t.group }

// BatchSize implements transport.Transport.
func (t *XDP) BatchSize() int { return t.cfg.BatchSize }

// Info describes the transport like the UDP backend's Info: the unicast
// socket's buffers; no group socket.
func (t *XDP) Info() transport.Info { return t.info }

// Mode is where the XDP program runs: ModeNative or ModeGeneric.
func (t *XDP) Mode() string { return t.mode }

// SetGroupFilter implements transport.GroupFilterSetter: prog, a classic
// BPF program over the UDP datagram (offsets from the UDP header, as
// SO_ATTACH_FILTER sees it on the UDP backend's group socket), runs on
// every group datagram read from the rings; one it returns 0 for is
// dropped and counted (Stats XDP.Filtered), a smaller length truncates
// it. The group socket gets it as its kernel filter. An empty prog
// removes the filter. It allocates: call it at human rates.
func (t *XDP) SetGroupFilter(prog []bpf.RawInstruction) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	if err := t.uni.SetGroupFilter(prog); err != nil {
		return err
	}
	return t.setRingFilter(prog)
}

// setRingFilter makes prog the filter of the datagrams read from the
// rings (nil when prog is empty).
func (t *XDP) setRingFilter(prog []bpf.RawInstruction) error {
	if len(prog) == 0 {
		t.filter.Store(nil)
		return nil
	}
	insns := make([]bpf.Instruction, len(prog))
	for i, r := range prog {
		insns[i] = r.Disassemble()
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		return fmt.Errorf("%w: GroupFilter: %v", transport.ErrInvalidConfig, err)
	}
	t.filter.Store(vm)
	return nil
}

// Close implements transport.Transport: it wakes a blocked ReadBatch,
// waits for the calls in progress to leave the rings, detaches the XDP
// program, and releases the sockets, maps and memory.
func (t *XDP) Close() error {
	if !t.closed.CompareAndSwap(false, true) {
		return transport.ErrClosed
	}
	var err error
	if t.ep != nil {
		err = t.ep.Close()
		t.ep = nil
	}
	for t.active.Load() != 0 {
		runtime.Gosched()
	}
	return errors.Join(err, t.closeAll())
}

// closeAll releases everything open, the program's link first.
func (t *XDP) closeAll() error {
	var errs []error
	if t.lnk != nil {
		errs = append(errs, t.lnk.Close())
	}
	if t.ep != nil {
		errs = append(errs, t.ep.Close())
	}
	for _, x := range t.socks {
		x.close()
	}
	t.socks = nil
	if t.xsks != nil {
		errs = append(errs, t.xsks.Close())
	}
	if t.prog != nil {
		errs = append(errs, t.prog.Close())
	}
	if t.uni != nil {
		if err := t.uni.Close(); !errors.Is(err, transport.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Stats returns the transport's counters: truncated reads and TX waits
// in the UDP backend's fields, the rest under XDP, with XDP_STATISTICS
// read from every socket. Safe from any goroutine.
func (t *XDP) Stats() transport.Stats {
	s := transport.Stats{Truncated: t.ctr.truncated.Load(), SendWaits: t.ctr.txWaits.Load()}
	x := &s.XDP
	x.Mode = t.mode
	x.Malformed, x.Foreign, x.Filtered = t.ctr.malformed.Load(), t.ctr.foreign.Load(), t.ctr.filtered.Load()
	x.TxKicks, x.TxWaits = t.ctr.kicks.Load(), t.ctr.txWaits.Load()
	if t.uni != nil {
		s.Truncated += t.uni.Stats().Truncated
	}
	if !t.enter() {
		return s
	}
	defer t.exit()
	x.Sockets = len(t.socks)
	for _, k := range t.socks {
		x.ZeroCopy, x.BusyPoll = k.zeroCopy, k.busyPoll
		st, err := k.statistics()
		if err != nil {
			continue
		}
		x.RxDropped += st.Rx_dropped
		x.RxInvalidDescs += st.Rx_invalid_descs
		x.TxInvalidDescs += st.Tx_invalid_descs
		x.RxRingFull += st.Rx_ring_full
		x.FillRingEmpty += st.Rx_fill_ring_empty_descs
		x.TxRingEmpty += st.Tx_ring_empty_descs
	}
	return s
}
