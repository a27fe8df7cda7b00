package gms

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/stretchr/testify/require"
)

// churnSlack is how many entries beyond the view's size the per-member
// maps of TestChurnBoundsMembershipState may hold: the cuts still open or
// kept closed (closedCutKept) for the one or two members each round
// removes. Before the fix a long-lived coordinator held one more cut per
// departure and every member one more memberCut, for ever.
const churnSlack = 3

// TestChurnBoundsMembershipState (simulator, fake protocol, loss up to 5%,
// every member sending): a group of five goes through many rounds of
// churn. Each round one member (the coordinator in about one round in
// five) goes, as a departed sender whose cut is fixed and closed, and its
// process comes back as a new member: it crashes and a process with a new
// id joins, or it is cut off one way until it is excluded and rejoins as
// a new incarnation (it learns of its exclusion from the view), or it
// leaves gracefully and rejoins as a new incarnation. In about half the
// rounds that keep the coordinator, one survivor misses the close of the
// departed sender's cut until the coordinator has forgotten the cut: its
// window stays open, it reports the sender to the coordinator unasked, and
// the coordinator cuts it again, which closes it.
//
// After every event, at every running node: the coordinator's cuts, the
// survivors' pending cuts and open windows hold at most the view's size
// plus churnSlack entries; failure detection knows only members of the
// view; a joiner keeps at most maxJoinIncs incarnations. Each round ends
// with every running node in one view with nothing pending; at the end
// no cut is open anywhere, and the fake protocol and applications saw
// every sender's messages in order, exactly once or reported lost.
func TestChurnBoundsMembershipState(t *testing.T) {
	const rounds = 24
	stuckSeen := 0
	var maxCuts, maxMcuts, maxOpen int
	for seed := range uint64(seeds(8, 2)) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := newHarness(t, seed, lossyNet(seed, 0.05))
			live := []*node{h.add(1), h.add(2), h.add(3), h.add(4), h.add(5)}
			nextID := uint64(6)
			h.formGroup(live...)
			const every = 10 * time.Millisecond
			forever := time.Duration(1<<62 - 1)
			for _, n := range live {
				h.traffic(n, h.s.Now(), forever, every)
			}
			h.s.AddCheck(func(now time.Duration) error {
				for _, n := range h.up() {
					g := n.g
					v := len(g.View().Members)
					if len(g.cuts) > v+churnSlack || len(g.mcuts) > v+churnSlack || len(g.open) > v+churnSlack {
						return fmt.Errorf("node %d (view of %d): %d cuts, %d member cuts, %d open windows",
							n.id, v, len(g.cuts), len(g.mcuts), len(g.open))
					}
					maxCuts, maxMcuts, maxOpen = max(maxCuts, len(g.cuts)), max(maxMcuts, len(g.mcuts)), max(maxOpen, len(g.open))
					f := &g.fd
					for _, m := range []map[digest.Member]time.Duration{f.lastHeard, f.probing, f.quiet} {
						for k := range m {
							if !g.View().Contains(k) {
								return fmt.Errorf("node %d: failure detection keeps %v, not in %v", n.id, k, g.View())
							}
						}
					}
					for k := range f.suspected {
						if !g.View().Contains(k) {
							return fmt.Errorf("node %d: suspects %v, not in %v", n.id, k, g.View())
						}
					}
					if len(g.join.incs) > maxJoinIncs {
						return fmt.Errorf("node %d: %d join incarnations", n.id, len(g.join.incs))
					}
				}
				return nil
			})
			// Drops: blocked is cut off one way (while it is that
			// incarnation, a member, and in excluder's view: then it
			// learns of its exclusion from the view or a notice); the close of stuckSender's cut
			// does not reach stuckAt until its coordinator forgot the cut.
			var blocked digest.Member
			var blockedNode, excluder, stuckAt, stuckCoord *node
			var stuckSender digest.Member
			stuckForgotten := false
			h.drop = func(from, to digest.Member, b []byte) bool {
				if blockedNode != nil && from == blockedNode.Member() && blockedNode.self() == blocked &&
					blockedNode.g.Status() == StatusMember && excluder.g.View().Contains(blocked) {
					return true
				}
				if stuckAt != nil && to == stuckAt.Member() && !stuckForgotten {
					if m := membershipMsg(b); m != nil && m.typ == typeCut && m.kind == 1 && m.member == stuckSender {
						return true
					}
				}
				return false
			}
			// stuckForgotten: the coordinator closed the cut, then forgot
			// it, then cut the sender again (closes sent before may still
			// be on their way: they are dropped until then).
			stuckClosed, stuckGone := false, false
			h.s.AddCheck(func(time.Duration) error {
				if stuckAt != nil && !stuckForgotten {
					c := stuckCoord.g.cuts[stuckSender]
					stuckClosed = stuckClosed || (c != nil && c.closed)
					stuckGone = stuckGone || (stuckClosed && c == nil)
					stuckForgotten = stuckGone && c != nil
				}
				return nil
			})
			r := rand.New(rand.NewPCG(seed, 41))
			for round := range rounds {
				vs := byView(live[0].g.View(), live)
				require.Len(t, vs, len(live))
				coord := vs[0]
				victim := vs[r.IntN(len(vs))]
				if r.IntN(5) != 0 {
					victim = vs[1+r.IntN(len(vs)-1)]
				}
				vm := victim.self()
				surv := without(live, victim)
				stuckAt, stuckClosed, stuckGone, stuckForgotten = nil, false, false, false
				if victim != coord && r.IntN(2) == 0 {
					for stuckAt == nil || stuckAt == coord {
						stuckAt = surv[r.IntN(len(surv))]
					}
					stuckCoord, stuckSender = coord, vm
				}
				resumed := coord.g.Stats().CutsResumed
				start := h.s.Now() + time.Duration(r.IntN(200))*time.Millisecond
				kind := r.IntN(3)
				what := []string{"crash", "exclusion", "leave"}[kind]
				switch kind {
				case 0: // crash; a process with a new id joins
					n := h.add(nextID)
					nextID++
					h.s.Schedule(start, func(time.Duration) { h.s.Crash(victim.Member()) })
					h.join(start+time.Duration(50+r.IntN(300))*time.Millisecond, n)
					h.traffic(n, start, forever, every)
					live = append(surv, n)
				case 1: // cut off one way until excluded; rejoins
					victim.rejoin = true
					excluder = coord
					if victim == coord {
						excluder = vs[1] // takes over
					}
					h.s.Schedule(start, func(time.Duration) { blocked, blockedNode = vm, victim })
				case 2: // leaves; rejoins
					left := len(victim.left)
					h.do(start, victim, func(now time.Duration) { require.NoError(t, victim.g.Leave(now)) })
					h.runUntil(func() bool { return len(victim.left) > left }, start+10*time.Second, "left")
					h.join(h.s.Now()+time.Duration(r.IntN(300))*time.Millisecond, victim)
				}
				h.runUntil(func() bool {
					return h.s.Now() > start && !live[0].g.View().Contains(vm) &&
						settled(live...)
				}, start+40*time.Second, fmt.Sprintf("round %d (%s of %v)", round, what, vm))
				victim.rejoin = false
				blockedNode = nil
				for _, n := range surv {
					if _, open := n.g.open[vm]; open || n.g.mcuts[vm] != nil {
						t.Fatalf("round %d: node %d still holds %v's cut", round, n.id, vm)
					}
				}
				if stuckAt != nil && coord.g.View().Coord().Member == coord.self() {
					require.True(t, stuckForgotten, "round %d: node %d closed before the cut was forgotten and cut again", round, stuckAt.id)
					require.Greater(t, coord.g.Stats().CutsResumed, resumed,
						"round %d: the coordinator did not cut %v again for node %d", round, vm, stuckAt.id)
					stuckSeen++
				}
				stuckAt = nil
			}
			for _, n := range live {
				require.Empty(t, n.g.open, "node %d", n.id)
				require.Empty(t, n.g.mcuts, "node %d", n.id)
				for _, c := range n.g.cuts {
					require.True(t, c.closed, "node %d", n.id)
				}
			}
			h.noErrors()
		})
	}
	t.Logf("most entries seen at a node: %d cuts, %d member cuts, %d open windows; rounds with a missed close: %d",
		maxCuts, maxMcuts, maxOpen, stuckSeen)
	require.NotZero(t, stuckSeen)
}
