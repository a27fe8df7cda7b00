package transport_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/nakcast/nakcast/engine/transport"
)

// Two members on loopback: one multicasts a batch, the other reads it and
// answers the sender by unicast.
func Example() {
	g := netip.MustParseAddrPort("239.77.2.1:0") // port 0: pick one, share it
	a, err := transport.Open(transport.Config{Group: g})
	if err != nil {
		panic(err)
	}
	defer a.Close()
	b, err := transport.Open(transport.Config{Group: a.Group()})
	if err != nil {
		panic(err)
	}
	defer b.Close()

	// A zero destination means the group.
	if _, err := a.WriteBatch([][]byte{[]byte("hello"), []byte("group")}, nil); err != nil {
		panic(err)
	}

	bufs := [][]byte{make([]byte, 1500), make([]byte, 1500)}
	sizes := make([]int, len(bufs))
	srcs := make([]netip.AddrPort, len(bufs))
	_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
	for got := 0; got < 2; {
		n, err := b.ReadBatch(bufs[got:], sizes[got:], srcs[got:])
		if err != nil {
			panic(err)
		}
		for i := got; i < got+n; i++ {
			fmt.Printf("%s from the sender: %v\n", bufs[i][:sizes[i]], srcs[i] == a.LocalAddr())
		}
		got += n
	}

	// Answer by unicast to the source of a group datagram.
	if _, err := b.WriteBatch([][]byte{[]byte("ack")}, srcs[:1]); err != nil {
		panic(err)
	}
	_ = a.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		n, err := a.ReadBatch(bufs, sizes, srcs) // a also gets its own group datagrams
		if err != nil {
			panic(err)
		}
		for i := range n {
			if srcs[i] == b.LocalAddr() {
				fmt.Printf("%s\n", bufs[i][:sizes[i]])
				return
			}
		}
	}
	// Output:
	// hello from the sender: true
	// group from the sender: true
	// ack
}
