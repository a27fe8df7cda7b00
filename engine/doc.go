// Package engine is nakcast's runtime and public API: it opens a member of a
// multicast group over a batched transport (engine/transport), runs the
// NAKACK protocol (nakack/) on one agent goroutine (or a sender and a
// receiver goroutine, or the application's: Config.Agent.Threading), and gives the
// application Send/TrySend/TryClaim, push (Config.Handler) or pull (Poll)
// delivery, events and statistics.
//
// The package owns goroutines, sockets (through engine/transport), timers,
// buffer pools, logging and metrics. It must not hold protocol rules: what
// to send, when to repair, what is stable or lost is decided by nakack/,
// views, joins, failures and state transfer by gms/; the engine only drives
// them with datagrams, messages and a clock.
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
// # Membership
//
// By default (Config.Membership.Members nil) membership is dynamic, run by gms/: Open
// discovers the group (a multicast discovery request, or unicast to
// Config.Membership.InitialHosts), sends JOIN_REQ with a new incarnation per attempt
// and returns once the JoinRsp's view and digest are installed; a member
// that finds nobody founds the group and coordinates it. Optionally
// (Config.Membership.FetchState) it then fetches the application state from another
// member: Config.Membership.GetState on the provider and Config.Membership.SetState on the
// joiner, installed together with the digest captured at the same point
// (seed 003), so the state plus what the joiner delivers after it equals the
// provider's. Members multicast heartbeats; a member silent for
// Config.Membership.SuspectTimeout whose probes go unanswered is suspected
// (EventSuspect; EventUnsuspect if it is heard again and stays) and
// excluded (EventView); survivors complete its messages
// from each other up to one cut, so all end with the same prefix. Close
// drains what this member sent, then leaves gracefully (the others install
// a view without it at once). A member excluded by mistake (a stall longer
// than the suspicion timeout, a partition) reports EventLeft and rejoins as
// a new incarnation; partitions that heal are merged by gms. Each
// incarnation runs its own nakack protocol (its seqnos restart at 1).
//
// The agent routes membership datagrams (wire types 16..39, gms.IsMembership)
// to gms and the rest to the protocol, runs both state machines' timers,
// and sends gms's outbox (unicasts to the peer's unicast address, which is
// Member.LocalAddr). Before either sees a datagram, the agent checks it
// against its routing table (routes.go, admit.go): a datagram that claims
// a member must come from that member's address, which only views, the
// membership exchanges gms sends and the configuration set, never a
// received datagram; what comes from outside the view reaches gms only
// (discovery, joins, merges), and every refusal is counted by reason.
//
// Static membership (Config.Membership.Members set: benchmarks, fixed deployments)
// skips all of that: Config.Membership.Members lists the view, the same on every
// member, coordinator first; every member keeps every message until all of
// them delivered it, so members may start in any order and a late one
// repairs what it missed. A member that never starts holds up stability:
// senders back-pressure once their retention window (Config.Tuning.Window) is
// full.
//
// # Runtime
//
// Publishing goroutines hand messages to the agent through a lock-free
// log buffer (Aeron's, kept in datagrams): a small ring of terms, each one
// datagram's buffer, into which producers write their messages directly
// in the wire's layout (a length, then the payload) after the room for
// the DATA header. A producer claims space in the open term with one
// compare-and-swap on the term's packed state word (offset and message
// count; a plain store with Config.Agent.ExclusiveSender), writes its
// message in place and commits with an atomic add of its bytes to the
// term's committed count. A message that does not fit seals the term and
// moves to the next; when every term is in flight the claim fails
// (back-pressure: TrySend's ErrBackPressure, Send's wait). The agent takes
// a term once it is sealed and fully committed, and seals the open term
// itself when it has caught up with the producers (so a lone message goes
// out at its next iteration). A term at least a quarter full with only
// inline messages becomes the datagram as it is (nakack.SendDatagram: the
// protocol writes the header in place and retains the term's buffer until
// stable; the term gets a fresh pool buffer): the agent touches no
// message. Other terms go through nakack.SendBatch, which copies their
// messages into the bundle (fragments, flow control's partial takes and
// the rate limit take that path too). Payloads above
// Config.Tuning.InlineSize go out of line, into buffers from per-size free
// lists. Nothing is allocated per message.
//
// The agent runs the protocol in one duty cycle (Aeron's Agent.doWork;
// Member.DoWork runs one): receive, send, and timers and lifecycle as
// parts with one owner each. The threading modes are runners around it.
// By default one agent goroutine runs it (Aeron's shared mode: sender and
// receiver duties on one goroutine, often fastest on two cores). Each
// cycle it reads a batch of datagrams (recvmmsg) into pooled,
// refcounted buffers, hands each to the protocol (and, in push mode,
// delivers between datagrams so that STABLE digests report fresh delivered
// counts), hands the log buffer's terms to the protocol and flushes
// the open bundle as soon as the log buffer is empty (a lone message is never
// held back unless Config.Tuning.BundleDelay asks), fires the protocol's timers
// at its next deadline, and writes the protocol's outbox (sendmmsg) after
// releasing the lock. Idle, it blocks in recvmmsg with a read deadline at
// the next timer (IdleBlock, after yielding for 50us since its last work;
// producers wake it through a parked flag and a past deadline), yields
// (IdleYield) or spins (IdleSpin).
//
// A sender busy streaming its own messages reads its sockets at most every
// 20us after a read found them empty (an empty read is two system calls);
// an agent that is not sending reads every iteration.
//
// With Config.Agent.Threading = ThreadingDedicated the duties split: a sender
// goroutine drains the log buffer into the protocol and writes the datagrams; the
// receiver goroutine does the rest (reads, timers, push delivery, what
// they produce). They take the protocol lock in turn, one iteration each,
// and write through the transport in turn. Producers then wake the sender
// goroutine (a channel), and the receiver wakes it when the protocol had
// refused for lack of room and an iteration may have made some. On two
// cores shared mode is usually faster (measured: docs/performance.md).
//
// With Config.Agent.Threading = ThreadingInvoked no goroutine of the member runs
// between Open and Close: the application runs the shared mode's
// iteration itself by calling Member.DoWork in its own loop (Aeron's agent
// invoker), typically beside TrySend and Poll, with its own idle strategy
// (Member.WaitWork sleeps until the agent has work).
// A ping-pong then spins on one goroutine a side, as a raw UDP ping-pong
// does, instead of an agent and an application goroutine a side. Send,
// SendBatch, Receive and NextEvent run DoWork while they wait; Open (the
// join) and Close (the drain and leave) run the agent on a goroutine of
// their own. An iteration that finds the log buffer non-empty right
// after one that read sends first: the reply an application committed
// between two DoWork calls does not wait behind a read.
//
// The application and the agent meet without a lock: sends through the
// log buffer; deliveries in pull mode through a delivery ring
// (ring.Records: the agent delivers into it as far as it has room, at most
// an eighth of Config.Tuning.Window messages and 2 MiB ahead of the
// application, and Poll reads it, one goroutine at a time);
// Stats through atomic counters and a snapshot of the protocol's and
// membership's state, published on demand (by the agent at the end of
// the part that is running when Stats asks, or by Stats itself when a
// TryLock finds the agent idle); View through the view the agent
// publishes on each change;
// events through the event queue, which a poll of an empty queue reads
// without its lock. The protocol lock serialises the agent's own
// goroutines (ThreadingDedicated's sender and receiver, Open's join); the
// agent holds it for one iteration's protocol work, never during a system
// call.
//
// # Authentication
//
// With Config.Keys every datagram is sealed (engine/auth: an AES-GCM tag,
// Config.Encrypt also encrypts the body) in the write path, just before
// sendmmsg, and verified in the receive path right after its common header
// decodes: a datagram that fails (no trailer, unknown key, bad tag, replay)
// is dropped before the agent learns an address from it and before gms or
// nakack see it, and counted in Stats.Drops.Auth. security.go holds both
// points. Without keys (open mode, the default on loopback, Config.Insecure
// elsewhere) nothing is sealed and authenticated datagrams are dropped.
//
// # Flow control
//
// A sender may have at most Config.Tuning.Window messages that are not yet stable
// (delivered by every member: what it must retain for repairs) and
// Config.Tuning.InFlightBytes payload bytes beyond what every member has read
// from its socket (nakack.Protocol.GroupReceived, from the received counts
// of the STABLE reports that the coordinator's STABILITY carries back):
// the in-flight limit protects the receivers' socket buffers, and under
// loss it does not wait for repairs as stability does. Past either, the
// agent holds further messages in the log buffer, and Send waits (TrySend
// returns ErrBackPressure once the log buffer is full too). Stability rounds run
// every StableInterval and after StableBytes received (and, after a
// repair, as soon as what it released is delivered); the coordinator
// folds its own report every millisecond (locally, no datagram) so that a
// round ends as soon as the last member reports.
//
// # Pull mode without deadlock
//
// Delivery frees the room senders need (stability waits for every member
// to deliver), so a goroutine that polls must never block in Send: loop on
// TrySend and Poll, polling whenever TrySend reports ErrBackPressure (see
// Member.Poll and the example).
package engine
