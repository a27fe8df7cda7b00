// Package nakack owns the NAKACK protocol of nakcast: reliable, per-sender
// FIFO multicast repaired by negative acknowledgements.
//
// It is a single-goroutine state machine. It does no I/O, reads no wall clock
// and starts no goroutine: every entry point takes `now time.Duration` (time
// since an arbitrary epoch chosen by the driver), randomness comes from a
// generator seeded through Config, so a run is a pure function of its inputs
// (the simulator in sim/ relies on it). It must not hold membership rules
// (gms/ decides views, cuts and digests and tells nakack) nor touch sockets
// (engine/ does).
//
// # Driving a Protocol
//
//	p, err := nakack.New(cfg)                       // cfg.Self, cfg.Group, cfg.Pool, ...
//	p.InstallView(view, joinDigest, now)            // first view; zero digest for a brand-new group
//	seq, err := p.Send(payload, now)                // copies payload; ErrBackPressure before claiming a seqno
//	p.Flush(now)                                    // emit the open bundle (call when the send queue goes idle)
//	err = p.Receive(buf, now)                       // one datagram; nakack takes its own references
//	p.Tick(now)                                     // fire due timers (NAKs, STABLE, idle Highest, budgets)
//	next := p.NextDeadline()                        // when to call Tick next (NoDeadline if none)
//	n := p.Poll(handler, limit)                     // deliver up to limit messages (and lost-range events)
//	for _, o := range p.Outbox() { send(o.To, o.Buf); o.Buf.Release() }
//	p.ClearOutbox()
//
// Outgoing datagrams are collected in the outbox as (To, *wire.Buffer): To is
// the zero Member for multicast or the destination of a unicast. The outbox
// owns one reference to every buffer in it; that reference passes to the
// driver, which must Release each buffer once sent (or dropped) and then call
// ClearOutbox before the next entry point.
//
// # Sender side
//
// Send assigns the next seqno (from 1) and copies the payload into the open
// bundle, a pooled buffer of Config.MaxDatagram bytes; the bundle goes to the
// outbox when it is full or on Flush. Every own message is retained (a
// reference into the bundle buffer) until stability purges it, and delivered
// to self through Poll like anyone else's. Send itself only copies the
// payload and writes a slot: the open bundle's messages enter the own window
// as one run when it is flushed or at the next entry point that looks at the
// window (Poll, Receive, Tick, ForcePurge, CheckOverwrite, OverwriteDigest). Beyond SendLimit (the own
// retention window is full, or a member's receive window could not hold
// the message: see "Windows, capacity and late stability") Send returns
// ErrBackPressure before claiming a seqno. Messages larger
// than one bundle are split into fragments, each with its own seqno, all
// claimed in one step.
//
// Beyond SendLimit, Send and SendBatch apply flow control and a rate limit
// on the protocol's clock (flow.go): with Config.InFlightBytes, at most
// that many payload bytes of own messages are in flight above
// GroupReceived (what every member reported read), so a sender does not
// overrun its receivers' socket buffers; with Config.RateLimit, a token
// bucket paces the payload bytes. Either returns an error wrapping
// ErrBackPressure (ErrFlowControl, ErrRateLimit) and claims nothing; Held
// tells a driver why SendBatch took only a prefix. With
// Config.LagInterval the delivery backlog is measured (Backlog, Lagging:
// an application that stops consuming holds stability, so every sender,
// back), and Drained tells a closing member when everything it sent or
// received is stable, so that it can leave without taking anything from
// anybody (lag.go).
//
// Retransmission requests (XMIT_REQ, ranges) are served only for a member of
// the view (or a departed member whose window is still open); one from
// anyone else is dropped and counted (Drops.Stranger) and suppresses
// nothing. Requests for own messages are answered by
// multicast repair bundles (wire.FlagRepair) re-bundled as contiguous runs of
// what is held; a repeat request for seqnos repaired within
// Config.RepairLinger is ignored; repairs are limited to Config.RepairBudget
// messages per Config.RepairInterval, and per requester by its repair
// credit: over any interval, the repair datagrams sent in answer to
// requester r total at most Config.RepairRatio times the bytes of r's
// requests plus Config.RepairBurst (credit.go; the default ratio answers
// every range a request names with at least one maximum-size datagram), so
// a flood of requests, from a member or a stranger spoofing its address,
// buys a bounded amount of repair. What either limit holds back is counted
// and left to the requester's next round. A request at or below what the
// requester reports as delivered, or for own seqnos a STABILITY of the
// current view made stable (the request crossed its requester's STABLE:
// it has them), is stale (dropped, counted). For seqnos it no longer
// holds (at or
// below its low), and only as the original sender, a member answers
// MSG_NOT_FOUND carrying its low, highest sent and whole digest, to a
// request for its current view only: one for another view comes from a
// member that would ignore the answer, typically one that has left the view
// (a graceful leaver, or an excluded member that does not know it yet)
// whose delivered point stability no longer waits for (counted,
// Stats.NotFoundOtherView). Any member
// answers requests for a sender that has left the view from what it retains
// (Data.Origin names that sender) and never with MSG_NOT_FOUND; since every
// holder may answer, each waits a random delay over Config.RepairJitter and
// drops what another member's repair (seen on the network meanwhile)
// already covered (SRM-style suppression), so a large group sends about one
// copy per request rather than one per holder. An idle
// sender announces its highest seqno (wire Highest) so receivers learn of a
// lost tail.
//
// # Receiver side
//
// One window (ring.Window) per sender; a bundle is inserted as one run, each
// stored message a reference into the received wire.Buffer. The datagram is
// the unit of refcounting: a window takes one buffer reference per datagram
// it stores anything from and releases it when its low passes the highest
// seqno stored from it (nothing per message on insert or purge). Poll hands
// runs of whole messages to a BatchHandler's DeliverBatch in one call, or to
// Handler.Deliver one by one. Duplicates and already delivered seqnos are dropped and counted.
// Datagrams from senders that have no window yet are held in a small bounded
// queue until InstallView/SetDigest decides (then inserted or dropped,
// counted). Missing ranges, including a tail up to a highest seqno learned
// from Highest or MSG_NOT_FOUND, become XMIT_REQ ranges coalesced into as few
// datagrams as fit. Each sender window has one timer with two deadlines: gaps
// never requested yet are asked for after Config.NakDelay (reordering
// settles) plus a random backoff drawn over Config.NakJitter (truncated
// exponential, skewed late, so in a large group few receivers fire before
// the first request reaches the others). The jitter only serves
// suppression, so it scales with the view: none in a view of two (a lone
// receiver asks right after NakDelay), NakJitter*(n-2)/NakJitterPeers in a
// view of n members, all of it from NakJitterPeers other receivers on
// (default 2: from 4 members), growing beyond 16 receivers with
// ln(receivers)+1 so that the requests per loss stay about constant as
// the view grows; gaps already requested are retried
// with exponential backoff from Config.NakInterval up to
// Config.NakMaxInterval, restarted when the oldest gap is filled. The first
// retry interval and the sender's Config.RepairLinger (repeat requests it
// ignores) scale the same way, the interval down to a quarter: in a view of
// two a lost repair is asked for again after NakInterval/4, and the
// sender answers it, while it ignores a network copy of the request that
// comes within half that interval (the linger of a view of two). Requests
// are multicast unless Config.UnicastNaks; a member that sees another
// member's request covering its oldest or its first new gap backs off as if
// it had sent it (suppression); the arrival of the data cancels the request.
//
// # Windows, capacity and late stability
//
// A receive window holds seqnos in (low, low+RecvWindow] and its low moves
// only when this member purges, on STABILITY. A sender purges (and may send
// its next window) on the same STABILITY, and a member that gets it late,
// or loses it and purges on a later one, still holds the previous window.
// So a sender sends nothing beyond SendLimit: SendWindow above its own
// purge point and RecvWindow above the lowest Low the members reported
// (STABILITY carries it: every member's window for this sender starts at
// or above it), so that a member that purged late never discards data for
// want of room. RecvWindow is taken to be the same at every member; the
// default, 2x SendWindow, makes that bound wait only for a member that
// missed two STABILITYs in a row (with RecvWindow == SendWindow it waits
// for every member's report after each purge). A member whose window is
// smaller than the sender assumes (configs differ), or a forced purge, can
// still bring data beyond low+RecvWindow: it is dropped (Stats.Drops.Full)
// but its highest seqno is remembered, and the window's gaps are requested
// only up to low+RecvWindow. Every purge that raises a window's low
// (STABILITY, ForcePurge, a skip by OverwriteDigest) re-checks its gaps, so
// what was dropped is requested one reorder delay after the purge; until
// then the NAK timer stays armed as a safety net and looks again with
// backoff up to NakMaxInterval. A HIGHEST that announces nothing new also
// re-arms a window with a known gap and no timer. Lost ranges obey the same
// limit: a MSG_NOT_FOUND or merge digest whose Low lies beyond
// low+RecvWindow marks what fits at once and the rest as purges make room;
// a lost run that reaches the window's capacity is consumed by the window
// silently and kept as one pending event, reported once its end is known
// (below). A departed
// sender's window is no longer purged by STABILITY (it is closed after its
// cut); its cut carries a stable point instead, what every survivor that
// reported a window had delivered, and PurgeCut purges up to it. A lost
// run of a departed sender that reaches the window's capacity goes on
// through the ranges its cut declared lost beyond it, and the window then
// moves on past them (releasing only seqnos it does not hold and held
// ones at or below the stable point), so a survivor whose window of that
// sender is full still reaches the cut. A run its cut declared lost right
// after a window that is full of delivered messages the stable point
// keeps (a survivor that was behind when the cut was fixed) is reported
// all the same: the window cannot move, but the application has consumed
// the stream up to the cut (Consumed), which completes the cut there. A
// digest captured for a state transfer and the point a closed window is
// remembered at count such runs as consumed (nothing the application was
// told is delivered or reported again), and a pending event as not
// consumed (nothing it was not told is skipped). A survivor that
// received less of a departed sender than another by more than its
// RecvWindow above the stable point, with seqnos beyond its window that
// another survivor holds (one that was ahead, or a joiner whose window
// started higher), cannot take them at first: it may not purge what it
// holds above the stable point, since a survivor further behind may still
// need it. CutBlocked says so (received up to the capacity, below the
// cut); gms then reports the survivor's delivered point to the
// coordinator, which raises the cut's stable point once every survivor
// delivered past it, and PurgeCut makes the room.
//
// MSG_NOT_FOUND from the original sender for the current view marks what the
// sender purged (the seqnos above our delivered, at or below its low, that we
// do not hold) as lost; Poll delivers in order every held message and reports
// each lost run once through Handler.Lost; nothing at or below the sender's
// low is requested again. A lost run is one event whatever the member's
// window and whenever its pieces became known, so that members that lose
// the same seqnos report the same ranges: Poll reports it once the seqno
// after it is held (or the run reaches the highest seqno known), not
// while a gap that may still turn out lost follows it (a later
// MSG_NOT_FOUND of a sender that purged more). A run that reaches the
// window's capacity cannot be decided there (nothing beyond the capacity
// can be held): the window consumes it silently, so that its delivered
// point (what STABLE reports) moves and stability makes room, and it stays
// one pending event that goes on over what is found lost right after it
// as purges make room (marks up to the purge point known, or a later
// MSG_NOT_FOUND or merge digest), reported once its end is decided as
// above. So if the sender's purge point becomes known in steps (ForcePurge
// twice while we ask; a partition that heals and splits again, each merge
// digest or MSG_NOT_FOUND naming a later point), the member that learned
// the first point reports the same range as one that learned only the
// second. The range a merge reports lost before a window's start (what
// the other side purged) is such a pending event too. While an event is
// pending, the application has not consumed it: Consumed, a captured
// digest and a closed window's point stand before it, and CutPending
// holds a departed sender's cut back until it is reported. The
// run takes in every fragmented message it makes undeliverable, with the
// fragments of it this member holds, and the lost runs right after such
// a message (lostChain): a member that holds a fragment of a lost message
// reports the same range as one that holds none (168 lost, 169 held,
// 170..225 lost, 168..169 one message, is reported as 168..225, not as
// 168..169 then 170..225). A held first fragment of a message
// whose fate is still open (a fragment missing, none marked lost) holds
// a live sender's report back as a gap does. Once a view drops the
// sender, the marks its MSG_NOT_FOUND (or a merge digest) left that Poll
// has not reported are cleared: those seqnos are missing again, this
// member's report to the coordinator shows them, and the cut declares
// lost only what no survivor holds, so a member told of a loss it had not
// reported yet ends with the same record of the sender as a survivor that
// delivered those seqnos. So are the seqnos a pending event made the
// window consume, as far as the window still retains them (its low has
// not passed them): the window goes back to the seqno before the event.
// What lies at or below its low stays the start of the event (every
// member's window passed it), which the cut then ends. A MSG_NOT_FOUND is logged
// once at WARN (Config.Logger) with our window, the sender's digest and
// our digest history. One from anyone else,
// for another view, for another requester, or that would move nothing, is
// ignored and counted. Unless Config.Authenticated (the driver verifies
// every datagram's tag), it is the one message acted on only once its
// sender confirmed it: a CHALLENGE with a fresh random nonce and the range
// (our delivered, its low] goes to the sender by unicast; the sender echoes
// it only if it holds none of those seqnos, and the range is marked on the
// echo (challenge.go: one challenge per sender, resent and given up on the
// clock; the semantics above are unchanged, one round trip later).
//
// # Stability
//
// Members send STABLE (their delivered digest, view-tagged) to the
// coordinator (first member of the view) every Config.StableInterval and after
// Config.StableBytes of data received, or released: a datagram that fills a
// gap counts again the messages it releases for delivery, and a STABLE made
// due waits (at most StableInterval/8) until what the member holds
// contiguously of that sender is delivered, so it reports what a repair
// released rather than the point before it: a sender whose window filled
// during the gap gets its credit one STABLE trip after the repair, not at
// the next StableInterval. The coordinator folds each into a
// per-round minimum and, once every member of the view reported, multicasts
// STABILITY; members purge only on STABILITY from their current view's
// coordinator, and a sender that some member's digest lacks is never purged.
// A member schedules its next STABLE one StableInterval after each
// STABILITY (less a random spread of at most an eighth of it and
// NakInterval/2), so a round's reports arrive together. A lost STABLE does
// not stall the round: one chase delay (NakInterval plus that spread)
// after the round's first report, the coordinator asks every member the
// round still lacks for its STABLE
// (a unicast STABILITY with wire.FlagReport repeating the last one), again
// after the same delay while answers come in and with a doubling one up to
// StableInterval while none do (Stats.StableChased); and a report whose Low
// lies below the last STABILITY's stable point shows that its member missed
// that STABILITY, which the coordinator repeats to it at once (unicast).
// STABILITY also carries, per sender, the minimum Low the members reported
// (SendLimit, above) and the minimum over the view of what the
// members received (highest seqno read, gaps or not): GroupReceived returns
// it for the own messages (at least the own Low, reset to Low by a new
// view), the point a sender's flow control measures its bytes in flight
// from. Unlike the stable point it does not wait for repairs.
// While a digest capture (CaptureDigest) is held, the member advertises the
// captured delivered values instead of its live ones; a merge capture
// (CaptureMergeDigest) holds at the captured Low values instead, since the
// other partition fetches everything above them.
//
// The delivered point a member reports for a sender, in STABLE and in the
// digests it hands out (Digest, CaptureDigest for joins and state
// transfers, MSG_NOT_FOUND), is the end of the last whole message it
// delivered or reported lost, never a point inside a message it will
// still deliver. A window's own delivered point (WindowState, the cut
// reports) counts the fragments a reassembly under way has consumed;
// while one is active the reported point stays at the seqno before the
// message's first fragment. (Fragments the window consumes without
// delivering, those of a message reported lost or begun before the join
// point, count as consumed.) Stability, the minimum of the reported
// points, so keeps every fragment of a message, at every member and in
// the sender's own window (its own fragmented messages are delivered to
// it through the same reassembly), until every member has delivered the
// message whole; and a digest never ends inside a message its holder will
// still deliver. The reported point is O(1) to compute, never exceeds the
// window's point and only goes back when the window does (an
// OverwriteDigest rewind).
//
// # Digests and views
//
// Digest returns the live digest (Low, Delivered, Received per member with
// a window; Delivered the reported point, see Stability). SetDigest (join)
// creates windows only for unknown senders, starting at the digest's
// delivered; MergeDigest (merge) raises windows that are
// behind, never our own, reporting as lost what the holder purged;
// OverwriteDigest (state transfer, seed 003) keeps the own send seqno and sets
// every window, own included, to the digest's delivered: re-delivering what is
// retained above it, skipping what is below. OverwriteDigest is atomic:
// CheckOverwrite tells beforehand whether it can be applied (ErrNotRetained
// when a window would have to re-deliver what it no longer retains), and on
// that error it changes nothing. Each is recorded in the digest History with
// its reason.
//
// InstallView gives new members windows (from the join digest or at 0 for a
// brand-new joiner; never at 0 when a join digest lacks the member); a sender
// that left keeps its window in a departed state until gms fixes the cut:
// HighestReceived and Gaps (what the coordinator needs to pick the cut and
// the ranges no survivor holds), CompleteCut (fetch what is missing up to
// the cut from peers), DeclareLost (report what no survivor holds) and
// CloseWindow, which remembers the delivered point. CompleteCut and
// CloseWindow refuse a member of the view (ErrLive). The fix of a cut is
// CompleteCut followed by DeclareLost for each lost range, with no Receive
// in between (gms NakackProtocol does so).
//
// So that every survivor ends with the same prefix, a departed sender's
// window refuses (Stats.Drops.Departed, never delivered) what could differ
// between survivors: until the cut is fixed, every datagram the departed
// sender itself sent (one delayed in the network, or a falsely suspected
// sender still running), since this member's report to the coordinator
// (taken after the view that dropped the sender) must remain all it will
// ever hold of that sender but what peers repair from their own reports;
// once the cut is fixed, whoever sent it, anything beyond the cut and
// anything marked lost (declared lost by the cut, or reported lost
// before), whether Poll already reported it or not. Otherwise a datagram
// that reached one survivor after its report and before the fix would be
// delivered there while the others report it lost. Peers' repairs below the
// cut that are not lost are accepted at any time, and the sender's own data
// again after the fix (a graceful leaver answers retransmissions until its
// cut closes).
//
// A cut (the highest seqno any survivor received) may end inside a
// fragmented message: its first fragments at or below the cut, its last
// beyond it. That message can never be delivered, and it is not skipped
// silently: once the window's delivered point reaches the cut, Poll
// reports it lost with Handler.Lost as the range from its first fragment
// to the cut, exactly: [first fragment, cut] (or from earlier, when a lost
// run that reaches into the message began before it: the one range
// covers both). Nothing beyond the cut is ever reported (a lost run
// widened to the end of a fragmented message stops at the cut), so if a
// merge later brings the sender back, its window resumes at the cut and
// the message's fragments above it are reported lost from cut+1, never
// again below. Every survivor reports the same ranges: after the fix
// every seqno up to the cut is, at every survivor, held or declared lost
// (what one survivor lacks it fetches from the others), so the fragments
// up to the cut are the same everywhere; and Poll consumes a lost run of
// a departed sender only once everything up to the cut is held or marked
// lost, so how far the run widens over held fragments does not depend on
// when a repair arrives. CutPending tells gms that such a report is still
// to come although delivered reached the cut: a survivor acknowledges the
// cut only after it, since CloseWindow drops what Poll has not reported.
// When the cut falls on a message's last fragment the message is complete
// and delivered. This is done here rather than by rounding the cut down
// to the message's first fragment in gms: the coordinator only sees
// seqnos (each survivor's delivered, received and gaps), so rounding
// would need each survivor to report fragment boundaries (a wire change
// to CUT_REPORT), while every survivor's window already holds the same
// fragments up to the cut and reaches the same decision with no extra
// message; and a rounded cut would still have to report the fragments a
// survivor received below it.
//
// A joiner given the coordinator's digest starts at the end of a whole
// message: if the coordinator was reassembling a fragmented message, the
// joiner starts before it and delivers it whole, like the coordinator. A
// digest can still end inside a fragmented message whose holder's window
// passes through it without delivering it: the holder itself joined with a
// digest inside it, or reported it lost (a lost run widened to the
// message's last fragment) and is consuming its remaining fragments. A
// joiner given such a digest was not a member when that message began for
// the holder either, and is not owed it (as in JGroups, a joiner delivers
// from its digest on): Poll drops the message's fragments above the join
// point silently, reports nothing lost for them and goes on with the
// sender's next message; nothing at or below the join point is ever
// requested. A gap above the join point is requested like any other (the
// window cannot tell it belongs to that message before it holds a later
// fragment of it); a lost run (declared at a cut, or from a merge) that a
// held fragment after it shows to lie inside the message is skipped with
// it, one it cannot attribute is reported as usual. The decision depends
// only on the digest's delivered value and the fragments' headers, so
// every joiner given the same digest delivers and reports the same. It
// applies only to windows a join digest created (InstallView's join
// digest, SetDigest); elsewhere (an existing member's window, one a merge
// or OverwriteDigest created) a fragment whose message's start was never
// consumed still has that whole message reported lost, from its first
// fragment. OverwriteDigest ends the rule for every window it sets: the
// installed state, not the join, then decides what the member is owed.
//
// A state transfer is consistent across fragmented messages. The
// provider's digest, captured with its application state, stops before a
// message it is reassembling: its state lacks that message and it
// delivers the message after the state. The requester is set to the same
// point and delivers the message whole too: it still retains the
// fragments, or fetches them (nobody purged them, since the provider
// reports that point), so both applications get the message exactly once.
// A requester that cannot go back to that point (its window starts above
// it, as a joiner whose join point lies past the message) gets
// ErrNotRetained from CheckOverwrite and takes the state from another
// provider. A state digest that ends inside a fragmented message comes
// from a holder that never delivers it, whose state lacks it for good: the
// requester never delivers it or a part of it either, wherever its window
// stood (behind the message, reassembling it, at the digest's point or
// not, or past it); it reports the message lost, whole and once, and goes
// on with the next one: from its first fragment to its last when its next
// fragment arrives, or to the cut if its sender departs and the cut falls
// at the digest's point (reassembly.orphan). Only if the requester holds
// no fragment of that message can it not tell that the digest ends
// inside one, and a cut at that point then leaves it unreported.
//
// InstallMergeView installs a merge view and its digest in one step
// (design.md, "Merges"): a member of the other partition whose window was
// closed after a cut resumes at the remembered delivered point; what lies
// between that point and the holder's Low (digest entry) is reported lost
// once, before anything else of that sender (a pending event, which goes
// on over what turns out lost right after it), and the rest up to the
// digest's Received is fetched. Nothing is skipped silently, and no window
// is ever created at 0 for a member that has purged. A sender never seen
// (no window and none closed: this member never shared a view with it)
// starts at the holder's Low, as a joiner's window at its join digest:
// what it sent before is a history this member took no part in, and
// reporting it would give members that met the sender at different times
// different boundaries for the same seqnos (one met it in an earlier merge
// and reported up to the Low of then, and the rest later, where another
// reports it in one range). The closed points kept are bounded (closedMax):
// a member that closed more windows since than that takes one it forgot
// for never seen. A member that missed the merge view and installs the next,
// regular, view resumes the windows it closed at their closed points too
// (it learns what the other side purged from MSG_NOT_FOUND instead of the
// merge digest). A sender still departed (cut not closed) that is back in the
// view is live again and keeps its window; what its cut declared lost and
// Poll has not reported yet is fetched from it instead (it is alive and
// holds it), since the cut is dropped with its declarations (dropCut).
// A survivor that reported up to the cut before the sender came back
// ended its lost event there (a declared range or a lost fragmented
// message reaching the cut); one that had not, if the cut it fixed ends
// such an event (as far as its window tells), still ends a lost event
// that spans the cut at the cut, so that both report the same ranges
// when what follows the cut turns out lost too (the sender purged it).
//
// ForcePurge purges a window regardless of stability: it exists for tests
// and operators only (it is how seeds 000-002 reach MSG_NOT_FOUND).
package nakack
