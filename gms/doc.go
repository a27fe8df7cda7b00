// Package gms owns group membership for nakcast: views, joins, leaves,
// failure detection, coordinator takeover, the cut of a departed sender's
// messages, merges after a partition heals, and the digests that go with all
// of them, plus application state transfer.
//
// Like nakack it is a single-goroutine state machine: it does no I/O, reads
// no wall clock and starts no goroutine. Every entry point takes `now
// time.Duration` (time since an arbitrary epoch chosen by the driver);
// randomness comes from Config.Seed. Outgoing datagrams are collected in an
// outbox (Outbox/ClearOutbox) that the driver sends: To is the zero Peer for
// a multicast to the group, otherwise a unicast to To.Addr. gms drives the
// reliable-multicast layer through the Protocol interface (implemented by
// nakack, or by a fake in tests) and never touches sockets (engine/ does).
//
// # The view/digest rule (seed 002)
//
// Whoever hands a member a digest together with a view (a JoinRsp, a merge
// view) builds it as a digest.MutableDigest over the new view's members with
// every entry unset, fills it from the protocol (a joiner's own entry is 0:
// its incarnation is new) and sends nothing while any entry is still unset:
// the coordinator retries a bounded number of times (Config.DigestRetries)
// and otherwise drops the join (the joiner retries). A joiner accepts a
// JoinRsp only if the view names it, the view is well formed and the digest
// covers exactly the view's members with its own entry at 0. A merge view
// leaves out members that no partition's digest covers: nobody is ever given
// a zero entry for a member it knows nothing about.
//
// # Joins
//
// A joiner discovers the coordinator (a multicast Discovery answered by
// members, or Config.InitialHosts for networks without multicast), sends
// JOIN_REQ with a new incarnation each time, and retries with exponential
// backoff until a valid JoinRsp arrives or Config.MaxJoinAttempts is spent
// (ErrJoinFailed). A JoinRsp for any incarnation of the current join attempt
// is accepted, so a lost JoinRsp does not cost a whole view change. A
// JOIN_REQ names the oldest incarnation the joiner still accepts a JoinRsp
// for: a retry that reaches the coordinator after the joiner got in with an
// earlier incarnation of the same join is ignored, not taken for a new
// incarnation replacing (excluding) the member that just joined. If
// nobody answers Config.DiscoveryRounds discovery rounds in a row and
// Config.CreateGroup is set, the member founds a singleton group (an answer
// slower than one round still arrives in a later one). Joiners started
// together hear each other's discovery requests: only the one with the
// smallest id founds, the others keep discovering and join it (a joiner
// that missed the others' requests founds too, and the groups merge).
//
// The coordinator handles one view change at a time and batches every queued
// join, leave and exclusion into it. For joins it captures the digest through
// Protocol.CaptureDigest (stability is then suspended group-wide at the
// captured point), multicasts the view to the existing members, sends the
// joiners their JoinRsp, resends both to members that have not acknowledged
// within Config.ViewAckTimeout, and releases the capture once every member of
// the new view has acknowledged. After Config.ViewChangeTimeout it gives up
// waiting: the capture is released and joiners that never acknowledged are
// excluded by the next view change (they retry with a new incarnation).
// A member that never acknowledged stays in its old view, still counted as
// a member and never suspected (it heartbeats), while nothing works for it
// (its STABLE names its old view, so stability stops group-wide; it
// ignores cut requests for members still in its view). Its heartbeats name
// that view: the coordinator answers each with its current view when it
// installed the member's view and only regular views since (what the lost
// multicast would have done), and otherwise (a merge view it missed, whose
// digest is gone, or a view it never installed) excludes it once its own
// view is older than ViewChangeTimeout and MergeTimeout; the member
// rejoins. Nothing is done while a view change or merge is under way (it
// resends its view itself).
//
// # Leaves, failures, cuts
//
// A graceful leave multicasts LEAVE with the leaver's highest seqno and its
// purge point (again every 2×ViewAckTimeout) and keeps answering
// retransmissions until LeaveRsp. The coordinator handles it; every other member remembers it,
// so that a member that takes over, before or after the view that drops
// the leaver, cuts it as a leaver (below) and sends its LeaveRsp. When
// the coordinator announced its leave, the first member of the view that
// is neither suspected nor leaving takes over and handles every leave it
// heard: a leaver coordinates nothing, so members that finish together
// (the coordinator and the next in line leaving within the same few
// milliseconds) would otherwise leave their leaves to nobody. A leaver
// whose every other member of its view has announced its leave too ends
// its leave at once (Left(nil), LEAVE sent once more): nobody will stay to
// cut it or need its messages. A member leaving alone in its view still
// multicasts LEAVE (for leavers whose older view has it) and sends
// LeaveRsp to the leavers whose cuts it runs. Members multicast
// heartbeats; a member silent for Config.SuspectTimeout is probed directly,
// up to Config.ProbeAttempts times (default 3), each probe
// Config.ProbeTimeout after the previous one; anything heard from it
// meanwhile (the answer, a heartbeat, ...) ends the probing, and only if
// all the probes go unanswered is it suspected: the coordinator excludes
// it. One lost probe or answer thus does not exclude a live member under
// loss, and a crashed member is suspected about SuspectTimeout +
// ProbeAttempts×ProbeTimeout after it was last heard from (1s with the
// defaults). If the coordinator itself is suspected, the first member of
// the view that is not suspected takes over with a view that excludes it;
// a member that is not the coordinator and receives a SUSPECT probes the
// named members it does not suspect itself the same way before acting on
// them (the coordinator excludes on the report). The driver learns of each of this member's
// suspicions through Listener.Suspected, before gms acts on it. A suspicion
// is withdrawn (Listener.Unsuspected; the member is no longer reported and
// is watched again) when this member hears from the suspect again while it
// is still in the view, unless this member, as coordinator, has already
// queued its exclusion: then the exclusion goes ahead.
//
// The view that excludes a member is multicast once and not resent to it.
// A member that missed it stays in its old view and keeps sending
// heartbeats naming that view: the coordinator (and the coordinator of the
// view the heartbeat names) answers a member's heartbeat that names an
// older view than its own, from a member its view does not contain, with
// an exclusion notice (its view, for that incarnation). The receiver treats
// the notice as it would that view's multicast (it leaves with ErrExcluded
// if the sender is in its view) and never installs it; it gets one per
// heartbeat until it leaves, so repeated loss only delays it.
//
// When a view excludes a sender the coordinator fixes its cut (design.md,
// "Crashed senders"): it collects from every survivor its delivered,
// received and missing ranges for that sender, the ranges it delivered as
// lost and those at or below its window's start among the missing (it
// cannot repair them), or, from a survivor
// with no window, where an earlier cut closed it (a survivor answers only
// once it has installed a view without that sender, so that its report is
// all it will ever take from the sender itself), picks the cut (the highest
// seqno any survivor received, or the leaver's announced
// highest), computes
// the ranges no survivor holds and multicasts the cut with them and its
// stable point (the least delivered point reported: every survivor purges
// its window of the departed sender up to it, Protocol.PurgeCut, since
// STABILITY no longer does; a survivor whose window is full below the cut
// (Protocol implementations with CutBlocked) reports how far it has
// delivered, again as it delivers more and every ViewAckTimeout, and the
// coordinator raises the stable point to the least delivered point of the
// survivors that have not acknowledged, when it rises, and multicasts the
// fix again with it, cut and lost ranges unchanged); every
// survivor has the protocol fetch the rest from its peers and report the
// lost ranges, acknowledges once it holds and has delivered everything up
// to the cut (and the protocol has reported lost a fragmented message the
// cut ends inside: Protocol implementations with CutPending; or its
// application has consumed the stream up to the cut although the window
// has not: a run declared lost beyond the capacity of a window that the
// cut's stable point keeps full, Protocol implementations with Consumed),
// and
// closes the window when the coordinator says every survivor has
// acknowledged. Every member remembers the departed senders whose windows
// it has not closed; a coordinator that took over resumes their cuts after
// its first view change (survivors report a cut they already applied as
// received up to it, with its lost ranges still missing, so the new cut is
// at least as high and declares at least as much lost), a graceful
// leaver's as a leave: up to its announced highest, declaring lost only
// what no survivor holds at or below the purge point LEAVE announces (it
// repairs the rest) unless a survivor reports a fix an earlier coordinator
// made without knowing of the leave, a later incarnation of the leaver
// is in the view (it joined again: the old one repairs nothing) or a
// survivor closed the leaver's window after an earlier cut (that cut
// closed, so the leaver has gone), and a LeaveRsp when it closes. A
// leaver answers retransmissions only until its leave times out
// (LeaveTimeout after it left), and may be unable to before (cut off from
// the survivors, or it purged its window after its LEAVE announced the
// purge point): LeaveTimeout after the coordinator learnt of the leave, a
// cut that still counts on the leaver's repairs takes it as gone and is
// fixed again, declaring lost what no survivor holds. A
// coordinator that closed a cut reopens it, asking everyone again, when
// a member that never acknowledged it (it was away, in another partition)
// reports the window it still holds. A member that
// still holds a departed sender's window that no cut of the current
// coordinator covers, Config.ViewChangeTimeout after the view that dropped
// it (2×ViewAckTimeout after a view with a new coordinator, when the
// coordinator of the cut it applied is not in it), reports it to the
// coordinator unasked, which cuts it (a coordinator
// that took over without ever installing that view); so does, every
// ViewChangeTimeout, a member that acknowledged a cut and never heard it
// close. Nothing about a departed member is kept for ever (a member that
// comes back is a new incarnation): a survivor forgets a cut when it
// closes the window (a later fix for a sender it holds no window of is
// acknowledged at once), and the coordinator keeps a closed cut, to resend
// the close to a survivor that missed it and the LeaveRsp to a leaver,
// for max(ViewChangeTimeout, LeaveTimeout) and at most as many as its
// view has members; once it is forgotten, a survivor that still holds the
// window reports it as above and is cut again, at the same cut with
// nothing more lost. A coordinator that installs a view it does not
// coordinate (a merge led by another) drops its cuts: their survivors
// report them to the new coordinator. The coordinator numbers its fixes
// (never reusing a number; a fix made anew at the same cut with the same
// lost ranges, or with its stable point raised, keeps it), and a CutAck
// and a close name the fix they are for: a survivor that acknowledged a
// fix and missed one made anew at another cut or with more lost keeps
// acknowledging the earlier one, which counts for nothing (the
// coordinator sends it the current fix), and it takes only the close of
// the fix it acknowledged, so that nobody closes its window at an earlier
// cut than the others. A member takes a fix only from its view's
// coordinator and a close only from the coordinator whose fix it
// acknowledged: a member of its view that split away and coordinates a
// view of its own fixes the same sender at another point, and its
// multicast fix and close reach the old side once the partition heals
// (closed there at the other cut, the seqnos between were neither
// delivered nor reported lost). It takes a fix only for its view, too: the
// coordinator computes a fix from its view's members' reports, so one
// multicast in a view that has dropped this member (a leaver waiting for
// its LeaveRsp) may declare lost what this member delivered; a member of
// the newer view that has not installed it yet gets the fix again once it
// has.
//
// # Merges
//
// Coordinators put their view id in their heartbeats; a coordinator that
// hears another group's coordinator starts a merge if its member id is the
// smaller, and otherwise answers with its own heartbeat by unicast, so
// that the leader hears of it even when its multicast does not reach the
// leader (one-way multicast); the leader resends its request every Config.ViewAckTimeout until
// answered, and a coordinator holding its capture for that merge answers a
// repeat with the same answer. Both capture their digests; the leader
// builds the merge view (its members, then the others', counter above
// both) and its digest by merging
// the partitions' digests, leaving out members no digest covers; members
// install view and digest in one step (Protocol.InstallMergeView: the other
// partition's senders resume where their windows were closed after the cut,
// and only what the other side purged is reported lost); a cut still open
// for a member the merge view brings back is dropped, never closed under a
// live sender. Captures are released when every member has acknowledged
// (the leader's MERGE_DONE; if it is lost, another coordinator that
// installed the merge view releases its capture once the leader's
// heartbeat, which names the merge it leads while it lasts, shows it
// over), or on timeout; a coordinator that leaves or is excluded during a merge
// tells the other side at once (the leader cancels, another coordinator
// refuses), so that nobody holds a capture for a merge that cannot
// complete.
//
// Anyone can send a heartbeat or a merge request, so neither holds the
// group for long. The leader captures its digest only once every answer
// is in, and a merge still waiting for answers gives way to a view change
// of the leader's own group (tried again on a later heartbeat). Another
// coordinator holds its capture (and its view changes) for one leader's
// merge at a time: a new request from that leader ends the hold for the
// last one (its MERGE_DONE was lost) and continues the episode, and an
// episode that lasted more than MergeTimeout without the merge view is
// followed by a quiet period in which merge requests are refused
// (MergeTimeout, doubling up to 8×MergeTimeout, reset by a merge that
// completes). A stranger that keeps asking holds the capture at most a
// fifth of the time once the back-off is at its longest.
//
// # State transfer
//
// RequestState asks a provider (the coordinator first) for the application
// state. The provider takes the application state and captures the digest at
// the same point (no delivery between the two calls), and streams the state
// in chunks over unicast with a bounded window of unacknowledged chunks. The
// requester checks that the protocol can install the digest
// (Protocol.CheckOverwrite; if not, the provider is abandoned before the
// application state is touched), installs the state, calls
// Protocol.OverwriteDigest (seed 003) and acknowledges. A provider does not
// answer while a departed sender's window is open (its cut is under way:
// the digest would not cover it), and a requester refetches from the same
// provider a state whose digest does not cover exactly its view or while
// it has such a window open; the provider releases its capture on that acknowledgement. A
// requester that does not complete within Config.StateTimeout aborts and
// retries another member; the provider holds its capture for twice that, so
// nothing the requester may still install is ever purged under it. A
// member never serves and fetches at once: it does not answer while it
// fetches a state of its own (that state would replace the one it served),
// and a RequestState while it serves starts fetching once those transfers
// have ended (acknowledged, refused or past their deadline), so a
// provider's state goes on from the one it served until its requesters
// have installed it. Of two members asking each other, the lower one
// abandons its attempt, serves, and asks again once that has ended.
//
// # Slow members
//
// With Config.LagLimit set, the coordinator asks the protocol (LagSource)
// once per heartbeat how far each member lags behind the group (nakack:
// from the STABLE reports). A member above LagLimit for LagTimeout is a
// laggard: the coordinator's heartbeats name it with its lag (a digest
// section: Delivered its lag, Received the episode's number) until its
// lag is LagLimit/2 or less, and every member that hears of an episode
// reports it once (LagListener). With LagExclude the coordinator then
// suspects and excludes it through the usual view change, one heartbeat
// after naming it, and keeps naming it for a few heartbeats more. See
// laggard.go.
//
// # Wire
//
// Membership datagrams use wire's common 24-byte header with the types wire
// reserves (16..31 membership, 32..39 state transfer). Every body has the
// same layout: a fixed part (FixedLen bytes, counted in the header length so
// that a newer minor version may append fixed fields that older receivers
// skip) followed by optional sections flagged in the fixed part. See msg.go.
// Decoders validate every length and never panic; they are fuzzed. A
// view counter above MaxViewCounter makes a datagram malformed.
//
// # View counters
//
// A coordinator numbers a view one above the highest counter it has
// taken (maxCounter), and it takes counters only from views it installs,
// heartbeats of members of its view, a member's VIEW_ACK refusing a view
// as stale, and the views other coordinators answer a merge with. A
// stranger's heartbeat or merge request does not number anything: a
// counter taken from one could be pushed at will, up to 2^64-1, after
// which the next view wrapped to 0 and every other member refused it.
//
// gms must not do I/O, read the wall clock, or hold NAKACK rules (those are
// nakack's: gms decides views, cuts and digests and tells the protocol).
package gms
