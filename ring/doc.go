// Package ring owns nakcast's seqno-indexed ring buffers: the data structure
// under both the sender's retransmission store and every per-sender receive
// window, the multi-producer publication ring of the send path, and the
// single-producer record ring of the delivery path.
//
// Three types:
//   - Window: a receive window and retransmission store indexed by seqno.
//     Out-of-order insert of single seqnos (Add) or whole runs (AddRun, one
//     datagram bundle), delivery of the contiguous prefix (Remove,
//     RemoveBatch) that keeps delivered entries retained until a Purge at a
//     stable seqno frees them, gap iteration as [from,to] ranges (NextGap,
//     AppendGaps), lookup of retained entries (Get, Has), lost ranges
//     (MarkLost, SkipLost), and moving delivered back (Rewind) or forward
//     (Skip). One producer and one consumer may run at once without locks.
//   - Publication: a multi-producer, single-consumer ring that hands out
//     consecutive seqnos (TryClaim), lets each producer publish its slots
//     (Commit) and lets one consumer read them in seqno order (Poll).
//   - Records: a single-producer, single-consumer ring of variable-length
//     byte records (Claim, Publish; Next, Release), each one contiguous
//     slice: the engine's delivery ring from its agent to Member.Poll.
//
// Capacities are powers of two fixed at creation: a full ring reports Full
// (Window) or refuses a claim (Publication, Records) instead of growing, which is
// nakcast's back-pressure. Hot paths allocate nothing.
//
// The package must not know about networks, encodings or protocols: what a
// seqno means, when it is stable or lost is decided by its callers (nakack/,
// engine/). It does no I/O and reads no clock.
package ring
