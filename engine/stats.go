package engine

import (
	"sync/atomic"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine/auth"
	"github.com/nakcast/nakcast/engine/transport"
	"github.com/nakcast/nakcast/gms"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/wire"
)

// counters are the engine's own counters, updated with atomics by the agent
// and the publishing goroutines.
type counters struct {
	delivered            atomic.Uint64
	discardedOnClose     atomic.Uint64
	discardedOnRejoin    atomic.Uint64
	backPressure         atomic.Uint64
	backPressureWaits    atomic.Uint64
	protocolBackPressure atomic.Uint64
	flowControlWaits     atomic.Uint64
	sentDirect           atomic.Uint64
	sentInPlace          atomic.Uint64
	agentBusy            atomic.Uint64
	peerWakes            atomic.Uint64
	datagramsIn          atomic.Uint64
	datagramsOut         atomic.Uint64
	socketErrors         atomic.Uint64
	receiveErrors        atomic.Uint64
	sendErrors           atomic.Uint64
	dropMalformed        atomic.Uint64
	dropForeignGroup     atomic.Uint64
	dropNoBuffer         atomic.Uint64
	dropSendFailed       atomic.Uint64
	unicastViaGroup      atomic.Uint64
	lostRanges           atomic.Uint64
	backlog              atomic.Uint64
	laggingEpisodes      atomic.Uint64
	membershipIn         atomic.Uint64
	dropNotJoined        atomic.Uint64
	dropBadAddress       atomic.Uint64
	dropWrongSource      atomic.Uint64
	dropNotMember        atomic.Uint64
	dropUnverified       atomic.Uint64
	addressProbes        atomic.Uint64
	addressesBound       atomic.Uint64
	suspicions           atomic.Uint64
	unsuspicions         atomic.Uint64
	dropAuth             [auth.NumReasons]atomic.Uint64
}

// Drops counts dropped datagrams (or messages, where noted) by reason.
type Drops struct {
	// Malformed: undecodable datagrams (truncated, unknown version or
	// type, inconsistent fields).
	Malformed uint64
	// ForeignGroup: datagrams of another group (group id) on our port.
	ForeignGroup uint64
	// NotMember: datagrams from senders outside the view (and without a
	// membership exchange under way with this member), other than the
	// membership datagrams gms takes from them (discovery, joins, merges).
	NotMember uint64
	// WrongSource: datagrams that claim a member of the view (or a peer in
	// a membership exchange) and came from another address than its own:
	// a stranger using its identity.
	WrongSource uint64
	// Unverified: with static membership, datagrams from a member whose
	// address is not bound yet that could not be held until it is (the
	// hold's byte bound, its age bound, or an address that never answered
	// the challenge: a stranger using the member's identity), and ADDRESS
	// challenges and echoes that do not check out.
	Unverified uint64
	// Stranger: protocol control datagrams from a member that may not send
	// them to this member (nakack Drops.Stranger: an XMIT_REQ, CHALLENGE
	// or HIGHEST from outside the view).
	Stranger uint64
	// RingFull: messages beyond a receive window's capacity.
	RingFull uint64
	// WrongView: control messages for another view or coordinator.
	WrongView uint64
	// NoBuffer: datagrams not read or not built because the buffer pool
	// was over budget.
	NoBuffer uint64
	// SendFailed: outgoing datagrams the socket refused.
	SendFailed uint64
	// Reassembly: fragments dropped by the reassembly bound.
	Reassembly uint64
	// Self: own datagrams looped back by the kernel (normal on loopback).
	Self uint64
	// NotJoined: protocol datagrams received while this member was not in
	// a view (joining, or rejoining after an exclusion).
	NotJoined uint64
	// BadAddress: membership datagrams not sent because the peer's
	// unicast address did not parse or is not allowed.
	BadAddress uint64
	// Departed: messages of a departed sender refused so that every
	// survivor ends with the same prefix of its messages (nakack
	// Drops.Departed: its own datagrams before the cut is fixed, anything
	// beyond the cut or declared lost after).
	Departed uint64
	// Auth: datagrams that failed authentication (Config.Keys), by reason;
	// dropped before anything read them.
	Auth AuthDrops
}

// AuthDrops counts datagrams refused by authentication, by reason (the
// reasons of engine/auth, in the order they are checked).
type AuthDrops struct {
	NoTrailer  uint64 // no authentication trailer (a member without the key, or stray traffic)
	UnknownKey uint64 // key id not among Config.Keys (another group's key, or retired)
	Replay     uint64 // nonce counter already accepted from that sender
	TooOld     uint64 // nonce counter below the sender's replay window
	Throttled  uint64 // unknown sender while the subkey derivation budget was spent
	BadTag     uint64 // tag does not verify: forged, corrupted, or another secret
	NoKey      uint64 // authenticated datagram reaching a member without keys
}

// Total returns the sum over the reasons.
func (d AuthDrops) Total() uint64 {
	return d.NoTrailer + d.UnknownKey + d.Replay + d.TooOld + d.Throttled + d.BadTag + d.NoKey
}

// AuthStats describe a member's authentication.
type AuthStats struct {
	// Mode is "open", "signed" or "encrypted"; KeyID the key that seals
	// (0 in open mode).
	Mode  string
	KeyID uint16
	// Senders is how many senders have a replay window, Derived how many
	// subkeys were derived, Forgotten how many senders were dropped to
	// stay within auth.MaxSenders.
	Senders   int
	Derived   uint64
	Forgotten uint64
}

// SenderWindow is this member's view of one sender: Low is the highest
// seqno purged as stable, Delivered the highest delivered, Received the
// highest received; Received-Delivered messages are waiting for a gap to be
// repaired or for the application to consume them.
type SenderWindow = digest.Entry

// PeerLag is how far another member of the view has delivered this
// member's own messages, as far as this member knows (nakack.PeerLag):
// Delivered is a lower bound and Lag = Sent - Delivered an upper bound.
// On the coordinator each member's figure comes from that member's own
// STABLE report (Reported); on the other members only the group's stable
// point is known (the minimum over all members, the same for each). Age is
// how old the figure is: members report every StableInterval (and every
// StableBytes received), the stable point moves once every report of a
// round is in, so Age is at least about StableInterval and grows while
// some member is silent; -1 when nothing is known yet.
type PeerLag struct {
	Member    digest.Member
	Delivered uint64
	Lag       uint64
	Age       time.Duration
	Reported  bool
}

// Stats is a snapshot of a member's counters. The top-level fields are the
// common ones; Protocol has every protocol counter.
type Stats struct {
	Sent                uint64 // messages sent (seqnos claimed by the protocol)
	Delivered           uint64 // messages delivered to the application (own included)
	Bundles             uint64 // data datagrams sent (bundles and fragments)
	Retransmitted       uint64 // messages sent as repairs
	NakSent             uint64 // retransmission requests sent (datagrams)
	NakReceived         uint64 // retransmission requests received (datagrams)
	MsgNotFoundSent     uint64
	MsgNotFoundReceived uint64
	Duplicates          uint64 // messages received that were already held
	LostRanges          uint64 // lost-range events reported
	DatagramsIn         uint64 // datagrams read from the sockets
	DatagramsOut        uint64 // datagrams written
	// BackPressure counts TrySend/TryClaim calls refused for a full ring;
	// BackPressureWaits counts Send calls that had to wait;
	// ProtocolBackPressure counts times the agent found the protocol's
	// retention window full.
	BackPressure         uint64
	BackPressureWaits    uint64
	ProtocolBackPressure uint64
	// FlowControlWaits counts times the agent held back messages because
	// Config.Tuning.InFlightBytes of this member's data were not yet stable.
	FlowControlWaits uint64
	// SentDirect counts messages TrySendBatch wrote straight into the
	// protocol's bundle, past the log buffer (ThreadingInvoked).
	SentDirect uint64
	// SentInPlace counts the log buffer's terms sent as they were
	// written (one datagram each, with no copy: nakack SendDatagram);
	// the other terms' messages are copied into bundles.
	SentInPlace uint64
	// AgentBusy counts DoWork calls (ThreadingInvoked) that returned at
	// once because another goroutine was running the agent: a second
	// DoWork loop, a blocking call driving it before the application's
	// loop had run, TrySendBatch's direct path or Close.
	AgentBusy uint64
	// PeerWakes counts the blocked agents of other members of this
	// member's group in this process that it woke after sending (Go's
	// scheduler would leave them blocked while the process is busy).
	PeerWakes        uint64
	SocketErrors     uint64 // read/write errors other than closing
	ReceiveErrors    uint64 // datagrams the protocol refused (also in Drops)
	UnicastViaGroup  uint64 // unicasts sent through the group: no address for the destination (a static member not bound yet)
	DiscardedOnClose uint64 // messages not polled when Close drained (pull mode)
	// DiscardedOnRejoin counts records (messages, lost ranges) delivered
	// by an incarnation that was then excluded with
	// Config.Membership.FetchState and not polled before the exclusion:
	// the state fetched after the rejoin covers them (pull mode).
	DiscardedOnRejoin uint64
	// Backlog is the largest number of messages of one sender received but
	// not yet delivered (measured every 100ms): the application's lag.
	// LaggingEpisodes counts EventLagging reports (backlog above Window/2).
	Backlog         uint64
	LaggingEpisodes uint64
	// Suspicions counts EventSuspect reports, Unsuspicions EventUnsuspect
	// reports (suspicions withdrawn); MembershipIn the membership datagrams
	// received (dynamic membership).
	Suspicions   uint64
	Unsuspicions uint64
	MembershipIn uint64
	// AddressProbes counts the ADDRESS challenges sent and AddressesBound
	// the static members bound to their address by the echo (static
	// membership without Config.Membership.MemberAddrs).
	AddressProbes  uint64
	AddressesBound uint64
	Drops          Drops
	// Auth is the authentication mode and state (Config.Keys).
	Auth AuthStats
	// View is the installed view (zero while not in one) and Members its
	// members, coordinator first.
	View    digest.ViewID
	Members []digest.Member
	// Senders is the window of every sender this member knows.
	Senders []SenderWindow
	// Peers is the lag of every other member of the view behind this
	// member's own messages (empty while not in a view).
	Peers []PeerLag
	// Repair is the repair latency (gap detected to filled, per gap
	// episode; see nakack.RepairStats) of the current incarnation; the
	// same as Protocol.Repair.
	Repair nakack.RepairStats
	// Protocol, Membership, Pool and Transport are the layers' own
	// counters (Protocol: the current incarnation's; Membership: zero with
	// static membership).
	Protocol   nakack.Stats
	Membership gms.Stats
	Pool       wire.PoolStats
	Transport  transport.Info
	// Socket is the transport's counters: truncated reads, waits for a
	// full send buffer, and whether the segmentation offloads are in use
	// (Config.Transport.NoGSO) with how many segmented sends (GSO) and runs read at
	// once (GRO).
	Socket transport.Stats
}

// Stats returns a snapshot of the counters. It never waits for the
// protocol lock: the engine's own counters are atomics, and what the
// agent owns (the protocol's and membership's counters, the windows, view
// and peer lags) it reads from a snapshot it asks for, which the agent
// publishes at the end of its part in progress (up to statsWait, which a
// Handler that calls Stats waits), or Stats itself when a TryLock finds
// the agent idle. It allocates (the slices): call it at human rates.
func (m *Member) Stats() Stats {
	var snap protoSnap
	m.request()
	m.board.read(&snap)
	now := m.now()
	ps := snap.proto
	as := snap.auth
	if m.sec != nil {
		as.KeyID = m.sec.next.Load().Current() // SetKeys's, at once
	}
	s := Stats{
		Sent:                 ps.Sent,
		Delivered:            m.ctr.delivered.Load(),
		Bundles:              ps.Bundles,
		Retransmitted:        ps.Retransmitted,
		NakSent:              ps.NakSent,
		NakReceived:          ps.NakReceived,
		MsgNotFoundSent:      ps.MsgNotFoundSent,
		MsgNotFoundReceived:  ps.MsgNotFoundReceived,
		Duplicates:           ps.Duplicates,
		LostRanges:           m.ctr.lostRanges.Load(),
		DatagramsIn:          m.ctr.datagramsIn.Load(),
		DatagramsOut:         m.ctr.datagramsOut.Load(),
		BackPressure:         m.ctr.backPressure.Load(),
		BackPressureWaits:    m.ctr.backPressureWaits.Load(),
		ProtocolBackPressure: m.ctr.protocolBackPressure.Load(),
		FlowControlWaits:     m.ctr.flowControlWaits.Load(),
		SentDirect:           m.ctr.sentDirect.Load(),
		SentInPlace:          m.ctr.sentInPlace.Load(),
		AgentBusy:            m.ctr.agentBusy.Load(),
		PeerWakes:            m.ctr.peerWakes.Load(),
		SocketErrors:         m.ctr.socketErrors.Load(),
		ReceiveErrors:        m.ctr.receiveErrors.Load(),
		UnicastViaGroup:      m.ctr.unicastViaGroup.Load(),
		DiscardedOnClose:     m.ctr.discardedOnClose.Load(),
		DiscardedOnRejoin:    m.ctr.discardedOnRejoin.Load(),
		Backlog:              m.ctr.backlog.Load(),
		LaggingEpisodes:      m.ctr.laggingEpisodes.Load(),
		Suspicions:           m.ctr.suspicions.Load(),
		Unsuspicions:         m.ctr.unsuspicions.Load(),
		MembershipIn:         m.ctr.membershipIn.Load(),
		AddressProbes:        m.ctr.addressProbes.Load(),
		AddressesBound:       m.ctr.addressesBound.Load(),
		View:                 snap.view,
		Members:              snap.members,
		Membership:           snap.gms,
		Drops:                m.drops(ps),
		Auth:                 as,
		Repair:               ps.Repair,
		Protocol:             ps,
		Pool:                 m.pool.Stats(),
		Transport:            m.info,
	}
	if ts, ok := m.tr.(interface{ Stats() transport.Stats }); ok {
		s.Socket = ts.Stats()
	}
	s.Senders = snap.senders
	s.Peers = make([]PeerLag, len(snap.lags))
	for i, l := range snap.lags {
		s.Peers[i] = PeerLag{Member: l.Member, Delivered: l.Delivered, Lag: l.Lag, Age: -1, Reported: l.Reported}
		if l.At > 0 {
			s.Peers[i].Age = max(now-l.At, 0)
		}
	}
	return s
}

// drops adds the engine's drop counters to the protocol's (ps).
func (m *Member) drops(ps nakack.Stats) Drops {
	return Drops{
		Malformed:    ps.Drops.Malformed + m.ctr.dropMalformed.Load(),
		ForeignGroup: m.ctr.dropForeignGroup.Load(),
		NotMember:    ps.Drops.NotMember + m.ctr.dropNotMember.Load(),
		WrongSource:  m.ctr.dropWrongSource.Load(),
		Unverified:   m.ctr.dropUnverified.Load(),
		Stranger:     ps.Drops.Stranger,
		RingFull:     ps.Drops.Full,
		WrongView:    ps.Drops.WrongView,
		NoBuffer:     ps.Drops.NoBuffer + m.ctr.dropNoBuffer.Load(),
		SendFailed:   m.ctr.dropSendFailed.Load(),
		Reassembly:   ps.Drops.Reassembly,
		Self:         ps.Drops.Self,
		NotJoined:    m.ctr.dropNotJoined.Load(),
		BadAddress:   m.ctr.dropBadAddress.Load(),
		Departed:     ps.Drops.Departed,
		Auth:         m.authDrops(),
	}
}
