package digest

import (
	"strconv"
	"time"
)

// Common History reasons. Any string may be used; these keep logs uniform.
const (
	ReasonSet         = "set"
	ReasonMerge       = "merge"
	ReasonOverwrite   = "overwrite"
	ReasonMsgNotFound = "msg_not_found"
)

// Record is one digest change kept by a History.
type Record struct {
	At     time.Duration // since the caller's epoch (no wall clock here)
	Reason string        // what changed the digest: "set", "merge", ...
	Digest Digest        // the digest after (or given to) the change
}

// String formats r as "at reason digest", e.g. "1.5s merge [a.1: 0/50/52]".
func (r Record) String() string { return string(r.appendText(nil)) }

func (r Record) appendText(b []byte) []byte {
	b = append(b, r.At.String()...)
	b = append(b, ' ')
	b = append(b, r.Reason...)
	b = append(b, ' ')
	return r.Digest.AppendText(b)
}

// History is a bounded record of the last N digest changes, for diagnostics
// (a member that gets MSG_NOT_FOUND logs it, seed 000). When full, a new
// record replaces the oldest. Digests are immutable, so a record shares the
// digest it was given: Add does not copy entries and does not allocate.
// A History is not safe for concurrent use: its owner (the protocol
// goroutine) adds and prints.
type History struct {
	recs  []Record // ring of capacity len(recs)
	next  int      // slot of the next Add
	n     int      // records held, <= len(recs)
	total uint64   // records ever added
}

// NewHistory returns a History keeping the last n records; n < 1 is taken
// as 1.
func NewHistory(n int) *History {
	return &History{recs: make([]Record, max(n, 1))}
}

// Add records a digest change at time at (since the caller's epoch).
func (h *History) Add(at time.Duration, reason string, d Digest) {
	h.recs[h.next] = Record{At: at, Reason: reason, Digest: d}
	h.next++
	if h.next == len(h.recs) {
		h.next = 0
	}
	if h.n < len(h.recs) {
		h.n++
	}
	h.total++
}

// Cap returns the most records h keeps.
func (h *History) Cap() int { return len(h.recs) }

// Len returns the number of records held.
func (h *History) Len() int { return h.n }

// Total returns how many records were ever added, including those dropped.
func (h *History) Total() uint64 { return h.total }

// Records returns a new slice of the records held, oldest first.
func (h *History) Records() []Record {
	out := make([]Record, 0, h.n)
	start := h.next - h.n
	if start < 0 {
		start += len(h.recs)
	}
	for i := 0; i < h.n; i++ {
		out = append(out, h.recs[(start+i)%len(h.recs)])
	}
	return out
}

// String prints the records oldest first, one per line, after a header line
// saying how many of how many added are shown.
func (h *History) String() string {
	b := append([]byte(nil), "digest history ("...)
	b = strconv.AppendInt(b, int64(h.n), 10)
	b = append(b, " of "...)
	b = strconv.AppendUint(b, h.total, 10)
	b = append(b, "):"...)
	for _, r := range h.Records() {
		b = append(b, "\n  "...)
		b = r.appendText(b)
	}
	return string(b)
}
