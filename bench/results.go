package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Row is one line of a results table: one configuration of nakcast or of
// a raw baseline. Receiver figures are the slowest receiver's.
type Row struct {
	// Name says what ran ("nakcast", "raw"), Path where ("loopback",
	// "netns"), Case the setting that differs ("lossless", "loss 5%").
	Name string `json:"name"`
	Path string `json:"path"`
	Case string `json:"case"`
	// MsgSize and DatagramSize are in bytes; Receivers the number of
	// receiving members (the senders' own deliveries are not counted).
	MsgSize      int `json:"msg_size"`
	DatagramSize int `json:"datagram_size"`
	Receivers    int `json:"receivers"`
	// Msgs is the slowest receiver's delivered count, MsgsPerSec and
	// MBPerSec its rates (MB = 1e6 bytes of payload).
	Msgs       int64   `json:"msgs"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
	MBPerSec   float64 `json:"mb_per_sec"`
	// Latency is send to delivery over every receiver (zero for raw
	// throughput rows, which carry no timestamps).
	Latency Latency `json:"latency"`
	// Retransmitted counts messages sent as repairs, over all members.
	Retransmitted uint64 `json:"retransmitted"`
	// LossPct is the share of messages a receiver never got: raw, the
	// worst receiver's datagram loss; nakcast, messages neither delivered
	// nor reported lost plus those reported lost (must be 0).
	LossPct float64 `json:"loss_pct"`
	// InjectedLoss is the loss rate injected at the receivers.
	InjectedLoss float64 `json:"injected_loss"`
	// Verified says every receiver delivered the same messages (count and
	// hash per sender) as the sender itself, in order.
	Verified bool   `json:"verified"`
	Note     string `json:"note,omitempty"`
	// CPUNsPerMsg is the process's CPU time (user and system) over the
	// messages sent, where the whole group ran in one process (the
	// loopback suite): on a shared machine a steadier measure of cost than
	// rates.
	CPUNsPerMsg float64 `json:"cpu_ns_per_msg,omitempty"`
	// Ratio is MsgsPerSec over the raw baseline's in the same run (0 when
	// there is none).
	Ratio float64 `json:"ratio"`
}

// RawRow turns a RunRaw result into a row.
func RawRow(path string, cfg RawConfig, r RawResult) Row {
	cfg, _ = cfg.withDefaults()
	return Row{Name: "raw", Path: path, Case: "no reliability", MsgSize: cfg.MsgSize, DatagramSize: cfg.DatagramSize,
		Receivers: cfg.Receivers, Msgs: r.Msgs, MsgsPerSec: r.MsgsPerSec, MBPerSec: r.MBPerSec, LossPct: r.LossPct,
		Verified: r.Malformed == 0}
}

// Verify checks the members' results against each other: every member
// delivered, of every sender, the same count with the same hash, in order,
// nothing reported lost, and every sender's stream complete. It returns
// one line per problem (none: verified).
func Verify(results []MemberResult) []string {
	var bad []string
	type ref struct {
		count int64
		hash  string
		by    int
	}
	refs := map[uint64]ref{}
	for _, r := range results {
		if r.Schema == "" {
			bad = append(bad, fmt.Sprintf("member %d: no result", r.Index))
			continue
		}
		if r.Schema != MemberSchema {
			// Another schema hashes differently: its hashes cannot be compared.
			bad = append(bad, fmt.Sprintf("member %d: result schema %s, this build reads %s", r.Index, r.Schema, MemberSchema))
			continue
		}
		if r.Error != "" {
			bad = append(bad, fmt.Sprintf("member %d: %s", r.Index, r.Error))
		}
		for _, s := range r.Senders {
			switch {
			case !s.Complete:
				bad = append(bad, fmt.Sprintf("member %d: sender %d: last message not delivered (%d delivered)", r.Index, s.Index, s.Delivered))
			case s.OutOfOrder != 0:
				bad = append(bad, fmt.Sprintf("member %d: sender %d: %d deliveries out of order", r.Index, s.Index, s.OutOfOrder))
			case len(s.Runs) > 1:
				bad = append(bad, fmt.Sprintf("member %d: sender %d: gaps no lost range covers: delivered in runs %v", r.Index, s.Index, s.Runs))
			case len(s.Lost) != 0:
				bad = append(bad, fmt.Sprintf("member %d: sender %d: lost ranges %v", r.Index, s.Index, s.Lost))
			case s.Delivered > 0 && (s.FirstSeq != 1 || s.LastSeq != uint64(s.Delivered)):
				bad = append(bad, fmt.Sprintf("member %d: sender %d: delivered seqnos %d..%d, count %d", r.Index, s.Index, s.FirstSeq, s.LastSeq, s.Delivered))
			}
			if x, ok := refs[s.Sender]; !ok {
				refs[s.Sender] = ref{s.Delivered, s.Hash, r.Index}
			} else if x.count != s.Delivered || x.hash != s.Hash {
				bad = append(bad, fmt.Sprintf("sender %d: member %d delivered %d (hash %s), member %d delivered %d (hash %s)",
					s.Index, x.by, x.count, x.hash, r.Index, s.Delivered, s.Hash))
			}
		}
	}
	return bad
}

// GroupRow summarises the results of one nakcast run: rates and latency of
// the receivers (members other than each sender), repairs of everyone.
func GroupRow(path, caseName string, results []MemberResult, datagram int) Row {
	row := Row{Name: "nakcast", Path: path, Case: caseName, DatagramSize: datagram, Msgs: -1}
	h := NewHistogram()
	var sent int64
	for _, r := range results {
		row.MsgSize = r.MsgSize
		row.Retransmitted += r.Stats.Retransmitted
		sent += r.Sent
		if r.Role != "send" {
			row.Receivers++
			row.InjectedLoss = max(row.InjectedLoss, r.LossRate)
		}
		for _, s := range r.Senders {
			if s.Index == r.Index {
				continue
			}
			if row.Msgs < 0 || s.MsgsPerSec < row.MsgsPerSec {
				row.Msgs, row.MsgsPerSec, row.MBPerSec = s.Delivered, s.MsgsPerSec, s.MBPerSec
			}
			if sh := s.Latency.Histogram(); sh != nil {
				h.Merge(sh)
			}
		}
	}
	row.Msgs = max(row.Msgs, 0)
	row.Latency = Summarize(h, true) // with the histogram: plots draw the distribution
	// Loss: per receiver and sender, what was sent and not delivered.
	sentBy := map[int]int64{}
	for _, r := range results {
		if r.Role == "send" {
			sentBy[r.Index] = r.Sent
		}
	}
	for _, r := range results {
		for _, s := range r.Senders {
			if n := sentBy[s.Index]; n > 0 && s.Index != r.Index {
				row.LossPct = max(row.LossPct, 100*float64(n-s.Delivered+s.LostMsgs)/float64(n))
			}
		}
	}
	problems := Verify(results)
	row.Verified = len(problems) == 0
	if !row.Verified {
		row.Note = problems[0]
		if len(problems) > 1 {
			row.Note += fmt.Sprintf(" (+%d more)", len(problems)-1)
		}
	}
	return row
}

// SetRatios sets each nakcast row's Ratio to its rate over the raw row of
// the same path, message size and datagram size.
func SetRatios(rows []Row) {
	for i := range rows {
		if rows[i].Name == "raw" {
			continue
		}
		for _, r := range rows {
			if r.Name == "raw" && r.Path == rows[i].Path && r.MsgSize == rows[i].MsgSize && r.DatagramSize == rows[i].DatagramSize && r.MsgsPerSec > 0 {
				rows[i].Ratio = rows[i].MsgsPerSec / r.MsgsPerSec
			}
		}
	}
}

// The cases of the loopback suite's authenticated rows (engine.Config.Keys,
// and Encrypt), measured lossless beside the plain "lossless" row.
const (
	CaseSigned    = "signed"
	CaseEncrypted = "encrypted"
)

// AuthCost returns, for each signed and encrypted nakcast row, its msgs/s
// over the plain lossless row's of the same path and sizes and, when both
// have it, the plain row's CPU per message over its own ("64B signed 0.93x
// (cpu 0.90x)"), in row order.
func AuthCost(rows []Row) []string {
	var out []string
	for _, r := range rows {
		if r.Name != "nakcast" || (r.Case != CaseSigned && r.Case != CaseEncrypted) {
			continue
		}
		for _, p := range rows {
			if p.Name == "nakcast" && p.Case == "lossless" && p.Path == r.Path && p.MsgSize == r.MsgSize &&
				p.DatagramSize == r.DatagramSize && p.MsgsPerSec > 0 {
				c := fmt.Sprintf("%s %s %.2fx", FormatBytes(r.MsgSize), r.Case, r.MsgsPerSec/p.MsgsPerSec)
				if r.CPUNsPerMsg > 0 && p.CPUNsPerMsg > 0 {
					c += fmt.Sprintf(" (cpu %.2fx)", p.CPUNsPerMsg/r.CPUNsPerMsg)
				}
				out = append(out, c)
			}
		}
	}
	return out
}

// WriteAuthCost prints AuthCost's ratios on one line (nothing without
// authenticated rows).
func WriteAuthCost(w io.Writer, rows []Row) {
	if c := AuthCost(rows); len(c) > 0 {
		fmt.Fprintf(w, "signed/encrypted: every datagram authenticated (AES-GCM tag), or also encrypted; msgs/s over lossless, same run\n(cpu: lossless CPU per message over theirs): %s\n", strings.Join(c, ", "))
	}
}

// WriteTable prints rows as an aligned text table.
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "what\tpath\tcase\tmsg\tdatagram\tmsgs/s\tMB/s\tp50\tp99\tp99.9\tmax\tretrans\tloss\tvs raw\tverified\t")
	for _, r := range rows {
		lat := func(ns int64) string {
			if r.Latency.Count == 0 {
				return "-"
			}
			return FormatDuration(time.Duration(ns))
		}
		ratio, ver := "-", "-"
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.2fx", r.Ratio)
		}
		if r.Name != "raw" {
			ver = "no"
			if r.Verified {
				ver = "yes"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t%d\t%.2f%%\t%s\t%s\t\n",
			r.Name, r.Path, r.Case, FormatBytes(r.MsgSize), FormatBytes(r.DatagramSize), FormatRate(r.MsgsPerSec), r.MBPerSec,
			lat(r.Latency.P50Ns), lat(r.Latency.P99Ns), lat(r.Latency.P999Ns), lat(r.Latency.MaxNs),
			r.Retransmitted, r.LossPct, ratio, ver)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		if r.Note != "" {
			fmt.Fprintf(w, "note: %s %s %s %s: %s\n", r.Name, r.Path, r.Case, FormatBytes(r.MsgSize), r.Note)
		}
	}
	return nil
}

// WriteJSON writes rows (and the members' results, when given) as one JSON
// document.
func WriteJSON(w io.Writer, rows []Row, members [][]MemberResult) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Schema  string           `json:"schema"`
		Rows    []Row            `json:"rows"`
		Members [][]MemberResult `json:"members,omitempty"`
	}{"nakcast.mcastbench/1", rows, members})
}

// WriteCSV writes rows as CSV with a header line.
func WriteCSV(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"name", "path", "case", "msg_size", "datagram_size", "receivers", "msgs", "msgs_per_sec", "mb_per_sec",
		"p50_ns", "p99_ns", "p999_ns", "max_ns", "retransmitted", "loss_pct", "injected_loss", "ratio", "verified"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, r := range rows {
		_ = cw.Write([]string{r.Name, r.Path, r.Case, i(int64(r.MsgSize)), i(int64(r.DatagramSize)), i(int64(r.Receivers)), i(r.Msgs),
			f(r.MsgsPerSec), f(r.MBPerSec), i(r.Latency.P50Ns), i(r.Latency.P99Ns), i(r.Latency.P999Ns), i(r.Latency.MaxNs),
			strconv.FormatUint(r.Retransmitted, 10), f(r.LossPct), f(r.InjectedLoss), f(r.Ratio), strconv.FormatBool(r.Verified)})
	}
	cw.Flush()
	return cw.Error()
}

// FormatRate formats a rate with a k/M suffix.
func FormatRate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// FormatBytes formats a size as B, KiB or KB the way the tables use it
// (65507 is "64 KB": the largest IPv4 UDP payload).
func FormatBytes(n int) string {
	switch {
	case n >= 65000:
		return "64KB"
	case n >= 1024 && n%1024 == 0:
		return strconv.Itoa(n/1024) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// FormatDuration formats a latency in us or ms with three digits.
func FormatDuration(d time.Duration) string {
	us := float64(d) / 1e3
	switch {
	case us < 10:
		return fmt.Sprintf("%.2fus", us)
	case us < 1000:
		return fmt.Sprintf("%.0fus", us)
	case us < 1e6:
		return fmt.Sprintf("%.1fms", us/1e3)
	}
	return fmt.Sprintf("%.2fs", us/1e6)
}
