package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/wire"
)

// NetDrops counts the datagrams of one member an nftables rule dropped on
// their way out (DropEgress): Data the original DATA datagrams (not
// repairs), Other everything else.
type NetDrops struct {
	Data  uint64 `json:"data"`
	Other uint64 `json:"other"`
}

// nftTable is the table DropEgress adds (per member port) in the bridge's
// namespace.
func nftTable(i int) string { return fmt.Sprintf("nakcast_loss_%d", i) }

// CheckNft reports why nftables loss cannot be injected (no nft program).
func CheckNft() error {
	if _, err := exec.LookPath("nft"); err != nil {
		return errors.New("bench: nft (nftables) not found: install nftables to inject loss in namespaces")
	}
	return nil
}

// nft runs nft with args (and stdin, if not empty) in the bridge's
// namespace.
func (ns *Netns) nft(ctx context.Context, stdin string, args ...string) ([]byte, error) {
	return ns.nftIn(ctx, ns.prefix+"br", stdin, args...)
}

// nftIn runs nft with args (and stdin, if not empty) in namespace br.
func (ns *Netns) nftIn(ctx context.Context, br, stdin string, args ...string) ([]byte, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, "ip", append([]string{"netns", "exec", br, "nft"}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("bench: nft %s in %s: %v: %s", strings.Join(args, " "), br, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("bench: nft %s in %s: %w", strings.Join(args, " "), br, err)
	}
	return out, nil
}

// DropEgress makes the bridge drop each UDP datagram member i sends with
// probability p (nftables numgen random on the ingress of member i's
// bridge port), silently, before it is flooded to the other ports: a
// multicast is then lost for every receiver, as the simulator's
// NetConfig.SharedLoss does near a sender. Original DATA datagrams (wire
// type 1 without FlagRepair) and the rest are counted apart (EgressDrops).
// Segmentation offload should be off (NoGSO): a GSO send leaves the member
// as one frame per datagram, but the counters and the simulator count
// datagrams.
func (ns *Netns) DropEgress(ctx context.Context, i int, p float64) error {
	if err := CheckNft(); err != nil {
		return err
	}
	if p <= 0 || p >= 1 {
		return fmt.Errorf("bench: egress loss %g: want 0 < p < 1", p)
	}
	n := int64(p * 1e6)
	// UDP payload byte 2 is the wire type, byte 3 the flags (bit 0, the
	// last bit of the byte, REPAIR): transport-header bits 80..87, 95.
	data := "meta protocol ip ip protocol udp @th,80,8 0x01 @th,95,1 0"
	rules := fmt.Sprintf(`table netdev %[1]s {
	chain in {
		type filter hook ingress device "v%[4]d" priority 0; policy accept;
		%[2]s numgen random mod 1000000 < %[3]d counter drop
		%[2]s accept
		meta protocol ip ip protocol udp numgen random mod 1000000 < %[3]d counter drop
	}
}
`, nftTable(i), data, n, i)
	_, err := ns.nft(ctx, rules, "-f", "-")
	return err
}

// egressLoss installs DropEgress for the first n members.
func (ns *Netns) egressLoss(ctx context.Context, n int, p float64) error {
	for i := range n {
		if err := ns.DropEgress(ctx, i, p); err != nil {
			ns.clearEgress(i)
			return err
		}
	}
	return nil
}

// clearEgress removes DropEgress's tables of the first n members.
func (ns *Netns) clearEgress(n int) {
	for i := range n {
		_, _ = ns.nft(context.Background(), "", "delete", "table", "netdev", nftTable(i))
	}
}

// netDrops fills every result's NetDrops from its counters (left nil where
// they cannot be read).
func (ns *Netns) netDrops(ctx context.Context, results []MemberResult) {
	for i := range results {
		if d, err := ns.EgressDrops(ctx, i); err == nil {
			results[i].NetDrops = &d
		}
	}
}

// EgressDrops reads the counters of member i's DropEgress rules.
func (ns *Netns) EgressDrops(ctx context.Context, i int) (NetDrops, error) {
	out, err := ns.nft(ctx, "", "-j", "list", "chain", "netdev", nftTable(i), "in")
	if err != nil {
		return NetDrops{}, err
	}
	var doc struct {
		Nftables []struct {
			Rule *struct {
				Expr []map[string]json.RawMessage `json:"expr"`
			} `json:"rule"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return NetDrops{}, fmt.Errorf("bench: nft list for member %d: %v", i, err)
	}
	var counts []uint64
	for _, o := range doc.Nftables {
		if o.Rule == nil {
			continue
		}
		for _, e := range o.Rule.Expr {
			if c, ok := e["counter"]; ok {
				var v struct{ Packets uint64 }
				if err := json.Unmarshal(c, &v); err != nil {
					return NetDrops{}, err
				}
				counts = append(counts, v.Packets)
			}
		}
	}
	if len(counts) != 2 {
		return NetDrops{}, fmt.Errorf("bench: nft list for member %d: %d counters, want 2", i, len(counts))
	}
	return NetDrops{Data: counts[0], Other: counts[1]}, nil
}

// ScaleFigures are issue 19's repair figures of one sender's run, computed
// from the members' counters alone (so the same way for processes in
// namespaces and for the simulator: SimScaleTwin).
type ScaleFigures struct {
	// LostDatagrams is the sender's original DATA datagrams the network
	// dropped (for every receiver); MsgsPerDatagram the sender's messages
	// per data datagram.
	LostDatagrams   uint64
	MsgsPerDatagram float64
	// LostMessages is the messages a receiver lost, the mean over the
	// receivers of what they got back from repairs (nakack
	// Stats.RepairsReceived): with the loss near the sender every receiver
	// lacks the same ones. Counted, not estimated from LostDatagrams times
	// MsgsPerDatagram: a process sender's bundles range from one message
	// to dozens, so a few large ones lost move that estimate.
	LostMessages float64
	// RepairsPerLost is the messages repaired (every member, every cause)
	// per lost message; RequestsPerLost the XMIT_REQ datagrams the
	// receivers sent (lost or not) per lost datagram.
	RepairsPerLost  float64
	RequestsPerLost float64
	// Repair is the receivers' gap episodes merged: gap detected to filled
	// (nakack.RepairStats).
	RepairMean, RepairP99 time.Duration
	// Discards is every receiver's receive-window discards (Drops.Full).
	Discards uint64
	// Goodput is the offered duration (Sent-1 messages at Rate) over the
	// time the sender took to send them; 0 without a Rate.
	Goodput float64
}

// String formats the figures for a log line.
func (f ScaleFigures) String() string {
	return fmt.Sprintf("goodput %.3f of offered; %d data datagrams lost (%.2f msgs each, %.0f msgs); repairs per lost message %.3f; requests per lost datagram %.2f; gap detected to filled mean %v p99 <= %v; %d window discards",
		f.Goodput, f.LostDatagrams, f.MsgsPerDatagram, f.LostMessages, f.RepairsPerLost, f.RequestsPerLost,
		f.RepairMean.Round(10*time.Microsecond), f.RepairP99, f.Discards)
}

// scaleFigures computes ScaleFigures from every member's protocol counters
// (sender the sending member's index), the sender's lost data datagrams,
// and, for Goodput, the offered and actual sending durations.
func scaleFigures(stats []nakack.Stats, sender int, lost uint64, offered, took time.Duration) ScaleFigures {
	f := ScaleFigures{LostDatagrams: lost}
	s := stats[sender]
	if s.Bundles > 0 {
		f.MsgsPerDatagram = float64(s.Sent) / float64(s.Bundles)
	}
	var rep nakack.RepairStats
	var repaired, requests, got uint64
	for i, st := range stats {
		repaired += st.Retransmitted
		if i == sender {
			continue
		}
		got += st.RepairsReceived
		requests += st.NakSent
		f.Discards += st.Drops.Full
		rep.Count += st.Repair.Count
		rep.Sum += st.Repair.Sum
		for b := range rep.Buckets {
			rep.Buckets[b] += st.Repair.Buckets[b]
		}
	}
	if len(stats) > 1 {
		f.LostMessages = float64(got) / float64(len(stats)-1)
	}
	if f.LostMessages > 0 {
		f.RepairsPerLost = float64(repaired) / f.LostMessages
	}
	if lost > 0 {
		f.RequestsPerLost = float64(requests) / float64(lost)
	}
	f.RepairMean = rep.Mean()
	f.RepairP99 = repairQuantile(rep, 0.99)
	if offered > 0 && took > 0 {
		f.Goodput = min(1, float64(offered)/float64(took))
	}
	return f
}

// repairQuantile returns the upper bound of the histogram bucket holding
// the q quantile of r's episodes (0 without episodes).
func repairQuantile(r nakack.RepairStats, q float64) time.Duration {
	var n uint64
	for _, c := range r.Buckets {
		n += c
	}
	if n == 0 {
		return 0
	}
	want := uint64(q*float64(n) + 0.999999)
	var acc uint64
	for b, c := range r.Buckets {
		if acc += c; acc >= want {
			return nakack.RepairBucketBound(b)
		}
	}
	return nakack.RepairBucketBound(len(r.Buckets) - 1)
}

// ScaleFiguresOf computes ScaleFigures for a RunNetns run with EgressLoss
// and one paced sender (MemberConfig.Rate).
func ScaleFiguresOf(rs []MemberResult, sender int, rate float64) (ScaleFigures, error) {
	if sender < 0 || sender >= len(rs) || rs[sender].NetDrops == nil {
		return ScaleFigures{}, errors.New("bench: scale figures need the sender's network drop counters (EgressLoss)")
	}
	stats := make([]nakack.Stats, len(rs))
	for i, r := range rs {
		stats[i] = r.Stats.Protocol
	}
	var offered time.Duration
	if rate > 0 && rs[sender].Sent > 1 {
		offered = time.Duration(float64(rs[sender].Sent-1) / rate * 1e9)
	}
	return scaleFigures(stats, sender, rs[sender].NetDrops.Data, offered, time.Duration(rs[sender].SendNs)), nil
}

// DropEgress's rule matches wire type 1 (DATA) and flag bit 0 (REPAIR).
var _ = [1]struct{}{}[wire.TypeData-1+wire.Type(wire.FlagRepair-1)]
