package gms_test

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/gms"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/wire"
)

// member is what a driver keeps per member: its GMS, the nakack of its
// current incarnation (gms asks for one through Config.NewProtocol) and a
// buffer pool for received datagrams.
type member struct {
	g    *gms.GMS
	nk   *gms.NakackProtocol
	pool *wire.Pool
	name string
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newMember(id uint64, found bool) *member {
	m := &member{pool: wire.NewPool(8<<10, 0), name: strconv.FormatUint(id, 10)}
	g, err := gms.New(gms.Config{
		Group: 7, ID: id, Addr: m.name, Seed: id, CreateGroup: found, Logger: quiet,
		NewProtocol: func(self digest.Member, now time.Duration) (gms.Protocol, error) {
			p, err := nakack.New(nakack.Config{Self: self, Group: 7, Pool: m.pool, Seed: id, Logger: quiet})
			m.nk = &gms.NakackProtocol{P: p}
			return m.nk, err
		},
	})
	if err != nil {
		panic(err)
	}
	m.g = g
	return m
}

// receive routes one datagram: membership types to gms, the rest to nakack.
func (m *member) receive(b []byte, now time.Duration) {
	if len(b) > 2 && gms.IsMembership(wire.Type(b[2])) {
		_ = m.g.Receive(b, now)
		return
	}
	if m.g.Protocol() == nil {
		return
	}
	buf := m.pool.Get(len(b))
	buf.N = copy(buf.B, b)
	_ = m.nk.P.Receive(buf, now) // nakack keeps its own references
	buf.Release()
}

// printer is a nakack.Handler that prints what it is given.
type printer struct{ name string }

func (p printer) Deliver(s digest.Member, seq uint64, payload []byte) {
	fmt.Printf("%s got %q (#%d from %d)\n", p.name, payload, seq, s.ID)
}
func (p printer) Lost(s digest.Member, from, to uint64) {}

// step is one turn of the driver's loop for every member: deliver what
// is in the outboxes (gms's and nakack's; To zero = multicast, otherwise
// unicast to To.Addr), then Tick whatever is due and move the virtual
// clock to the next deadline. A real driver (engine/) does the same with
// sockets and a timer wheel.
func step(ms []*member, now time.Duration) time.Duration {
	type dgram struct {
		to   string // "" = everyone else
		from *member
		b    []byte
	}
	var out []dgram
	for _, m := range ms {
		for _, o := range m.g.Outbox() {
			out = append(out, dgram{o.To.Addr, m, append([]byte(nil), o.Data...)})
		}
		m.g.ClearOutbox()
		if m.g.Protocol() != nil {
			for _, o := range m.nk.P.Outbox() {
				to := ""
				if !o.To.IsZero() {
					to = strconv.FormatUint(o.To.ID, 10)
				}
				out = append(out, dgram{to, m, append([]byte(nil), o.Buf.Bytes()...)})
				o.Buf.Release()
			}
			m.nk.P.ClearOutbox()
		}
	}
	for _, d := range out {
		for _, m := range ms {
			if m != d.from && (d.to == "" || d.to == m.name) {
				m.receive(d.b, now)
			}
		}
	}
	next := now + 100*time.Millisecond
	for _, m := range ms {
		m.g.Tick(now)
		next = min(next, m.g.NextDeadline())
		if m.g.Protocol() != nil {
			m.nk.P.Tick(now)
			next = min(next, m.nk.P.NextDeadline())
		}
	}
	if len(out) > 0 {
		return now + time.Millisecond // let answers flow before sleeping
	}
	return max(next, now+time.Millisecond)
}

// A driver creates one GMS per process, calls Join, and then loops:
// hand received datagrams to Receive, call Tick at NextDeadline, send
// what Outbox holds. Member 1 founds the group (nobody answers its
// discovery); member 2 discovers it and joins.
func Example() {
	ms := []*member{newMember(1, true), newMember(2, false)}
	now := time.Duration(0)
	_ = ms[0].g.Join(now)
	for now < 200*time.Millisecond {
		now = step(ms, now)
	}
	_ = ms[1].g.Join(now)
	for ms[1].g.Status() != gms.StatusMember || len(ms[0].g.View().Members) != 2 {
		now = step(ms, now)
	}
	for _, m := range ms {
		fmt.Println(m.name, m.g.Status(), len(m.g.View().Members), "members, coordinator", m.g.View().Coord().Addr)
	}
	// Output:
	// 1 member 2 members, coordinator 1
	// 2 member 2 members, coordinator 1
}

// Once a member, the application sends and polls through the member's
// protocol (gms created it for this incarnation: Protocol, or the
// driver's own reference to it).
func Example_send() {
	ms := []*member{newMember(1, true), newMember(2, false)}
	now := time.Duration(0)
	_ = ms[0].g.Join(now)
	for now < 200*time.Millisecond {
		now = step(ms, now)
	}
	_ = ms[1].g.Join(now)
	for ms[1].g.Status() != gms.StatusMember || len(ms[0].g.View().Members) != 2 {
		now = step(ms, now)
	}
	if _, err := ms[1].nk.P.Send([]byte("hello"), now); err != nil {
		panic(err)
	}
	ms[1].nk.P.Flush(now)
	for i := 0; i < 5; i++ {
		now = step(ms, now)
		ms[0].nk.P.Poll(printer{"1"}, 64)
	}
	// Output:
	// 1 got "hello" (#1 from 2)
}
