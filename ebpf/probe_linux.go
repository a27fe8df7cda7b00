package ebpf

import (
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nakcast/nakcast/engine/transport"
)

// configure validates cfg and works out what Open needs from the
// interface: an up Ethernet interface whose MTU fits a frame, a TTL that
// leaves the host (TTL 0 means "this host only", which a frame put on the
// wire cannot honour), and the unicast address, which must be the
// interface's own: it is the source of every group frame.
func (t *XDP) configure(cfg Config) error {
	o, err := cfg.Options.withDefaults()
	if err != nil {
		return err
	}
	cfg.Options = o
	if cfg.Interface == "" {
		cfg.Interface = transport.DefaultInterface
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = transport.DefaultBatchSize
	}
	if cfg.TTL < 1 {
		return unavailable("TTL %d keeps multicast on this host; AF_XDP puts every frame on the wire: set a TTL of 1 or more", cfg.TTL)
	}
	ifi, err := checkInterface(cfg.Interface)
	if err != nil {
		return err
	}
	if !cfg.Unicast.IsValid() {
		// The interface's own address (see unicastOn), not the
		// transport's loopback default.
		cfg.Unicast = netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
		if cfg.Group.Addr().Is6() {
			cfg.Unicast = netip.AddrPortFrom(netip.IPv6Unspecified(), 0)
		}
	}
	if err := cfg.Config.Validate(); err != nil {
		return err
	}
	if cfg.Group.Port() == 0 {
		return fmt.Errorf("%w: Group %v: the AF_XDP backend needs the group's port", transport.ErrInvalidConfig, cfg.Group)
	}
	local, err := unicastOn(ifi, cfg.Unicast)
	if err != nil {
		return err
	}
	t.cfg, t.ifname, t.group, t.local = cfg, ifi.Name, cfg.Group, local
	t.frameMax = ifi.MTU + ethLen
	t.maxLen = ifi.MTU - (hdrLen4 - ethLen)
	if !cfg.Group.Addr().Is4() {
		t.maxLen = ifi.MTU - (hdrLen6 - ethLen)
		if local.Addr().IsLinkLocalUnicast() {
			t.zone = ifi.Name
		}
	}
	return nil
}

// maxFrame is the largest frame a 4 KB UMEM frame takes in copy mode:
// the kernel keeps XDP_PACKET_HEADROOM (256 bytes) in front of it.
const maxFrame = 4096 - 256

// frameSizeFor is the UMEM frame size for an MTU: 2 KB where the frame
// fits, else 4 KB (a page, the most an aligned UMEM allows).
func frameSizeFor(mtu int) int {
	if mtu+ethLen <= 2048-256 {
		return 2048
	}
	return 4096
}

// checkInterface names why ifname cannot carry AF_XDP traffic, if it
// cannot.
func checkInterface(ifname string) (*net.Interface, error) {
	ifi, err := net.InterfaceByName(ifname)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: Interface %q: %v", transport.ErrInvalidConfig, ifname, err)
	case ifi.Flags&net.FlagLoopback != 0:
		return nil, unavailable("interface %s is a loopback interface: AF_XDP needs an Ethernet interface", ifname)
	case len(ifi.HardwareAddr) != 6:
		return nil, unavailable("interface %s is not an Ethernet interface (hardware address %q)", ifname, ifi.HardwareAddr)
	case ifi.Flags&net.FlagUp == 0:
		return nil, unavailable("interface %s is down", ifname)
	case ifi.MTU+ethLen > maxFrame:
		return nil, unavailable("interface %s has MTU %d: AF_XDP frames here hold at most MTU %d (no multi-buffer)", ifname, ifi.MTU, maxFrame-ethLen)
	}
	return ifi, nil
}

// unicastOn returns the unicast address to use on ifi: want if it is one
// of ifi's addresses (its port kept), the first address of want's family
// if want's address is unspecified, an error otherwise.
func unicastOn(ifi *net.Interface, want netip.AddrPort) (netip.AddrPort, error) {
	addrs, err := ifi.Addrs()
	if err != nil {
		return want, fmt.Errorf("ebpf: addresses of %s: %w", ifi.Name, err)
	}
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		addr := p.Addr()
		if addr == want.Addr().WithZone("") || (want.Addr().IsUnspecified() && addr.Is4() == want.Addr().Is4()) {
			if addr.IsLinkLocalUnicast() && addr.Is6() {
				addr = addr.WithZone(ifi.Name)
			}
			return netip.AddrPortFrom(addr, want.Port()), nil
		}
	}
	return want, unavailable("unicast address %v is not an address of interface %s: it is the source of every frame sent, so it must be the interface's", want.Addr(), ifi.Name)
}

// ethtoolChannels is struct ethtool_channels.
type ethtoolChannels struct {
	cmd                                       uint32
	maxRx, maxTx, maxOther, maxCombined       uint32
	rxCount, txCount, otherCount, combinedCnt uint32
}

// ethtoolInfo is what ethtool says of ifname: the number of receive
// queues (ETHTOOL_GCHANNELS: the combined queues and the receive-only
// ones; 1 when the driver does not say) and the driver's name (empty when
// it does not say).
func ethtoolInfo(ifname string) (queues int, driver string) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 1, ""
	}
	defer unix.Close(fd)
	if d, err := unix.IoctlGetEthtoolDrvinfo(fd, ifname); err == nil {
		driver = cString(d.Driver[:])
	}
	ch := ethtoolChannels{cmd: unix.ETHTOOL_GCHANNELS}
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data uintptr
		_    [16]byte
	}
	copy(ifr.name[:], ifname)
	ifr.data = uintptr(unsafe.Pointer(&ch))
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); e != 0 {
		return 1, driver
	}
	return max(int(ch.rxCount+ch.combinedCnt), 1), driver
}

// Probe reports whether AF_XDP can run on cfg's interface with cfg's
// settings, without attaching anything: an error wrapping ErrUnavailable
// names what is missing (privileges, kernel support for XDP, XSKMAP, BPF
// links or AF_XDP sockets, an interface that is not Ethernet, is down,
// has too large an MTU or already has an XDP program, a TTL of 0, a
// unicast address that is not the interface's). Open can still fail
// where only attaching tells (a driver without any XDP hook).
func Probe(cfg Config) error {
	var t XDP
	if err := t.configure(cfg); err != nil {
		return err
	}
	att, err := AttachedPrograms()
	if err != nil {
		return unavailable("listing XDP programs: %v", err)
	}
	for _, a := range att {
		if a.Interface == t.ifname {
			return unavailable("interface %s already has an XDP program (id %d, %s): one AF_XDP member per interface", a.Interface, a.ProgramID, a.Mode)
		}
	}
	m, err := newXSKMap(1)
	if err != nil {
		return mapError(err)
	}
	defer m.Close()
	p, err := newProgram(t.group, t.frameMax, m)
	if err != nil {
		return mapError(err)
	}
	p.Close()
	fd, err := xdpSocket()
	if err != nil {
		return err
	}
	unix.Close(fd)
	return nil
}
