// Command hello is the README's program: two members of one group, on
// loopback, in one process; b joins the group a founded and prints what a sends.
package main

import (
	"context"
	"fmt"
	"log"
	"net/netip"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine"
)

func main() {
	ctx := context.Background()
	open := func(h engine.HandlerFunc) *engine.Member {
		m, err := engine.Open(ctx, engine.Config{
			Group:   netip.MustParseAddrPort("239.255.0.9:45609"), // loopback, TTL 0 by default
			Handler: h,
		})
		if err != nil {
			log.Fatal(err)
		}
		return m
	}
	// a finds no group, so it founds one; it delivers its own messages too.
	a := open(func(digest.Member, uint64, []byte) {})
	defer a.Close(ctx) // waits until all a sent is delivered everywhere, then leaves
	got := make(chan string, 2)
	b := open(func(from digest.Member, seq uint64, p []byte) { // joins a's group
		got <- fmt.Sprintf("seq %d: %s", seq, p) // on b's agent goroutine; p is valid during the call
	})
	defer b.Close(ctx)
	for _, s := range []string{"hello", "multicast"} {
		if err := a.Send(ctx, []byte(s)); err != nil { // copies s; blocks under back-pressure
			log.Fatal(err)
		}
	}
	fmt.Println(<-got)
	fmt.Println(<-got)
}
