package engine

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine/transport"
	"github.com/nakcast/nakcast/engine/transport/memtransport"
	"github.com/stretchr/testify/require"
)

// testGroup returns a fresh loopback group: 239.77.x.y and a random port, so
// concurrent test binaries (and other packages' tests) do not share traffic.
func testGroup() netip.AddrPort {
	a := netip.AddrFrom4([4]byte{239, 77, byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
	return netip.AddrPortFrom(a, uint16(20000+rand.IntN(40000)))
}

// testMembers returns n member identities.
func testMembers(n int) []digest.Member {
	ms := make([]digest.Member, n)
	base := rand.Uint64() &^ 0xff
	for i := range ms {
		ms[i] = digest.Member{ID: base + uint64(i+1), Inc: 1}
	}
	return ms
}

// openGroup opens n members of one static group on loopback; mod may adjust
// each member's config. Members are closed at test end.
func openGroup(t testing.TB, n int, mod func(i int, c *Config)) []*Member {
	t.Helper()
	g := testGroup()
	ids := testMembers(n)
	out := make([]*Member, n)
	for i := range out {
		c := Config{Group: g, Self: ids[i], Logger: quietLogger(), Membership: MembershipConfig{Members: ids}}
		if mod != nil {
			mod(i, &c)
		}
		m, err := Open(context.Background(), c)
		require.NoError(t, err)
		out[i] = m
	}
	t.Cleanup(func() {
		for i, err := range closeAll(t, out, 10*time.Second) {
			if err != nil {
				t.Errorf("close member %d: %v", i, err)
			}
		}
	})
	return out
}

// closeAll closes every member concurrently (so stability can complete).
func closeAll(t testing.TB, ms []*Member, d time.Duration) []error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = m.Close(ctx) }()
	}
	wg.Wait()
	return errs
}

// recorder is a Handler that checks per-sender order and keeps a count and
// an order-sensitive hash (FNV-1a over seqno and payload) per sender.
type recorder struct {
	mu    sync.Mutex
	last  map[digest.Member]uint64
	count map[digest.Member]int
	hash  map[digest.Member]uint64
	lost  int
	errs  []string
	total int
	cond  chan struct{}
	want  int
	// notify is signalled (without blocking) after every delivery and
	// state install: waitFor's wake-up.
	notify chan struct{}
	// installs counts states installed (state transfer tests).
	installs int
	// lostRanges are the lost ranges reported, per sender, in order.
	lostRanges map[digest.Member][][2]uint64
}

func newRecorder(want int) *recorder {
	return &recorder{last: map[digest.Member]uint64{}, count: map[digest.Member]int{},
		hash: map[digest.Member]uint64{}, cond: make(chan struct{}), want: want, notify: make(chan struct{}, 1)}
}

// sendAndWait sends n messages of varied sizes (100..999 bytes) from m
// and waits, at most 30s, until rec has all it wants.
func sendAndWait(t *testing.T, m *Member, rec *recorder, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		require.NoError(t, m.Send(ctx, payloadOf(0, i, 100+i%900)))
	}
	select {
	case <-rec.cond:
	case <-ctx.Done():
		t.Fatalf("receiver got %d of %d", rec.total, n)
	}
}

// signal wakes waitFor.
func (r *recorder) signal() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// waitFor waits until cond (called with r.mu held) holds or ctx ends.
func (r *recorder) waitFor(ctx context.Context, cond func() bool) error {
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-r.notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *recorder) Deliver(s digest.Member, seq uint64, p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if seq <= r.last[s] && len(r.errs) < 10 { // fragmented messages skip seqnos
		r.errs = append(r.errs, fmt.Sprintf("sender %v: seq %d after %d", s, seq, r.last[s]))
	}
	r.last[s] = seq
	r.count[s]++
	h := fnv.New64a()
	var b [8]byte
	x := r.hash[s]
	for i := range b {
		b[i] = byte(x >> (8 * i))
	}
	h.Write(b[:])
	h.Write(p)
	r.hash[s] = h.Sum64()
	r.total++
	if r.total == r.want {
		close(r.cond)
	}
	r.signal()
}

func (r *recorder) Lost(s digest.Member, from, to uint64) {
	r.mu.Lock()
	r.lost++
	r.errs = append(r.errs, fmt.Sprintf("lost %v %d..%d", s, from, to))
	if r.lostRanges == nil {
		r.lostRanges = map[digest.Member][][2]uint64{}
	}
	r.lostRanges[s] = append(r.lostRanges[s], [2]uint64{from, to})
	r.mu.Unlock()
}

// expectedHash is the recorder hash of payloads gen(0..n-1) from one sender.
func expectedHash(n int, gen func(i int) []byte) uint64 {
	r := newRecorder(-1)
	s := digest.Member{ID: 1}
	for i := range n {
		r.Deliver(s, uint64(i+1), gen(i))
	}
	return r.hash[s]
}

// requireHash waits until each recorder has delivered all it expects
// (its cond closes), then checks that it saw no error and that from's
// messages hash to want.
func requireHash(ctx context.Context, t *testing.T, recs []*recorder, from digest.Member, want uint64) {
	t.Helper()
	for _, r := range recs {
		select {
		case <-r.cond:
		case <-ctx.Done():
			r.mu.Lock()
			total := r.total
			r.mu.Unlock()
			t.Fatalf("delivered %d messages, then %v", total, ctx.Err())
		}
		r.mu.Lock()
		require.Empty(t, r.errs)
		require.Equal(t, want, r.hash[from])
		r.mu.Unlock()
	}
}

// payloadOf is the test payload of message i of sender k, size bytes
// (at least 12).
func payloadOf(k, i, size int) []byte {
	b := make([]byte, size)
	fillPayload(b, k, i)
	return b
}

func fillPayload(b []byte, k, i int) {
	x := uint64(k)<<40 ^ uint64(i)*0x9e3779b97f4a7c15
	for j := range b {
		b[j] = byte(x >> (8 * (j % 8)))
		if j%8 == 7 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
}

// goroutines is a snapshot of the running goroutines that run nakcast
// code or were started by it (test runners excepted), by goroutine id:
// what a test compares instead of runtime.NumGoroutine, whose count moves
// with every unrelated goroutine (an earlier test's still exiting, the
// runtime's, the testing package's).
type goroutines map[string]string

// nakcastGoroutines takes that snapshot.
func nakcastGoroutines() goroutines {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	gs := goroutines{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		id, _, ok := strings.Cut(strings.TrimPrefix(g, "goroutine "), " ")
		if ok && strings.Contains(g, "github.com/nakcast/nakcast/") && !strings.Contains(g, "testing.tRunner") {
			gs[id] = g
		}
	}
	return gs
}

// since returns the stacks of gs's goroutines that base does not have.
func (gs goroutines) since(base goroutines) []string {
	var out []string
	for id, g := range gs {
		if _, ok := base[id]; !ok {
			out = append(out, g)
		}
	}
	return out
}

// checkNoLeak fails if nakcast goroutines started after base are still
// running after a grace period polled without sleeping as
// synchronisation: it retries until they are gone or the deadline
// passes, and prints the stacks of what is left.
func checkNoLeak(t testing.TB, base goroutines) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(nakcastGoroutines().since(base)) > 0 && time.Now().Before(deadline) {
		runtime.Gosched()
		time.Sleep(time.Millisecond) // not synchronisation: polling a condition with a bound
	}
	if left := nakcastGoroutines().since(base); len(left) > 0 {
		t.Fatalf("goroutine leak: %d nakcast goroutines started since the test began still run\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// memNet is the in-memory network (memtransport) the package's tests put
// members on to inject faults at their receivers.
var memNet = memtransport.NewNetwork()

// Faults the tests inject.
var (
	none  = memtransport.Faults{}
	loss5 = memtransport.Faults{Loss: 0.05}
	messy = memtransport.Faults{Loss: 0.05, Duplicate: 0.05, Reorder: 0.05}
)

// faultCounter reads what the fault injector of one member did; a nil
// counter (a member without faults) reads zero.
type faultCounter struct {
	p atomic.Pointer[memtransport.Faulty]
}

func (fc *faultCounter) counts() memtransport.FaultCounts {
	if fc == nil {
		return memtransport.FaultCounts{}
	}
	if f := fc.p.Load(); f != nil {
		return f.Counts()
	}
	return memtransport.FaultCounts{}
}

// overMem puts c's member on memNet, in place of the UDP backend, with f
// applied to what it receives (none: nothing). Every member of a group
// must be on memNet to hear the others.
func overMem(c *Config, f memtransport.Faults) *faultCounter {
	c.Transport.Open = memNet.Open
	return wrapFaults(c, f)
}

// wrapFaults applies f to what c's member receives, over the transport it
// opens (UDP for a test that needs real sockets: a raw attacker).
func wrapFaults(c *Config, f memtransport.Faults) *faultCounter {
	fc := &faultCounter{}
	c.Transport.Wrap = func(t transport.Transport) transport.Transport {
		x := f.Wrap(t)
		fc.p.Store(x)
		return x
	}
	return fc
}
