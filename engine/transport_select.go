package engine

import (
	"github.com/nakcast/nakcast/ebpf"
	"github.com/nakcast/nakcast/engine/transport"
)

// openTransport opens the transport cfg selects, with the member's self
// filter: TransportConfig.Open when set, else the backend Backend names
// ("auto" tries AF_XDP and falls back to UDP, logging why once, and sets
// Backend to the one opened); TransportConfig.Wrap then wraps it.
func openTransport(cfg *settings) (transport.Transport, transport.Info, error) {
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
	tr, err := openBackend(cfg, tc)
	if err != nil {
		return nil, transport.Info{}, err
	}
	if cfg.Wrap != nil {
		tr = cfg.Wrap(tr)
	}
	var info transport.Info
	if i, ok := tr.(interface{ Info() transport.Info }); ok {
		info = i.Info()
	}
	return tr, info, nil
}

// openBackend opens TransportConfig.Open's transport or Backend's.
func openBackend(cfg *settings, tc transport.Config) (transport.Transport, error) {
	if cfg.Open != nil {
		return cfg.Open(tc)
	}
	if cfg.Backend == TransportXDP || cfg.Backend == TransportAuto {
		x, err := ebpf.Open(ebpf.Config{Config: tc, Options: cfg.XDP})
		if err == nil {
			cfg.Backend = TransportXDP
			return x, nil
		}
		if cfg.Backend == TransportXDP {
			return nil, err
		}
		cfg.Logger.Info("AF_XDP transport not used: falling back to UDP", "reason", err.Error())
		cfg.Backend = TransportUDP
	}
	u, err := transport.Open(tc)
	if err != nil {
		return nil, err // not a nil *UDP in an interface
	}
	return u, nil
}
