package engine_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine"
	"github.com/nakcast/nakcast/engine/transport/memtransport"
)

// Open a member of a one-member group in push mode: every message, own
// included, is handed to the Handler on the engine's agent goroutine.
func ExampleOpen() {
	got := make(chan string, 1)
	m, err := engine.Open(context.Background(), engine.Config{
		Group: netip.MustParseAddrPort("239.255.77.1:45601"), // loopback, TTL 0 by default
		Handler: engine.HandlerFunc(func(sender digest.Member, seq uint64, payload []byte) {
			got <- fmt.Sprintf("seq %d: %s", seq, payload) // copy: payload is only valid during the call
		}),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close(context.Background())
	if err := m.Send(context.Background(), []byte("hello")); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(<-got)
	// Output: seq 1: hello
}

// Send blocks under back-pressure until its context ends; TrySend returns
// ErrBackPressure at once (Aeron's offer()).
func ExampleMember_Send() {
	m, err := engine.Open(context.Background(), engine.Config{
		Group:   netip.MustParseAddrPort("239.255.77.2:45602"),
		Handler: engine.HandlerFunc(func(digest.Member, uint64, []byte) {}),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	buf := make([]byte, 64)
	for i := range 1000 {
		buf[0] = byte(i) // the payload is copied: buf may be reused at once
		if err := m.Send(ctx, buf); err != nil {
			fmt.Println(err)
			return
		}
	}
	// Close waits until everything sent is stable (delivered everywhere).
	fmt.Println(m.Close(ctx), m.Stats().Sent)
	// Output: <nil> 1000
}

type printer struct{}

func (printer) Deliver(sender digest.Member, seq uint64, payload []byte) {
	fmt.Printf("%d %s\n", seq, payload)
}
func (printer) Lost(sender digest.Member, from, to uint64) { fmt.Println("lost", from, to) }

// SendBatch copies a batch of messages into the log buffer with one
// claim and one commit per term it fills (Send pays both per message),
// waiting under back-pressure like Send.
func ExampleMember_SendBatch() {
	var n atomic.Int64
	done := make(chan struct{})
	m, err := engine.Open(context.Background(), engine.Config{
		Group: netip.MustParseAddrPort("239.255.77.5:45605"),
		Handler: engine.HandlerFunc(func(digest.Member, uint64, []byte) {
			if n.Add(1) == 3*100 {
				close(done)
			}
		}),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	batch := make([][]byte, 100)
	for i := range batch {
		batch[i] = binary.LittleEndian.AppendUint32(nil, uint32(i))
	}
	for range 3 {
		if _, err := m.SendBatch(ctx, batch); err != nil { // copied: batch may be reused
			fmt.Println(err)
			return
		}
	}
	select {
	case <-done:
		fmt.Println("delivered", n.Load())
	case <-ctx.Done():
		fmt.Println("timeout")
	}
	// Output: delivered 300
}

// Pull mode (no Handler): the application calls Poll. On one goroutine,
// loop on TrySend and Poll: when TrySend reports back-pressure, Poll (which
// lets stability free room) and retry. Never block in Send on the
// goroutine that polls.
func ExampleMember_Poll() {
	m, err := engine.Open(context.Background(), engine.Config{
		Group: netip.MustParseAddrPort("239.255.77.3:45603"),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close(context.Background())
	pending := []string{"a", "b", "c"}
	for delivered := 0; delivered < 3; {
		for len(pending) > 0 {
			err := m.TrySend([]byte(pending[0]))
			if errors.Is(err, engine.ErrBackPressure) {
				break // poll, then retry
			}
			if err != nil {
				fmt.Println(err)
				return
			}
			pending = pending[1:]
		}
		n := m.Poll(printer{}, 16)
		if n == 0 {
			runtime.Gosched() // a real loop would do other work here
		}
		delivered += n
	}
	// Output:
	// 1 a
	// 2 b
	// 3 c
}

// With ThreadingInvoked the application runs the member's agent itself:
// one goroutine sends, runs DoWork (reads, repairs, timers, writes) and
// polls, and no goroutine of the member runs beside it (Aeron's agent
// invoker). Idle, the loop sleeps in WaitWork until a datagram, a message
// or a timer needs the agent; a latency-sensitive loop spins instead.
func ExampleMember_DoWork() {
	m, err := engine.Open(context.Background(), engine.Config{
		Group: netip.MustParseAddrPort("239.255.77.6:45606"),
		Agent: engine.AgentConfig{Threading: engine.ThreadingInvoked},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close(context.Background()) // drains on a goroutine of its own
	for _, s := range []string{"x", "y"} {
		if err := m.TrySend([]byte(s)); err != nil {
			fmt.Println(err)
			return
		}
	}
	for delivered := 0; delivered < 2; {
		work := m.DoWork()
		n := m.Poll(printer{}, 16)
		delivered += n
		if work+n == 0 {
			m.WaitWork(time.Millisecond) // idle: sleep until there is work (or spin, yield...)
		}
	}
	// Output:
	// 1 x
	// 2 y
}

// A joiner fetches the application state during Open (state transfer): the
// first member founds the group and applies three messages; the second
// joins with FetchState and starts from the first one's state.
func ExampleConfig_stateTransfer() {
	group := netip.MustParseAddrPort("239.255.77.4:45604")
	type counter struct{ n atomic.Int64 }
	app := func(c *counter) engine.Config {
		return engine.Config{
			Group:   group,
			Handler: engine.HandlerFunc(func(digest.Member, uint64, []byte) { c.n.Add(1) }),
			Membership: engine.MembershipConfig{GetState: func(w io.Writer) error {
				return binary.Write(w, binary.LittleEndian, c.n.Load())
			}, SetState: func(r io.Reader) error {
				var v int64
				err := binary.Read(r, binary.LittleEndian, &v)
				c.n.Store(v)
				return err
			}, FetchState: true},
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ca, cb counter
	a, err := engine.Open(ctx, app(&ca))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close(ctx)
	for range 3 {
		_ = a.Send(ctx, []byte("tick"))
	}
	for ca.n.Load() < 3 { // wait until a has applied its own messages
		runtime.Gosched()
	}
	b, err := engine.Open(ctx, app(&cb))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close(ctx)
	_, view := b.View()
	fmt.Println("members:", len(view), "joiner's counter:", cb.n.Load())
	// Output: members: 2 joiner's counter: 3
}

// ExampleConfig shows the layered Config: the core fields, and groups for
// the rest. Two members of a static view run on an in-memory network
// (Transport.Open) that loses a fifth of what each member receives
// (Transport.Wrap); the protocol repairs it.
func ExampleConfig() {
	net := memtransport.NewNetwork()
	view := []digest.Member{{ID: 1, Inc: 1}, {ID: 2, Inc: 1}}
	got := make(chan string, 3)
	var ms []*engine.Member
	for i, self := range view {
		cfg := engine.Config{
			Group:      netip.MustParseAddrPort("239.255.77.7:45607"),
			Self:       self,
			Membership: engine.MembershipConfig{Members: view},
			Tuning:     engine.TuningConfig{Window: 1024, NakDelay: time.Millisecond},
			Transport: engine.TransportConfig{
				Open: net.Open,
				Wrap: memtransport.Faults{Loss: 0.2, Seed: uint64(i + 1)}.WrapTransport,
			},
		}
		if i == 1 {
			cfg.Handler = engine.HandlerFunc(func(_ digest.Member, _ uint64, p []byte) { got <- string(p) })
		}
		m, err := engine.Open(context.Background(), cfg)
		if err != nil {
			fmt.Println(err)
			return
		}
		ms = append(ms, m)
	}
	for _, s := range []string{"a", "b", "c"} {
		if err := ms[0].Send(context.Background(), []byte(s)); err != nil {
			fmt.Println(err)
		}
	}
	for range 3 {
		fmt.Println(<-got)
	}
	fmt.Println(ms[1].Config().Tuning.Window, ms[1].Config().Tuning.StableInterval)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() { _ = m.Close(ctx) })
	}
	wg.Wait()
	// Output:
	// a
	// b
	// c
	// 1024 10ms
}
