package gms

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nakcast/nakcast/sim"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// lastSeqOf returns the highest seqno a DATA or FRAG datagram carries and,
// for a FRAG, whether it is not its message's last fragment.
func lastSeqOf(t *testing.T, b []byte) (last uint64, midFrag bool) {
	t.Helper()
	h, body, err := wire.DecodeHeader(b, 7)
	require.NoError(t, err)
	if h.Type == wire.TypeFrag {
		f, err := wire.DecodeFrag(h, body)
		require.NoError(t, err)
		return f.Seq, f.Index+1 < f.Count
	}
	d, err := wire.DecodeData(h, body)
	require.NoError(t, err)
	return d.Last(), false
}

// TestCrashInsideFragmentedMessage: a sender sends small and fragmented
// messages (1-4 fragments of about 8KB) every millisecond; its datagrams
// of its last 1-5ms before it crashes are held in the network (never
// delivered). Just after the crash each survivor is handed, from the
// seed, a prefix of those datagrams with some of them left out: the
// longest prefix decides the cut (the highest seqno a survivor
// received), which often ends inside a fragmented message; a datagram no
// survivor got is declared lost. Every survivor must account for every
// seqno up to the cut (delivered messages and lost ranges tile 1..cut)
// with the same deliveries and the same lost ranges everywhere, and close
// the window. Before a cut reported the message it ends inside, the tiling
// stopped at that message's first fragment - 1. Seeds replay (go test -run TestCrashInsideFragmentedMessage).
func TestCrashInsideFragmentedMessage(t *testing.T) {
	straddles := 0
	for seed := range uint64(seeds(40, 12)) {
		h := newNakHarness(t, seed, sim.NetConfig{Jitter: 300 * time.Microsecond})
		all := h.joinFour()
		r := rand.New(rand.NewPCG(seed, 12))
		victim := all[1+r.IntN(3)]
		vm, vid := victim.self(), victim.Member()
		surv := others(all, victim)
		start := h.s.Now()
		sizes := rand.New(rand.NewPCG(seed, 13))
		ext := map[uint64]uint64{} // the victim's messages: first seqno -> last
		var step func(now time.Duration)
		step = func(now time.Duration) {
			if p := victim.p(); p != nil && victim.g.Status() == StatusMember {
				pl := fmt.Appendf(nil, "%v/%d/", vm, p.NextSeq())
				if sizes.IntN(2) == 0 {
					pl = append(pl, bytes.Repeat([]byte{'f'}, 8000*(1+sizes.IntN(4)))...)
				}
				if seq, err := p.Send(pl, now); err == nil {
					ext[seq] = p.NextSeq() - 1
				}
				p.Flush(now)
				victim.poll()
			}
			h.do(now+time.Millisecond, victim, step)
		}
		h.do(start, victim, step)
		holdAt := start + time.Duration(50+r.IntN(200))*time.Millisecond + 500*time.Microsecond
		crashAt := holdAt + time.Duration(1+r.IntN(5))*time.Millisecond
		h.s.Schedule(holdAt, func(time.Duration) {
			for _, n := range surv {
				require.NoError(t, h.s.SetLink(vid, n.Member(), sim.Link{Latency: time.Hour}))
			}
		})
		h.s.Schedule(crashAt, func(time.Duration) { h.s.Crash(vid) })
		var held [][]byte
		h.s.AddTap(func(ev sim.TapEvent) {
			if ev.Kind != sim.TapSend || ev.From != vid || ev.At < holdAt || ev.At >= crashAt || len(ev.Data) < 3 {
				return
			}
			if typ := wire.Type(ev.Data[2]); typ == wire.TypeData || typ == wire.TypeFrag {
				held = append(held, slices.Clone(ev.Data))
			}
		})
		var cut uint64
		h.s.Schedule(crashAt+100*time.Microsecond, func(now time.Duration) {
			require.NotEmpty(t, held, "seed %d: nothing held", seed)
			// The longest prefix ends with a datagram its holder has;
			// the others get shorter prefixes, each datagram with 3/4.
			k := 1 + r.IntN(len(held))
			cut, _ = lastSeqOf(t, held[k-1])
			longest := r.IntN(len(surv))
			for i, n := range surv {
				kn := k
				if i != longest {
					kn = r.IntN(k + 1)
				}
				var give [][]byte
				for j := range kn {
					if j == k-1 || r.IntN(4) != 0 {
						give = append(give, held[j])
					}
				}
				h.do(now, n, func(now time.Duration) {
					for _, dg := range give {
						n.Receive(vid, dg, now)
					}
				})
			}
			if _, mid := lastSeqOf(t, held[k-1]); mid {
				straddles++
			}
		})
		h.runUntil(func() bool { return h.s.Now() > crashAt && converged(surv...) && quiet(surv...) },
			crashAt+20*time.Second, "cut closed")
		var first *node
		for _, n := range surv {
			_, open := n.p().WindowState(vm)
			require.False(t, open, "seed %d: window still open at %d", seed, n.id)
			// Delivered messages (first fragment's seqno to the last)
			// and lost ranges must tile 1..cut.
			var spans []Range
			for _, s := range n.app.delivered[vm] {
				require.Contains(t, ext, s, "seed %d", seed)
				spans = append(spans, Range{From: s, To: ext[s]})
			}
			spans = append(spans, n.app.lost[vm]...)
			slices.SortFunc(spans, func(x, y Range) int { return int(x.From) - int(y.From) })
			next := uint64(1)
			for _, sp := range spans {
				require.Equal(t, next, sp.From, "seed %d: node %d: %v", seed, n.id, spans)
				next = sp.To + 1
			}
			require.Equal(t, cut, next-1, "seed %d: node %d accounted up to %d, not the cut %d (lost %v)",
				seed, n.id, next-1, cut, n.app.lost[vm])
			if first != nil {
				require.Equal(t, first.app.delivered[vm], n.app.delivered[vm], "seed %d: nodes %d, %d", seed, first.id, n.id)
				require.Equal(t, first.app.lost[vm], n.app.lost[vm], "seed %d: nodes %d, %d: same lost ranges", seed, first.id, n.id)
			} else {
				first = n
			}
			// fakeApp's fold takes a fragmented message for one seqno: its
			// complaints about the victim are checked by the tiling above.
			requireComplaintsOnlyAbout(t, seed, n, vm)
		}
		h.noNotFound()
		if t.Failed() {
			return
		}
	}
	t.Logf("seeds whose cut ended inside a fragmented message: %d", straddles)
	require.NotZero(t, straddles, "no seed cut inside a fragmented message")
}
