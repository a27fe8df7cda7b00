//go:build linux

package engine_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nakcast/nakcast/bench"
	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine"
	"github.com/nakcast/nakcast/engine/transport"
	"github.com/nakcast/nakcast/engine/transport/memtransport"
)

// The multi-process tests (netns_test.go) run every member as its own
// process: the test binary re-executed inside a member namespace with
// netnsMemberEnv naming a JSON netnsMemberConfig. TestMain then runs
// netnsMemberMain instead of the tests. The member talks to the test over
// its standard streams: it prints one JSON netnsLine per event on stdout
// and obeys commands on stdin ("go": start sending; "close": write the
// result file, close gracefully, exit). Stdin closing (the test died) ends
// it too.

// netnsMemberEnv selects the member role of the test binary.
const netnsMemberEnv = "NAKCAST_ENGINE_NETNS_MEMBER"

func TestMain(m *testing.M) {
	if path := os.Getenv(netnsMemberEnv); path != "" {
		if err := netnsMemberMain(path, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "netns member:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// netnsMemberConfig is one member process's role.
type netnsMemberConfig struct {
	Index   int
	ID      uint64
	Group   netip.AddrPort
	Unicast netip.AddrPort
	// Send is how many messages this member sends after "go" (0: none;
	// -1: until killed); Small keeps every message below one datagram
	// (seqno = message index + 1).
	Send      int
	Small     bool
	RateLimit int64
	// Expect: the IDs of the senders whose PerSender messages must all be
	// delivered before this member reports done.
	Expect    []uint64
	PerSender int
	LossRate  float64
	LossSeed  uint64
	Window    int
	// FetchState makes Open fetch the application state.
	FetchState        bool
	HeartbeatInterval time.Duration
	SuspectTimeout    time.Duration
	ProbeTimeout      time.Duration
	DiscoveryTimeout  time.Duration
	// Transport is engine.Config.Transport.Backend ("": UDP).
	Transport string
	Result    string
	// KeyFile is the group key file (the run generates one): datagrams
	// are authenticated. Empty: open mode (Config.Insecure).
	KeyFile string
}

// netnsLine is one line a member prints.
type netnsLine struct {
	Ev string `json:"ev"` // open, view, suspect, unsuspect, left, state, status, sent, done
	// Self: the incarnation (open).
	Self digest.Member `json:"self,omitzero"`
	// View, Members: an installed view (view).
	View    digest.ViewID `json:"view,omitzero"`
	Members []uint64      `json:"members,omitempty"`
	// Counts is the delivered count per sender ID; CutsClosed the
	// coordinator's closed cuts (status).
	Counts     map[uint64]int `json:"counts,omitempty"`
	CutsClosed uint64         `json:"cuts_closed,omitempty"`
	Sender     uint64         `json:"sender,omitempty"`
	N          int            `json:"n,omitempty"`
	Err        string         `json:"err,omitempty"`
}

// netnsSenderResult is what a member delivered of one sender incarnation.
type netnsSenderResult struct {
	Sender digest.Member
	Count  int
	Last   uint64
	Hash   uint64
	Lost   [][2]uint64
	Errs   []string
}

// netnsResult is a member's result file.
type netnsResult struct {
	Index   int
	Self    digest.Member
	View    digest.ViewID
	Members []digest.Member
	Senders []netnsSenderResult
	// State: the per-sender counts installed by state transfer (nil when
	// none was); Installs how many states were installed.
	State    map[uint64]int
	Installs int
	// After counts the messages delivered after the last state install
	// (all of them when none was installed).
	After    int
	Left     []string // EventLeft errors (an exclusion by mistake)
	Stats    engine.Stats
	Injected uint64 // datagrams the loss injection dropped
	CloseErr string
}

// sender returns the result for sender ID id: its only incarnation (an
// error if it has several: it was excluded and rejoined).
func (r *netnsResult) sender(id uint64) (netnsSenderResult, error) {
	var out []netnsSenderResult
	for _, s := range r.Senders {
		if s.Sender.ID == id {
			out = append(out, s)
		}
	}
	switch len(out) {
	case 0:
		return netnsSenderResult{}, nil
	case 1:
		return out[0], nil
	}
	return out[0], fmt.Errorf("member %d delivered %d incarnations of sender %d (excluded by mistake and rejoined?): %+v", r.Index, len(out), id, out)
}

// netnsApp is the replicated application of the member processes: per
// sender incarnation, the count of messages applied, the last seqno and
// an order-sensitive hash of the payloads, all of it serialised as the
// state for state transfer.
type netnsApp struct {
	mu       sync.Mutex
	s        map[digest.Member]*netnsSenderResult
	state    map[uint64]int
	installs int
	after    int
}

func newNetnsApp() *netnsApp {
	return &netnsApp{s: map[digest.Member]*netnsSenderResult{}}
}

func (a *netnsApp) rec(s digest.Member) *netnsSenderResult {
	r := a.s[s]
	if r == nil {
		r = &netnsSenderResult{Sender: s}
		a.s[s] = r
	}
	return r
}

// Deliver implements engine.Handler.
func (a *netnsApp) Deliver(s digest.Member, seq uint64, p []byte) {
	a.mu.Lock()
	r := a.rec(s)
	if seq <= r.Last && len(r.Errs) < 10 { // fragmented messages skip seqnos
		r.Errs = append(r.Errs, fmt.Sprintf("seq %d after %d", seq, r.Last))
	}
	r.Last = seq
	r.Count++
	r.Hash = netnsHash(r.Hash, p)
	a.after++
	a.mu.Unlock()
}

// Lost implements engine.Handler.
func (a *netnsApp) Lost(s digest.Member, from, to uint64) {
	a.mu.Lock()
	r := a.rec(s)
	r.Lost = append(r.Lost, [2]uint64{from, to})
	r.Last = max(r.Last, to)
	a.mu.Unlock()
}

const netnsStateRecord = 12 + 8 + 8 + 8

func (a *netnsApp) getState(w io.Writer) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b []byte
	for _, s := range slices.SortedFunc(maps.Keys(a.s), func(x, y digest.Member) int {
		return cmp.Or(cmp.Compare(x.ID, y.ID), cmp.Compare(x.Inc, y.Inc))
	}) {
		r := a.s[s]
		b = binary.LittleEndian.AppendUint64(b, s.ID)
		b = binary.LittleEndian.AppendUint32(b, s.Inc)
		b = binary.LittleEndian.AppendUint64(b, uint64(r.Count))
		b = binary.LittleEndian.AppendUint64(b, r.Last)
		b = binary.LittleEndian.AppendUint64(b, r.Hash)
	}
	_, err := w.Write(b)
	return err
}

func (a *netnsApp) setState(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if len(b)%netnsStateRecord != 0 {
		return fmt.Errorf("state of %d bytes: not a multiple of %d", len(b), netnsStateRecord)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.s)
	a.state = map[uint64]int{}
	for ; len(b) > 0; b = b[netnsStateRecord:] {
		s := digest.Member{ID: binary.LittleEndian.Uint64(b), Inc: binary.LittleEndian.Uint32(b[8:])}
		r := a.rec(s)
		r.Count = int(binary.LittleEndian.Uint64(b[12:]))
		r.Last = binary.LittleEndian.Uint64(b[20:])
		r.Hash = binary.LittleEndian.Uint64(b[28:])
		a.state[s.ID] += r.Count
	}
	a.installs++
	a.after = 0
	return nil
}

// counts returns the delivered count per sender ID (all incarnations).
func (a *netnsApp) counts() map[uint64]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := make(map[uint64]int, len(a.s))
	for s, r := range a.s {
		c[s.ID] += r.Count
	}
	return c
}

// netnsHash folds payload p into the order-sensitive hash h.
func netnsHash(h uint64, p []byte) uint64 {
	f := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], h)
	f.Write(b[:])
	f.Write(p)
	return f.Sum64()
}

// netnsPayload fills message i of sender index k: 16..400 bytes, every
// 101st 3000 bytes (fragmented at MTU 1500) unless small.
func netnsPayload(buf []byte, k, i int, small bool) []byte {
	n := 16 + (i*37+k*11)%385
	if !small && i%101 == 100 {
		n = 3000
	}
	b := buf[:n]
	x := uint64(k)<<40 ^ uint64(i)*0x9e3779b97f4a7c15
	for j := range b {
		b[j] = byte(x >> (8 * (j % 8)))
		if j%8 == 7 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	return b
}

// netnsExpectedHash is the hash of sender k's messages with indices in
// [0, n) for which keep returns true (nil: all).
func netnsExpectedHash(k, n int, small bool, keep func(i int) bool) (uint64, int) {
	buf := make([]byte, 4096)
	var h uint64
	count := 0
	for i := range n {
		if keep != nil && !keep(i) {
			continue
		}
		h = netnsHash(h, netnsPayload(buf, k, i, small))
		count++
	}
	return h, count
}

// netnsMemberMain is the member process.
func netnsMemberMain(path string, stdin io.Reader, stdout io.Writer) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var mc netnsMemberConfig
	if err := json.Unmarshal(b, &mc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	// The test ends us through stdin or SIGKILL; this bounds a member
	// whose test was lost anyway.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var outMu sync.Mutex
	enc := json.NewEncoder(stdout)
	emit := func(l netnsLine) {
		outMu.Lock()
		defer outMu.Unlock()
		_ = enc.Encode(l)
	}
	cmds := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			cmds <- sc.Text()
		}
		close(cmds)
	}()

	app := newNetnsApp()
	keys, _, err := bench.ReadKeyFile(mc.KeyFile)
	if err != nil {
		return err
	}
	cfg := engine.Config{
		Keys:       keys,
		Insecure:   len(keys) == 0,
		Group:      mc.Group,
		Interface:  "eth0",
		Self:       digest.Member{ID: mc.ID, Inc: 1},
		Handler:    app,
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Network:    engine.NetworkConfig{TTL: 1, Unicast: mc.Unicast, AllowNonLoopback: true},
		Membership: engine.MembershipConfig{GetState: app.getState, SetState: app.setState, FetchState: mc.FetchState, HeartbeatInterval: mc.HeartbeatInterval, SuspectTimeout: mc.SuspectTimeout, ProbeTimeout: mc.ProbeTimeout, DiscoveryTimeout: mc.DiscoveryTimeout},
		Tuning:     engine.TuningConfig{RateLimit: mc.RateLimit, Window: mc.Window},
		Transport:  engine.TransportConfig{Backend: mc.Transport},
	}
	var faulty *memtransport.Faulty
	if mc.LossRate > 0 {
		cfg.Transport.Wrap = func(t transport.Transport) transport.Transport {
			faulty = memtransport.Faults{Loss: mc.LossRate, Seed: mc.LossSeed}.Wrap(t)
			return faulty
		}
	}
	octx, ocancel := context.WithTimeout(ctx, 60*time.Second)
	m, err := engine.Open(octx, cfg)
	ocancel()
	if err != nil {
		return err
	}
	emit(netnsLine{Ev: "open", Self: m.Self()})

	var leftMu sync.Mutex
	var left []string
	go func() {
		for {
			e, err := m.NextEvent(ctx)
			if err != nil {
				return
			}
			switch e.Kind {
			case engine.EventView:
				l := netnsLine{Ev: "view", View: e.View}
				for _, x := range e.Members {
					l.Members = append(l.Members, x.ID)
				}
				emit(l)
			case engine.EventSuspect:
				emit(netnsLine{Ev: "suspect", Sender: e.Sender.ID})
			case engine.EventUnsuspect:
				emit(netnsLine{Ev: "unsuspect", Sender: e.Sender.ID})
			case engine.EventLeft:
				if e.Err == nil {
					emit(netnsLine{Ev: "closed"}) // the graceful leave of Close
					continue
				}
				leftMu.Lock()
				left = append(left, e.Err.Error())
				leftMu.Unlock()
				emit(netnsLine{Ev: "left", Err: e.Err.Error()})
			case engine.EventState:
				emit(netnsLine{Ev: "state", Err: errString(e.Err)})
			}
		}
	}()

	// Status: delivered counts (and the coordinator's closed cuts)
	// whenever they change, and done once every expected message is in.
	statusDone := make(chan struct{})
	defer close(statusDone)
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		var last netnsLine
		done := false
		for {
			select {
			case <-statusDone:
				return
			case <-tick.C:
			}
			l := netnsLine{Ev: "status", Counts: app.counts(), CutsClosed: m.Stats().Membership.CutsClosed}
			if !maps.Equal(l.Counts, last.Counts) || l.CutsClosed != last.CutsClosed {
				emit(l)
				last = l
			}
			if !done && len(mc.Expect) > 0 {
				done = true
				for _, id := range mc.Expect {
					done = done && l.Counts[id] >= mc.PerSender
				}
				if done {
					emit(netnsLine{Ev: "done"})
				}
			}
		}
	}()

	sendDone := make(chan struct{})
	started := false
	for {
		cmd, ok := <-cmds
		switch {
		case !ok:
			return errors.New("stdin closed: the test is gone")
		case cmd == "go" && !started:
			started = true
			go func() {
				defer close(sendDone)
				buf := make([]byte, 4096)
				for i := 0; mc.Send < 0 || i < mc.Send; i++ {
					if err := m.Send(ctx, netnsPayload(buf, mc.Index, i, mc.Small)); err != nil {
						emit(netnsLine{Ev: "send-error", N: i, Err: err.Error()})
						return
					}
				}
				emit(netnsLine{Ev: "sent", N: mc.Send})
			}()
		case cmd == "close":
			res := netnsResult{Index: mc.Index, Self: m.Self()}
			res.View, res.Members = m.View()
			cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
			if err := m.Close(cctx); err != nil {
				res.CloseErr = err.Error()
			}
			ccancel()
			res.Stats = m.Stats()
			if faulty != nil {
				res.Injected = faulty.Counts().Dropped
			}
			app.mu.Lock()
			for _, s := range slices.SortedFunc(maps.Keys(app.s), func(x, y digest.Member) int {
				return cmp.Or(cmp.Compare(x.ID, y.ID), cmp.Compare(x.Inc, y.Inc))
			}) {
				res.Senders = append(res.Senders, *app.s[s])
			}
			res.State, res.Installs, res.After = app.state, app.installs, app.after
			app.mu.Unlock()
			leftMu.Lock()
			res.Left = left
			leftMu.Unlock()
			b, err := json.Marshal(res)
			if err != nil {
				return err
			}
			if err := os.WriteFile(mc.Result+".tmp", b, 0o600); err != nil {
				return err
			}
			return os.Rename(mc.Result+".tmp", mc.Result)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
