// Package engine is nakcast's runtime and public API: it opens a member of a
// multicast group over a batched transport (engine/transport), runs the
// NAKACK protocol (nakack/) on one agent goroutine, and gives the
// application Send/TrySend/TryClaim, push (Config.Handler) or pull (Poll)
// delivery, events and statistics.
//
// The package owns goroutines, sockets (through engine/transport), timers,
// buffer pools, logging and metrics. It must not hold protocol rules: what
// to send, when to repair, what is stable or lost is decided by nakack/ (and
// membership by gms/, once it lands); the engine only drives them with
// datagrams, messages and a clock.
//
// # Guarantee
//
// Every member delivers every message of every sender exactly once, in that
// sender's order (per-sender FIFO), through the Handler or Poll; a range of
// a sender's messages that can never be delivered (the sender purged them
// before this member got them: a crash, a partition, a forced purge) is
// reported once as a lost range, never skipped silently. There is no total
// order across senders and no virtual synchrony.
//
// # Membership (static, until gms lands)
//
// Config.Members lists the view, the same on every member, coordinator
// first; every member keeps every message until all of them delivered it,
// so members may start in any order and a late one repairs what it missed.
// A member that never starts holds up stability: senders back-pressure
// once their retention window (Config.Window) is full.
//
// # Runtime
//
// Publishing goroutines copy messages into a lock-free multi-producer ring
// (ring.Publication; small payloads in a fixed arena, large ones in pooled
// buffers: no allocation per message). One agent goroutine (Aeron's shared
// mode) reads datagrams in batches (recvmmsg) into pooled, refcounted
// buffers, hands them to the protocol, hands the ring's messages to the
// protocol's bundler, flushes the open bundle as soon as the ring is empty
// (a lone message is never held back unless Config.BundleDelay asks),
// fires the protocol's timers at its next deadline, delivers in push mode,
// and writes the protocol's outbox in batches (sendmmsg). The agent holds
// the protocol lock for one iteration's protocol work, never during a
// system call; Poll holds it for one batch of deliveries.
//
// # Pull mode without deadlock
//
// Delivery frees the room senders need (stability waits for every member
// to deliver), so a goroutine that polls must never block in Send: loop on
// TrySend and Poll, polling whenever TrySend reports ErrBackPressure (see
// Member.Poll and the example).
package engine
