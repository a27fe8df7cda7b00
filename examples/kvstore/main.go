// Command kvstore is a small replicated key-value map over nakcast: every
// member multicasts its writes and applies everyone's, so all members
// converge on the same map. Run it in two or more terminals (loopback,
// TTL 0):
//
//	go run ./examples/kvstore
//	go run ./examples/kvstore
//
// then type commands: "set KEY VALUE", "del KEY", "get KEY", "dump",
// "view", "stats", "quit". The first member founds the group; each later
// one joins it (multicast discovery) and fetches the current map from a
// member by state transfer before it accepts commands, so a late joiner
// starts with every write made before it came. "quit" leaves the group
// gracefully; a member killed with Ctrl-\ is excluded by the others after
// the suspicion timeout.
//
// With -members 1,2 -id 1 (and -id 2) the members form a static group
// instead: no join, no state transfer; a write made before the other member
// started is kept and repaired to it when it comes up.
//
// nakcast delivers each sender's messages in order, exactly once, but does
// not order different senders' messages. The store converges anyway: every
// write carries a Lamport timestamp and its writer's id, and a key keeps the
// write with the highest (timestamp, writer), whatever order writes arrive
// in (last-writer-wins).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine"
)

func main() {
	id := flag.Uint64("id", 0, "this member's id (0: random; with -members, listed in it)")
	members := flag.String("members", "", "comma-separated member ids of a static group, coordinator first (default: join dynamically)")
	group := flag.String("group", "239.255.0.1:45588", "multicast group (239.0.0.0/8) and port")
	verbose := flag.Bool("v", false, "log engine debug messages")
	flag.Parse()
	if err := run(*id, *members, *group, *verbose, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kvstore:", err)
		os.Exit(1)
	}
}

// open opens a store's member: with dynamic membership (cfg.Members nil)
// it joins the group and fetches the map from a member before returning.
func open(ctx context.Context, cfg engine.Config) (*engine.Member, *Store, error) {
	st := NewStore(cfg.Self.ID)
	cfg.Handler = st
	if cfg.Membership.Members == nil {
		cfg.Membership.GetState, cfg.Membership.SetState, cfg.Membership.FetchState = st.WriteState, st.ReadState, true
	}
	m, err := engine.Open(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	st.SetSelf(m.Self().ID)
	return m, st, nil
}

func run(id uint64, members, group string, verbose bool, in io.Reader, out io.Writer) error {
	var ms []digest.Member
	for _, f := range strings.Split(members, ",") {
		if members == "" {
			break
		}
		v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil || v == 0 {
			return fmt.Errorf("-members %q: %q is not a non-zero id", members, f)
		}
		ms = append(ms, digest.Member{ID: v, Inc: 1})
	}
	g, err := netip.ParseAddrPort(group)
	if err != nil {
		return fmt.Errorf("-group %q: %v", group, err)
	}
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelDebug
	}
	cfg := engine.Config{
		Group:      g,
		Self:       digest.Member{ID: id, Inc: 1},
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
		Membership: engine.MembershipConfig{Members: ms},
	}
	if id == 0 {
		cfg.Self = digest.Member{}
	}
	m, st, err := open(context.Background(), cfg)
	if err != nil {
		return err
	}
	id = m.Self().ID
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			fmt.Fprintln(out, "close:", err)
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	_, view := m.View()
	fmt.Fprintf(out, "member %v of %v on %v; commands: set KEY VALUE | del KEY | get KEY | dump | view | stats | quit\n", m.Self(), view, g)
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "set" && len(f) >= 3:
			err = m.Send(ctx, st.Encode(f[1], strings.Join(f[2:], " "), false))
		case f[0] == "del" && len(f) == 2:
			err = m.Send(ctx, st.Encode(f[1], "", true))
		case f[0] == "get" && len(f) == 2:
			v, ok := st.Get(f[1])
			fmt.Fprintf(out, "%s = %q (%v)\n", f[1], v, ok)
		case f[0] == "dump":
			for _, kv := range st.Dump() {
				fmt.Fprintln(out, kv)
			}
		case f[0] == "view":
			vid, view := m.View()
			fmt.Fprintf(out, "view %v %v\n", vid, view)
		case f[0] == "stats":
			s := m.Stats()
			fmt.Fprintf(out, "sent %d delivered %d retransmitted %d naks %d windows %v\n", s.Sent, s.Delivered, s.Retransmitted, s.NakSent, s.Senders)
		case f[0] == "quit":
			return nil
		default:
			fmt.Fprintln(out, "commands: set KEY VALUE | del KEY | get KEY | dump | view | stats | quit")
		}
		if err != nil {
			return err
		}
	}
	return sc.Err()
}
