package bench

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A chaos schedule (mcastbench netns -chaos SPEC) is a comma-separated
// list of events, each KIND:TARGET@AT[+FOR], AT and FOR Go durations from
// the start of sending:
//
//	kill:I@T           SIGKILL member I's process at T
//	stop:I@T+D         SIGSTOP member I at T, SIGCONT at T+D
//	restart:I@T        start member I again at T (killed before): a new
//	                   process that joins the running group
//	partition:A|B@T+D  cut the member sets A, B, ... (comma-separated
//	                   indexes, '|' between sets) from each other at T
//	                   (nftables drops in their namespaces), heal at T+D;
//	                   members named in no set belong to the first
//
// for example kill:2@5s,stop:3@8s+4s,restart:2@12s,partition:1,2|3,4@15s+5s.

// ChaosKind is what a chaos event does.
type ChaosKind uint8

// Chaos event kinds.
const (
	ChaosKill ChaosKind = iota + 1
	ChaosStop
	ChaosRestart
	ChaosPartition
)

var chaosKinds = []string{ChaosKill: "kill", ChaosStop: "stop", ChaosRestart: "restart", ChaosPartition: "partition"}

// String names the kind as the spec writes it.
func (k ChaosKind) String() string {
	if int(k) < len(chaosKinds) && k != 0 {
		return chaosKinds[k]
	}
	return "unknown"
}

// ChaosEvent is one event of a schedule: Member for kill, stop and
// restart, Sets for partition; At from the start of sending, For the
// length of a stop or partition (0 for kill and restart).
type ChaosEvent struct {
	Kind   ChaosKind
	Member int
	Sets   [][]int
	At     time.Duration
	For    time.Duration
}

// End is when the event is over (At+For).
func (e ChaosEvent) End() time.Duration { return e.At + e.For }

// String writes the event as the spec does.
func (e ChaosEvent) String() string {
	var target string
	if e.Kind == ChaosPartition {
		sets := make([]string, len(e.Sets))
		for i, s := range e.Sets {
			sets[i] = joinInts(s, ",")
		}
		target = strings.Join(sets, "|")
	} else {
		target = strconv.Itoa(e.Member)
	}
	s := fmt.Sprintf("%s:%s@%v", e.Kind, target, e.At)
	if e.For > 0 {
		s += "+" + e.For.String()
	}
	return s
}

// ChaosSchedule is a parsed chaos spec, its events in the spec's order.
type ChaosSchedule []ChaosEvent

// String writes the schedule as a spec that parses back to it.
func (s ChaosSchedule) String() string {
	parts := make([]string, len(s))
	for i, e := range s {
		parts[i] = e.String()
	}
	return strings.Join(parts, ",")
}

// maxChaosEvents and maxChaosIndex bound what a spec may hold.
const (
	maxChaosEvents = 1000
	maxChaosIndex  = maxMembers - 1
)

// ParseChaos parses a chaos spec (see ChaosKind's comment for the syntax).
// Errors name the event (its position and text) and what is wrong with
// it; Check then validates the schedule against a run.
func ParseChaos(spec string) (ChaosSchedule, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, errors.New("chaos: empty spec (want events like kill:2@5s,stop:3@8s+4s)")
	}
	var texts []string
	for _, p := range strings.Split(spec, ",") {
		p = strings.TrimSpace(p)
		// A partition's sets hold commas: a piece that starts no event
		// ("KIND:") continues the one before.
		if len(texts) > 0 && !startsEvent(p) {
			texts[len(texts)-1] += "," + p
			continue
		}
		texts = append(texts, p)
	}
	if len(texts) > maxChaosEvents {
		return nil, fmt.Errorf("chaos: %d events: at most %d", len(texts), maxChaosEvents)
	}
	s := make(ChaosSchedule, 0, len(texts))
	for i, t := range texts {
		e, err := parseChaosEvent(t)
		if err != nil {
			return nil, fmt.Errorf("chaos: event %d %q: %w", i+1, t, err)
		}
		s = append(s, e)
	}
	return s, nil
}

func startsEvent(p string) bool {
	k, _, ok := strings.Cut(p, ":")
	return ok && slices.Contains(chaosKinds[1:], k)
}

func parseChaosEvent(t string) (ChaosEvent, error) {
	var e ChaosEvent
	kind, rest, ok := strings.Cut(t, ":")
	if !ok {
		return e, errors.New("want KIND:TARGET@AT (kill, stop, restart or partition)")
	}
	k := slices.Index(chaosKinds, kind)
	if k < 1 {
		return e, fmt.Errorf("unknown kind %q: want kill, stop, restart or partition", kind)
	}
	e.Kind = ChaosKind(k)
	target, when, ok := strings.Cut(rest, "@")
	if !ok {
		return e, fmt.Errorf("no time: want %s:TARGET@AT", kind)
	}
	at, length, hasFor := strings.Cut(when, "+")
	var err error
	if e.At, err = chaosDuration(at, "time"); err != nil {
		return e, err
	}
	if hasFor {
		if e.For, err = chaosDuration(length, "length"); err != nil {
			return e, err
		}
		if e.For == 0 {
			return e, errors.New("length 0: a stop or partition lasts a while (+D with D > 0)")
		}
	}
	switch e.Kind {
	case ChaosStop, ChaosPartition:
		if !hasFor {
			return e, fmt.Errorf("%s needs a length: %s:%s@%s+D (over at AT+D)", kind, kind, target, at)
		}
	default:
		if hasFor {
			return e, fmt.Errorf("%s takes no length (+%s): it happens at one time", kind, length)
		}
	}
	if e.Kind == ChaosPartition {
		e.Sets, err = parsePartitionSets(target)
		return e, err
	}
	e.Member, err = chaosIndex(target)
	return e, err
}

func chaosDuration(s, what string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want a duration like 5s or 1m30s", what, s)
	}
	if d < 0 || d > 24*time.Hour {
		return 0, fmt.Errorf("%s %v: want 0..24h", what, d)
	}
	return d, nil
}

func chaosIndex(s string) (int, error) {
	i, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || i < 0 || i > maxChaosIndex {
		return 0, fmt.Errorf("member %q: want an index 0..%d", s, maxChaosIndex)
	}
	return i, nil
}

// parsePartitionSets parses "1,2|3,4": at least two disjoint, non-empty
// sets.
func parsePartitionSets(s string) ([][]int, error) {
	parts := strings.Split(s, "|")
	if len(parts) < 2 {
		return nil, fmt.Errorf("partition %q: want at least two sets, like 1,2|3,4", s)
	}
	seen := map[int]bool{}
	sets := make([][]int, len(parts))
	for i, p := range parts {
		for _, x := range strings.Split(p, ",") {
			m, err := chaosIndex(x)
			if err != nil {
				return nil, fmt.Errorf("partition set %d: %w", i+1, err)
			}
			if seen[m] {
				return nil, fmt.Errorf("partition: member %d is in two sets", m)
			}
			seen[m] = true
			sets[i] = append(sets[i], m)
		}
	}
	return sets, nil
}

// Check validates the schedule against a run of members members whose
// senders are senders, sending for duration: indexes in range; kill,
// stop and restart of receivers only (a sender's stream must reach its
// last message); a member killed before it is restarted and not stopped
// or killed twice at once; one partition at a time; every event over
// before the senders stop.
func (s ChaosSchedule) Check(members int, senders []int, duration time.Duration) error {
	for i, e := range s {
		if err := s.checkEvent(i, members, senders, duration); err != nil {
			return fmt.Errorf("chaos: %s: %w", e, err)
		}
	}
	dead := map[int]bool{}
	for _, e := range s.byTime() {
		switch {
		case e.Kind == ChaosKill && dead[e.Member]:
			return fmt.Errorf("chaos: %s: member %d is already dead (killed, not restarted)", e, e.Member)
		case e.Kind == ChaosStop && dead[e.Member]:
			return fmt.Errorf("chaos: %s: member %d is dead (killed, not restarted)", e, e.Member)
		case e.Kind == ChaosRestart && !dead[e.Member]:
			return fmt.Errorf("chaos: %s: member %d is running: restart a member killed before", e, e.Member)
		}
		dead[e.Member] = e.Kind == ChaosKill || (dead[e.Member] && e.Kind != ChaosRestart)
	}
	return nil
}

// checkEvent checks event i alone and against the events that overlap it.
func (s ChaosSchedule) checkEvent(i, members int, senders []int, duration time.Duration) error {
	e := s[i]
	if e.End() >= duration {
		return fmt.Errorf("over at %v, not before the senders stop (-duration %v)", e.End(), duration)
	}
	for _, m := range append(slices.Concat(e.Sets...), e.Member) {
		if m >= members {
			return fmt.Errorf("member %d: the run has members 0..%d", m, members-1)
		}
	}
	for j, o := range s {
		if j == i || o.At < e.At || o.At > e.End() || e.For == 0 {
			continue
		}
		if e.Kind == ChaosPartition && o.Kind == ChaosPartition {
			return fmt.Errorf("overlaps %s: one partition at a time", o)
		}
		if e.Kind == ChaosStop && o.Kind != ChaosPartition && o.Member == e.Member {
			return fmt.Errorf("member %d is stopped then: %s", e.Member, o)
		}
	}
	if e.Kind != ChaosPartition && slices.Contains(senders, e.Member) {
		return fmt.Errorf("member %d is a sender: chaos kills, stops and restarts receivers only (a sender's stream must reach its last message)", e.Member)
	}
	return nil
}

// byTime returns the events ordered by At (the spec's order among equal
// times).
func (s ChaosSchedule) byTime() ChaosSchedule {
	out := slices.Clone(s)
	slices.SortStableFunc(out, func(a, b ChaosEvent) int { return cmp.Compare(a.At, b.At) })
	return out
}

// chaosAction is one step of a schedule as run: an event's start, or the
// end of a stop (continue) or partition (heal).
type chaosAction struct {
	at  time.Duration
	ev  ChaosEvent
	end bool
}

// actions lists the schedule's steps in time order.
func (s ChaosSchedule) actions() []chaosAction {
	var out []chaosAction
	for _, e := range s {
		out = append(out, chaosAction{at: e.At, ev: e})
		if e.For > 0 {
			out = append(out, chaosAction{at: e.End(), ev: e, end: true})
		}
	}
	slices.SortStableFunc(out, func(a, b chaosAction) int { return cmp.Compare(a.at, b.at) })
	return out
}

// partitionSides returns, for a partition over members members, each
// member's side (members named in no set are on the first).
func partitionSides(sets [][]int, members int) []int {
	side := make([]int, members)
	for k, set := range sets {
		for _, m := range set {
			if m < members {
				side[m] = k
			}
		}
	}
	return side
}

func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, sep)
}
