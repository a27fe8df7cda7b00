package bench

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
)

// InjectLoss drops, inside member i's namespace, pct percent (1..99) of
// the IPv4 datagrams that arrive there from src, at random: loss between
// two members only (independent of the other receivers', unlike
// DropEgress, which drops near the sender for everyone), as the datagrams
// reach the victim. The rule (an nftables input chain, table "nakcast")
// goes with the namespace.
func (ns *Netns) InjectLoss(ctx context.Context, i int, src netip.Addr, pct int) error {
	if err := CheckNft(); err != nil {
		return err
	}
	if i < 0 || i >= len(ns.Members) || !src.Is4() || !NetnsSubnet.Contains(src) || pct < 1 || pct > 99 {
		return fmt.Errorf("bench: InjectLoss(%d, %v, %d): want a member, a member's IPv4 address and 1..99%%", i, src, pct)
	}
	for _, rule := range [][]string{
		{"add", "table", "inet", "nakcast"},
		{"add", "chain", "inet", "nakcast", "loss", "{ type filter hook input priority 0; }"},
		{"add", "rule", "inet", "nakcast", "loss", "ip", "saddr", src.String(), "numgen", "random", "mod", "100", "<", strconv.Itoa(pct), "drop"},
	} {
		if err := ipCmd(ctx, append([]string{"netns", "exec", ns.Members[i], "nft"}, rule...)...); err != nil {
			return err
		}
	}
	return nil
}
