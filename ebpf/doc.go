// Package ebpf is nakcast's optional kernel-bypass transport: an XDP
// program that steers the group's datagrams into AF_XDP sockets, and XDP,
// a backend of engine/transport.Transport over the sockets' rings, which
// the engine uses in place of the UDP backend when Config.Transport is
// "xdp" (or "auto" and Probe finds nothing missing). The UDP backend is
// the default, and this package is never required: on a host, kernel or
// interface without AF_XDP, Open and Probe return an error wrapping
// ErrUnavailable that names what is missing.
//
// The XDP program is written with github.com/cilium/ebpf/asm, in Go, and
// built at Open for the group it serves (its address and port are
// immediates): some thirty instructions need no clang at build time, no
// generated object to commit and keep in step, and no map lookups per
// frame. It redirects the group's UDP frames into an XSKMAP keyed by the
// receive queue and passes every other frame to the stack untouched
// (bpf_redirect_map falls back to XDP_PASS for a queue without a
// socket). It attaches through a bpf_link (link.AttachXDP), natively
// where the driver has a hook and generically otherwise; the link's only
// holder is the process, so Close detaches the program and so does the
// kernel when the process dies, SIGKILL included.
//
// The AF_XDP sockets are plain golang.org/x/sys/unix: one per receive
// queue, each with its own UMEM (receive frames for the fill and RX
// rings, send frames for the TX and completion rings), the four rings
// mapped with mmap and driven with the need-wakeup protocol; zero-copy
// where the driver binds it, else copy mode; busy polling (SO_BUSY_POLL,
// SO_PREFER_BUSY_POLL) on request, where the kernel takes it
// (Options.BusyPoll). XDP_STATISTICS and the
// backend's counters appear in transport.Stats.XDP (engine Stats.Socket).
// Frames are built and parsed here (frame.go): Ethernet to the group's
// MAC, IPv4 with its header checksum or IPv6, and UDP with its checksum.
// Unicast stays on an ordinary UDP socket, and an ordinary socket holds
// the group membership so that switches keep forwarding the group; see
// XDP for why.
//
// Veth, the interface of the namespace tests and benchmarks: veth has no
// zero-copy mode (the sockets bind in copy mode), and in copy mode a
// sendto moves at most 32 frames unless XDP_MAX_TX_SKB_BUDGET raises it
// (Linux 6.17+; the backend asks for its TX ring's size), so the writer
// kicks until the TX ring is empty. Native XDP on veth redirects into
// AF_XDP sockets with nothing set up on the peer: the requirement that
// the peer have an XDP program (or GRO) on, which makes veth run NAPI
// for it, concerns frames redirected or bounced (XDP_TX) to a veth
// device (ndo_xdp_xmit), which this program never does; AF_XDP's
// copy-mode send goes through the device's ordinary transmit path.
package ebpf
