package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SoakConfig configures RunSoak (zero fields take the defaults named):
// a long chaos run in namespaces that kills and restarts one member
// periodically under continuous traffic and link loss, sampling every
// member process's resident memory.
type SoakConfig struct {
	// Members (5) member processes, Senders ({0, 1}) sending Rate (1000)
	// messages of MsgSize (200) bytes a second each, for Duration (10m).
	Members  int
	Senders  []int
	Rate     float64
	MsgSize  int
	Duration time.Duration
	// LinkLoss (0.05) is dropped on every member's link (RunNetns's
	// LinkLoss).
	LinkLoss float64
	// Victim (0: the last member) is killed every Every (1m), first at
	// Every, and restarted Down (10s) later.
	Victim int
	Every  time.Duration
	Down   time.Duration
	// Sample (5s) is the memory sampling period and WarmUp (2m) the time
	// after which a process's memory counts as warmed up: it covers the
	// first kill, whose failure detection stalls stability for seconds
	// while every member keeps what it sent and received (the pools and
	// windows reach their high-water marks there), and the restart.
	Sample time.Duration
	WarmUp time.Duration
	// Exe, Env and Progress are as in NetnsRunConfig.
	Exe      []string
	Env      []string
	Progress func(string)
}

func (c SoakConfig) withDefaults() (SoakConfig, error) {
	if c.Members == 0 {
		c.Members = 5
	}
	if len(c.Senders) == 0 {
		c.Senders = []int{0, 1}
	}
	if c.Rate == 0 {
		c.Rate = 1000
	}
	if c.MsgSize == 0 {
		c.MsgSize = 200
	}
	if c.Duration == 0 {
		c.Duration = 10 * time.Minute
	}
	if c.LinkLoss == 0 {
		c.LinkLoss = 0.05
	}
	if c.Victim == 0 {
		c.Victim = c.Members - 1
	}
	if c.Every == 0 {
		c.Every = time.Minute
	}
	if c.Down == 0 {
		c.Down = 10 * time.Second
	}
	if c.Sample == 0 {
		c.Sample = 5 * time.Second
	}
	if c.WarmUp == 0 {
		c.WarmUp = 2 * time.Minute
	}
	if c.Every <= c.Down || c.Sample <= 0 || c.WarmUp < 0 || c.Rate < 0 || c.LinkLoss < 0 || c.LinkLoss >= 1 {
		return c, fmt.Errorf("bench: soak: Every %v, Down %v, Sample %v, WarmUp %v, Rate %g, LinkLoss %g: want Every > Down > 0, Sample > 0, 0 <= LinkLoss < 1",
			c.Every, c.Down, c.Sample, c.WarmUp, c.Rate, c.LinkLoss)
	}
	s := SoakSchedule(c.Duration, c.Every, c.Down, c.Victim)
	if len(s) == 0 {
		return c, fmt.Errorf("bench: soak: Duration %v, Every %v, Down %v: no kill and restart fits", c.Duration, c.Every, c.Down)
	}
	return c, s.Check(c.Members, c.Senders, c.Duration)
}

// Validate says what is wrong with the configuration, if anything.
func (c SoakConfig) Validate() error {
	_, err := c.withDefaults()
	return err
}

// SoakSchedule kills victim every every (first at every) and restarts
// it down later, while the restart leaves half a period before duration
// ends.
func SoakSchedule(duration, every, down time.Duration, victim int) ChaosSchedule {
	var s ChaosSchedule
	for t := every; t+down+every/2 <= duration; t += every {
		s = append(s, ChaosEvent{Kind: ChaosKill, Member: victim, At: t}, ChaosEvent{Kind: ChaosRestart, Member: victim, At: t + down})
	}
	return s
}

// SoakMemory is one member process's resident memory (VmRSS, kB) during
// a soak: at its first sample (Start), at its first sample WarmUp after
// its start (Warm; -1 if it did not live that long), at its last (End),
// and the highest (Max), over Samples samples from Begin to Last.
type SoakMemory struct {
	Index, Restart  int
	Begin, Last     time.Duration
	Samples         int
	StartKB, WarmKB int64
	EndKB, MaxKB    int64
	warmAt          time.Duration
}

// SoakReport is what RunSoak measured.
type SoakReport struct {
	Schedule ChaosSchedule
	Results  []MemberResult
	Check    ChaosReport
	// Memory has one entry per member process, by member and restart.
	Memory []SoakMemory
	// StayersLost is the messages the members that stayed report lost
	// (must be 0), Stayers those members, and Delivered what each sender
	// sent that they delivered.
	StayersLost int64
	Stayers     []int
	Delivered   map[int]int64
}

// RunSoak runs the soak: RunNetns with SoakSchedule and LinkLoss, the
// processes' VmRSS read every Sample, a progress line every 30 s.
func RunSoak(ctx context.Context, cfg SoakConfig) (SoakReport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return SoakReport{}, err
	}
	rep := SoakReport{Schedule: SoakSchedule(cfg.Duration, cfg.Every, cfg.Down, cfg.Victim), Delivered: map[int]int64{}}
	progress := progressFunc(cfg.Progress)
	mem := &soakMemory{byProc: map[[2]int]*SoakMemory{}, warmUp: cfg.WarmUp}
	lastLine := time.Duration(0)
	monitor := func(now time.Duration, live []ChaosProc) {
		mem.sample(now, live)
		if now-lastLine >= 30*time.Second {
			lastLine = now
			progress(fmt.Sprintf("soak %v of %v: %s", now.Round(time.Second), cfg.Duration, mem.line(live)))
		}
	}
	mc := MemberConfig{Members: cfg.Members, Senders: cfg.Senders, MsgSize: cfg.MsgSize, Duration: cfg.Duration, Rate: cfg.Rate,
		Dynamic: true, SampleEvery: 16}
	rs, runErr := RunNetns(ctx, NetnsRunConfig{Member: mc, Exe: cfg.Exe, Env: cfg.Env, Progress: progress,
		Chaos: rep.Schedule, LinkLoss: cfg.LinkLoss, Monitor: monitor, MonitorEvery: cfg.Sample})
	rep.Results, rep.Memory = rs, mem.list()
	if len(rs) == 0 {
		return rep, runErr
	}
	rep.Check = CheckChaos(rs)
	for _, r := range rs {
		if r.Schema == "" || !slices.ContainsFunc(r.Senders, func(s SenderResult) bool { return stayed(r, s.Sender) }) {
			continue
		}
		rep.Stayers = append(rep.Stayers, r.Index)
		for _, s := range r.Senders {
			rep.StayersLost += s.LostMsgs
			rep.Delivered[s.Index] = max(rep.Delivered[s.Index], s.Delivered)
		}
	}
	if len(rep.Check.Problems) > 0 {
		runErr = errors.Join(runErr, fmt.Errorf("bench: soak: chaos check failed: %d problems", len(rep.Check.Problems)))
	}
	return rep, runErr
}

// soakMemory collects the samples of RunSoak's processes.
type soakMemory struct {
	mu     sync.Mutex
	byProc map[[2]int]*SoakMemory
	warmUp time.Duration
}

func (m *soakMemory) sample(now time.Duration, live []ChaosProc) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range live {
		kb, err := ReadRSS(p.Pid)
		if err != nil {
			continue // exited between the listing and the read
		}
		k := [2]int{p.Index, p.Restart}
		x := m.byProc[k]
		if x == nil {
			x = &SoakMemory{Index: p.Index, Restart: p.Restart, Begin: now, StartKB: kb, WarmKB: -1, warmAt: now + m.warmUp}
			m.byProc[k] = x
		}
		if x.WarmKB < 0 && now >= x.warmAt {
			x.WarmKB = kb
		}
		x.Last, x.EndKB, x.MaxKB = now, kb, max(x.MaxKB, kb)
		x.Samples++
	}
}

// line is a progress line: each live process's memory now.
func (m *soakMemory) line(live []ChaosProc) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	parts := []string{"resident memory"}
	for _, p := range live {
		if x := m.byProc[[2]int{p.Index, p.Restart}]; x != nil {
			parts = append(parts, fmt.Sprintf("%s %.1f MB", soakProcName(p.Index, p.Restart), float64(x.EndKB)/1024))
		}
	}
	return strings.Join(parts, ", ")
}

func (m *soakMemory) list() []SoakMemory {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []SoakMemory
	for _, x := range m.byProc {
		out = append(out, *x)
	}
	slices.SortFunc(out, func(a, b SoakMemory) int {
		if a.Index != b.Index {
			return a.Index - b.Index
		}
		return a.Restart - b.Restart
	})
	return out
}

func soakProcName(i, restart int) string {
	if restart > 0 {
		return fmt.Sprintf("m%d.r%d", i, restart)
	}
	return fmt.Sprintf("m%d", i)
}

// ReadRSS returns process pid's resident memory in kB (VmRSS in
// /proc/PID/status).
func ReadRSS(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseRSS(f)
}

func parseRSS(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("bench: VmRSS %q: want N kB", v)
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("bench: no VmRSS line")
}

// WriteSoak prints a soak's figures: every process's memory, the
// members that stayed and what they lost, and the chaos check.
func WriteSoak(w io.Writer, rep SoakReport, cfg SoakConfig) {
	fmt.Fprintf(w, "resident memory (VmRSS, MB) of each member process; warm-up %v after its start:\n", cfg.WarmUp)
	fmt.Fprintf(w, "%-8s %-11s %8s %8s %8s %8s %7s\n", "process", "lived", "start", "warm-up", "end", "max", "growth")
	for _, m := range rep.Memory {
		warm, growth := "-", "-"
		if m.WarmKB >= 0 {
			warm = fmt.Sprintf("%.1f", float64(m.WarmKB)/1024)
			growth = fmt.Sprintf("%+.1f%%", 100*float64(m.EndKB-m.WarmKB)/float64(m.WarmKB))
		}
		fmt.Fprintf(w, "%-8s %-11s %8.1f %8s %8.1f %8.1f %7s\n", soakProcName(m.Index, m.Restart),
			fmt.Sprintf("%v-%v", m.Begin.Round(time.Second), m.Last.Round(time.Second)),
			float64(m.StartKB)/1024, warm, float64(m.EndKB)/1024, float64(m.MaxKB)/1024, growth)
	}
	var sent []string
	for _, s := range cfg.Senders {
		sent = append(sent, fmt.Sprintf("sender %d %d", s, rep.Delivered[s]))
	}
	fmt.Fprintf(w, "members that stayed: %v; messages they delivered: %s; messages they lost: %d\n",
		rep.Stayers, strings.Join(sent, ", "), rep.StayersLost)
	fmt.Fprint(w, rep.Check)
}
