package engine

import (
	"github.com/nakcast/nakcast/ebpf"
	"github.com/nakcast/nakcast/engine/transport"
)

// openTransport opens the backend cfg.Transport selects, with the
// member's self filter, and sets cfg.Transport to the one opened: "auto"
// tries AF_XDP and falls back to UDP, logging why once.
func openTransport(cfg *Config) (transport.Transport, transport.Info, error) {
	tc := transport.Config{
		Group:            cfg.Group,
		Interface:        cfg.Interface,
		Unicast:          cfg.Unicast,
		TTL:              cfg.TTL,
		RecvBuffer:       cfg.RecvBuffer,
		SendBuffer:       cfg.SendBuffer,
		BatchSize:        cfg.BatchSize,
		AllowNonLoopback: cfg.AllowNonLoopback,
		NoLoopback:       cfg.NoLoopback,
		NoGSO:            cfg.NoGSO,
		GRO:              !cfg.NoGSO && cfg.MaxDatagram <= transport.GROMaxDatagram,
		GroupFilter:      selfFilter(cfg.Self),
	}
	if cfg.Transport == TransportXDP || cfg.Transport == TransportAuto {
		x, err := ebpf.Open(ebpf.Config{Config: tc, Options: cfg.XDP})
		if err == nil {
			cfg.Transport = TransportXDP
			return x, x.Info(), nil
		}
		if cfg.Transport == TransportXDP {
			return nil, transport.Info{}, err
		}
		cfg.Logger.Info("AF_XDP transport not used: falling back to UDP", "reason", err.Error())
		cfg.Transport = TransportUDP
	}
	u, err := transport.Open(tc)
	if err != nil {
		return nil, transport.Info{}, err
	}
	return u, u.Info(), nil
}
