// Package sim is nakcast's deterministic simulator. It exists so that the
// protocol state machines (nakack/, and gms/ over it: package sim/members)
// can be run many at a time on a virtual clock over a virtual network that drops,
// duplicates, reorders, delays and partitions datagrams, all decided by one
// seed: a run is a pure function of its seed and configuration, so a failing
// seed replays identically, event for event.
//
// # What it owns
//
//   - The virtual clock and the event queue (Sim): a binary heap ordered by
//     (virtual time, insertion sequence number), so events due at the same
//     instant run in the order they were scheduled and ties never depend on
//     map order or goroutine scheduling. Everything runs on the caller's
//     goroutine.
//   - The virtual network (NetConfig, Partition): unicast and multicast
//     datagrams between Nodes, with loss, duplication, jitter, extra
//     reordering and partitions drawn from a math/rand/v2 PCG seeded by the
//     run's seed.
//   - The Node interface the simulator drives (Receive, Tick, NextDeadline,
//     Drain) and an adapter running a *nakack.Protocol as a Node
//     (NakackNode), an application Recorder that checks per-sender FIFO
//     exactly-once delivery against the Ledger of what was sent, and traffic
//     generators (Traffic) that honour back-pressure by retrying later.
//     Whole members (gms over nakack) are Nodes of package sim/members,
//     which imports gms (gms's own tests import sim, so sim must not),
//     and the engine's members (the agent's duty cycle included) Nodes of
//     package sim/stepped;
//     Sim.Do, Crash, AddNode, Partition, Block (one-way outages) and
//     SetLink give them joins, crashes, partitions and delays.
//   - Group, a whole nakack group on one Sim with its end invariants
//     (RunToQuiescence: everything delivered or reported lost, rings
//     drained, no retransmission traffic once settled, no sender left
//     back-pressured, no MSG_NOT_FOUND or lost range in clean runs), and the
//     observers that decode the wire traffic: Meter (datagrams by type,
//     repairs) and LossTracker (requests per lost range, repairs per lost
//     message, drop-to-repair delay).
//
// # Delay model
//
// Every copy of a datagram (one per receiver of a multicast, one for a
// unicast) is delivered after
//
//	delay = Latency + U[0, Jitter) + (with probability Reorder) U[0, ReorderDelay)
//
// drawn independently per copy, where Latency and Jitter come from the link
// (NetConfig defaults, overridable per directed link with SetLink). Copies
// sent later can therefore overtake earlier ones whenever their delays differ
// by more than the send spacing: reordering arises from jitter, and Reorder
// adds rarer, larger displacements. Loss is drawn in two stages: SharedLoss
// once per datagram, as if dropped near the sender (no receiver gets it),
// then Loss independently per receiver copy. Bursty loss follows the
// Gilbert-Elliott model (GilbertElliott: a good and a bad state, each with
// its own drop probability, stepped per datagram): SharedBurst with one
// chain per sending node, near the sender, Burst with one chain per
// receiver, applied to each copy after Loss. With probability Duplicate a
// copy that survived loss is delivered a second time with its own delay. A
// Partition is checked when a datagram is sent: a copy whose sender and
// receiver are in different groups is dropped. Multicast is not looped back
// to the sender unless NetConfig.Loopback is set (nakack handles its own
// messages internally). Datagram bytes are copied once when sent, so a node
// may reuse its buffers as soon as Drain returns.
//
// # What it must not do
//
// It must not read the wall clock, start goroutines, use unseeded randomness
// or iterate maps where order matters: any of those would break replay. It
// holds no protocol rules: those belong to nakack/ and gms/, which the
// simulator only drives and observes.
package sim
