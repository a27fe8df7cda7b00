// Package ebpf is where nakcast's optional kernel-bypass transport will live:
// an XDP program that steers the group's datagrams into an AF_XDP socket, and
// a backend that implements engine/transport.Transport (ReadBatch,
// TryReadBatch, WriteBatch) over the socket's rings, so the engine can use it
// in place of the UDP backend.
//
// It is not implemented yet. engine.Config.Transport "xdp" is refused with
// that reason, and "auto" resolves to "udp". The UDP backend is the default,
// and this package must never be required.
package ebpf
