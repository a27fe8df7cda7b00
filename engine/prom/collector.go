// Package prom exports a nakcast member's statistics as Prometheus metrics.
// It is a separate package so that applications that do not use Prometheus
// do not import its client.
//
// The package owns only the mapping from engine.Stats to metrics; it must
// not keep counters of its own or touch the engine's internals: every
// scrape takes one engine.Member.Stats snapshot.
package prom

import (
	"github.com/nakcast/nakcast/engine"
	"github.com/nakcast/nakcast/nakack"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector is a prometheus.Collector over one member. Register it with
// prometheus.MustRegister(prom.New(member, nil)).
type Collector struct {
	m       *engine.Member
	labels  prometheus.Labels
	metrics []metric
	drops   *prometheus.Desc
	window  *prometheus.Desc
	pool    *prometheus.Desc
	repair  *prometheus.Desc
	lag     *prometheus.Desc
	lagAge  *prometheus.Desc
}

type metric struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(*engine.Stats) float64
}

// New returns a collector for m. constLabels are added to every metric (a
// "member" label with m's id is always added).
func New(m *engine.Member, constLabels prometheus.Labels) *Collector {
	l := prometheus.Labels{"member": m.Self().String()}
	for k, v := range constLabels {
		l[k] = v
	}
	c := &Collector{m: m, labels: l}
	counter := func(name, help string, f func(*engine.Stats) uint64) {
		c.metrics = append(c.metrics, metric{
			desc:  prometheus.NewDesc("nakcast_"+name, help, nil, l),
			kind:  prometheus.CounterValue,
			value: func(s *engine.Stats) float64 { return float64(f(s)) },
		})
	}
	gauge := func(name, help string, f func(*engine.Stats) float64) {
		c.metrics = append(c.metrics, metric{desc: prometheus.NewDesc("nakcast_"+name, help, nil, l), kind: prometheus.GaugeValue, value: f})
	}
	counter("messages_sent_total", "Messages sent (seqnos claimed).", func(s *engine.Stats) uint64 { return s.Sent })
	counter("messages_delivered_total", "Messages delivered to the application, own included.", func(s *engine.Stats) uint64 { return s.Delivered })
	counter("bundles_sent_total", "Data datagrams sent (bundles and fragments).", func(s *engine.Stats) uint64 { return s.Bundles })
	counter("messages_retransmitted_total", "Messages sent as repairs.", func(s *engine.Stats) uint64 { return s.Retransmitted })
	counter("naks_sent_total", "Retransmission requests sent.", func(s *engine.Stats) uint64 { return s.NakSent })
	counter("naks_received_total", "Retransmission requests received.", func(s *engine.Stats) uint64 { return s.NakReceived })
	counter("msg_not_found_sent_total", "MSG_NOT_FOUND replies sent.", func(s *engine.Stats) uint64 { return s.MsgNotFoundSent })
	counter("msg_not_found_received_total", "MSG_NOT_FOUND replies received.", func(s *engine.Stats) uint64 { return s.MsgNotFoundReceived })
	counter("duplicates_total", "Messages received that were already held.", func(s *engine.Stats) uint64 { return s.Duplicates })
	counter("lost_ranges_total", "Lost ranges reported to the application.", func(s *engine.Stats) uint64 { return s.LostRanges })
	counter("datagrams_received_total", "Datagrams read from the sockets.", func(s *engine.Stats) uint64 { return s.DatagramsIn })
	counter("datagrams_sent_total", "Datagrams written to the sockets.", func(s *engine.Stats) uint64 { return s.DatagramsOut })
	counter("back_pressure_total", "TrySend/TryClaim calls refused for a full ring.", func(s *engine.Stats) uint64 { return s.BackPressure })
	counter("back_pressure_waits_total", "Send calls that waited for room.", func(s *engine.Stats) uint64 { return s.BackPressureWaits })
	counter("window_full_total", "Times the protocol's retention window was full.", func(s *engine.Stats) uint64 { return s.ProtocolBackPressure })
	counter("sent_direct_total", "Messages TrySendBatch wrote straight into the bundle (ThreadingInvoked).", func(s *engine.Stats) uint64 { return s.SentDirect })
	counter("sent_in_place_total", "Log-buffer terms sent as written, one datagram each with no copy.", func(s *engine.Stats) uint64 { return s.SentInPlace })
	counter("peer_wakes_total", "Blocked agents of other members of the group in this process woken after a send.", func(s *engine.Stats) uint64 { return s.PeerWakes })
	counter("agent_busy_total", "DoWork calls that found another goroutine running the agent (ThreadingInvoked).", func(s *engine.Stats) uint64 { return s.AgentBusy })
	counter("flow_control_waits_total", "Times the sender waited for InFlightBytes to become stable.", func(s *engine.Stats) uint64 { return s.FlowControlWaits })
	counter("socket_errors_total", "Socket read/write errors.", func(s *engine.Stats) uint64 { return s.SocketErrors })
	counter("lagging_episodes_total", "Times the application's backlog passed half the window.", func(s *engine.Stats) uint64 { return s.LaggingEpisodes })
	gauge("backlog_messages", "Largest per-sender count of messages received but not delivered.", func(s *engine.Stats) float64 { return float64(s.Backlog) })
	counter("suspicions_total", "Members this member started suspecting (EventSuspect).", func(s *engine.Stats) uint64 { return s.Suspicions })
	counter("unsuspicions_total", "Suspicions withdrawn: the suspect was heard again and stayed (EventUnsuspect).", func(s *engine.Stats) uint64 { return s.Unsuspicions })
	counter("membership_datagrams_received_total", "Membership (gms) datagrams received.", func(s *engine.Stats) uint64 { return s.MembershipIn })
	counter("address_probes_total", "ADDRESS challenges sent to bind a static member's address.", func(s *engine.Stats) uint64 { return s.AddressProbes })
	counter("addresses_bound_total", "Static members bound to their address by the echo of a challenge.", func(s *engine.Stats) uint64 { return s.AddressesBound })
	counter("repair_bytes_total", "Bytes of repair datagrams sent.", func(s *engine.Stats) uint64 { return s.Protocol.RepairBytes })
	counter("nak_bytes_received_total", "Bytes of retransmission requests received from members (what earns them repair credit).", func(s *engine.Stats) uint64 { return s.Protocol.NakBytes })
	counter("repairs_over_credit_total", "Repair messages not sent: the requester's repair credit was spent.", func(s *engine.Stats) uint64 { return s.Protocol.RepairsOverCredit })
	counter("challenges_sent_total", "CHALLENGEs sent to confirm a MSG_NOT_FOUND.", func(s *engine.Stats) uint64 { return s.Protocol.ChallengesSent })
	counter("challenges_expired_total", "MSG_NOT_FOUNDs given up: their sender never echoed the challenge.", func(s *engine.Stats) uint64 { return s.Protocol.ChallengesExpired })
	counter("msg_not_found_confirmed_total", "MSG_NOT_FOUNDs acted on (confirmed by the sender, or authenticated).", func(s *engine.Stats) uint64 { return s.Protocol.NotFoundConfirmed })
	counter("challenges_answered_total", "Challenges of others echoed: none of the seqnos were held.", func(s *engine.Stats) uint64 { return s.Protocol.ChallengesAnswered })
	counter("challenges_refused_total", "Challenges of others not echoed: some of the seqnos were still held.", func(s *engine.Stats) uint64 { return s.Protocol.ChallengesRefused })
	gauge("view_members", "Members of the installed view (0 while not in one).", func(s *engine.Stats) float64 { return float64(len(s.Members)) })
	gauge("view_counter", "Counter of the installed view's id (it grows with every view change of the coordinator).", func(s *engine.Stats) float64 { return float64(s.View.Counter) })
	counter("socket_truncated_total", "Datagrams longer than the buffer they were read into.", func(s *engine.Stats) uint64 { return s.Socket.Truncated })
	counter("socket_send_waits_total", "Writes that found the send buffer full and waited.", func(s *engine.Stats) uint64 { return s.Socket.SendWaits })
	counter("gso_sends_total", "Segmented sends (GSO): runs of datagrams handed to the kernel as one.", func(s *engine.Stats) uint64 { return s.Socket.GSOSends })
	counter("gro_runs_total", "Runs of datagrams read at once (GRO).", func(s *engine.Stats) uint64 { return s.Socket.GRORuns })
	gauge("gso_enabled", "1 while writes use UDP segmentation offload (Config.Transport.NoGSO, or the kernel refused it).", func(s *engine.Stats) float64 { return b2f(s.Socket.GSO) })
	gauge("gro_enabled", "1 while the group socket reads with UDP_GRO.", func(s *engine.Stats) float64 { return b2f(s.Socket.GRO) })
	gauge("repair_latency_max_seconds", "Longest repair episode (gap detected to filled) of the current incarnation.", func(s *engine.Stats) float64 { return s.Repair.Max.Seconds() })
	c.drops = prometheus.NewDesc("nakcast_drops_total", "Dropped datagrams or messages by reason.", []string{"reason"}, l)
	c.window = prometheus.NewDesc("nakcast_sender_window_seqno", "Per-sender window: low (stable), delivered, received.", []string{"sender", "point"}, l)
	c.pool = prometheus.NewDesc("nakcast_buffer_pool_outstanding_bytes", "Bytes of datagram buffers held (receive windows, retention, outbox).", nil, l)
	c.repair = prometheus.NewDesc("nakcast_repair_latency_seconds",
		"Repair latency per gap episode of a sender: gap detected to nothing missing (current incarnation).", nil, l)
	c.lag = prometheus.NewDesc("nakcast_peer_lag_messages",
		"Own messages a peer is not known to have delivered (upper bound; exact per peer only on the coordinator).", []string{"peer"}, l)
	c.lagAge = prometheus.NewDesc("nakcast_peer_lag_age_seconds", "Age of the peer lag figure.", []string{"peer"}, l)
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.metrics {
		ch <- m.desc
	}
	ch <- c.drops
	ch <- c.window
	ch <- c.pool
	ch <- c.repair
	ch <- c.lag
	ch <- c.lagAge
}

// Collect implements prometheus.Collector: one Stats snapshot per scrape.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.m.Stats()
	for _, m := range c.metrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(&s))
	}
	d := s.Drops
	for _, r := range []struct {
		reason string
		v      uint64
	}{
		{"malformed", d.Malformed}, {"foreign_group", d.ForeignGroup}, {"not_member", d.NotMember}, {"ring_full", d.RingFull},
		{"wrong_view", d.WrongView}, {"no_buffer", d.NoBuffer},
		{"send_failed", d.SendFailed}, {"reassembly", d.Reassembly}, {"self", d.Self},
		{"not_joined", d.NotJoined}, {"bad_address", d.BadAddress}, {"departed", d.Departed},
		{"auth_no_trailer", d.Auth.NoTrailer}, {"auth_unknown_key", d.Auth.UnknownKey}, {"auth_replay", d.Auth.Replay},
		{"auth_too_old", d.Auth.TooOld}, {"auth_throttled", d.Auth.Throttled}, {"auth_bad_tag", d.Auth.BadTag}, {"auth_no_key", d.Auth.NoKey},
		{"wrong_source", d.WrongSource}, {"unverified", d.Unverified}, {"stranger", d.Stranger},
	} {
		ch <- prometheus.MustNewConstMetric(c.drops, prometheus.CounterValue, float64(r.v), r.reason)
	}
	for _, w := range s.Senders {
		id := w.Member.String()
		ch <- prometheus.MustNewConstMetric(c.window, prometheus.GaugeValue, float64(w.Low), id, "low")
		ch <- prometheus.MustNewConstMetric(c.window, prometheus.GaugeValue, float64(w.Delivered), id, "delivered")
		ch <- prometheus.MustNewConstMetric(c.window, prometheus.GaugeValue, float64(w.Received), id, "received")
	}
	ch <- prometheus.MustNewConstMetric(c.pool, prometheus.GaugeValue, float64(s.Pool.Outstanding))
	r := s.Repair
	buckets := make(map[float64]uint64, nakack.RepairBuckets-1)
	var cum uint64
	for i := 0; i < nakack.RepairBuckets-1; i++ {
		cum += r.Buckets[i]
		buckets[nakack.RepairBucketBound(i).Seconds()] = cum
	}
	ch <- prometheus.MustNewConstHistogram(c.repair, r.Count, r.Sum.Seconds(), buckets)
	for _, p := range s.Peers {
		id := p.Member.String()
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(p.Lag), id)
		if p.Age >= 0 {
			ch <- prometheus.MustNewConstMetric(c.lagAge, prometheus.GaugeValue, p.Age.Seconds(), id)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
