// Package bench is the benchmark harness: the raw baselines that every
// nakcast figure is compared with in the same run (a bare batched UDP
// multicast bundler and a raw UDP ping-pong), and later the member process
// that cmd/mcastbench drives.
//
// The raw baselines use the engine's transport (engine/transport: sendmmsg
// and recvmmsg on preallocated headers) with no protocol at all: no
// sequencing beyond a datagram counter, no reliability, no flow control. They
// measure what the machine and the socket path allow, so the engine's ratio
// to them is meaningful. bench must not hold protocol logic or be imported
// by the engine.
package bench
