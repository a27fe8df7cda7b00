package members

import (
	"testing"
	"time"
)

// testStream builds a stream starting after start whose events are evs,
// chained as App.Deliver and App.Lost chain them.
func testStream(start uint64, chain uint64, evs ...Event) *Stream {
	s := &Stream{Start: start + 1, Next: start + 1, Chain: chain, start: chain}
	for _, e := range evs {
		if !e.Lost {
			s.Chain = chainStep(s.Chain, e.From, e.From*7919)
		}
		e.Chain = s.Chain
		s.Events = append(s.Events, e)
		s.Next = e.To + 1
	}
	return s
}

func delivered(from, to uint64, at time.Duration) []Event {
	var evs []Event
	for seq := from; seq <= to; seq++ {
		evs = append(evs, Event{From: seq, To: seq, At: at})
	}
	return evs
}

// TestStateEndProviderLostBeforeInstall builds seed 84385 of
// TestWholeGroupRandomised: the provider takes the state at 191, is told
// 196-199 lost (a forced purge's MSG_NOT_FOUND) before the requester
// installs the state, and the requester, which held 196-199, re-delivers
// 192-200 on installing it. Their application states must agree up to
// 195, where the provider's loss parts them, and no further.
func TestStateEndProviderLostBeforeInstall(t *testing.T) {
	const point, lostAt, install = 191, 1151 * time.Millisecond, 1152 * time.Millisecond
	pe := delivered(1, 195, time.Second)
	pe = append(pe, Event{Lost: true, From: 196, To: 199, At: lostAt})
	pe = append(pe, delivered(200, 268, 1200*time.Millisecond)...)
	ps := testStream(0, 0, pe...)
	stateChain, ok := ps.chainAt(point)
	if !ok {
		t.Fatal("the provider's stream has no event ending at the state point")
	}
	rs := testStream(point, stateChain, delivered(point+1, 268, install)...)

	end, ok := stateEnd(rs, ps, point, install)
	if !ok || end != 195 {
		t.Fatalf("stateEnd = %d, %v; want 195, true (just before the provider's lost range)", end, ok)
	}
	rc, _ := rs.chainAt(end)
	pc, _ := ps.chainAt(end)
	if rc != pc {
		t.Fatalf("chains at %d differ: %x and %x", end, rc, pc)
	}
	// Past the lost range they differ: comparing there (as the check did
	// when it judged the provider's loss by the install time) fails.
	rc, _ = rs.chainAt(268)
	pc, _ = ps.chainAt(268)
	if rc == pc {
		t.Fatal("chains at 268 agree although the requester delivered 196-199 and the provider lost them")
	}

	// A requester that skipped a message above the point (192) parts from
	// the provider before the lost range: the check sees it at 195.
	rs = testStream(point, stateChain, delivered(point+2, 268, install)...)
	if end, ok := stateEnd(rs, ps, point, install); !ok || end != 195 {
		t.Fatalf("stateEnd = %d, %v; want 195, true", end, ok)
	}
	rc, _ = rs.chainAt(195)
	pc, _ = ps.chainAt(195)
	if rc == pc {
		t.Fatal("a requester that skipped 192 has the provider's chain at 195")
	}
}

// TestStateEnd: without losses both streams are compared where both
// stand; a range either was told lost since the transfer ends the
// comparison just before it, one the provider lost before its state point
// does not; a requester told lost the message its point falls inside
// leaves nothing to compare.
func TestStateEnd(t *testing.T) {
	const point, install = 10, time.Second
	ps := testStream(0, 0, delivered(1, 30, 2*time.Second)...)
	rs := testStream(point, 0, delivered(point+1, 25, 2*time.Second)...)
	if end, ok := stateEnd(rs, ps, point, install); !ok || end != 25 {
		t.Fatalf("no losses: stateEnd = %d, %v; want 25, true", end, ok)
	}

	pe := delivered(1, 3, 0)
	pe = append(pe, Event{Lost: true, From: 4, To: 5, At: 0})
	pe = append(pe, delivered(6, 30, 0)...)
	ps = testStream(0, 0, pe...)
	if end, ok := stateEnd(rs, ps, point, install); !ok || end != 25 {
		t.Fatalf("provider lost below its point: stateEnd = %d, %v; want 25, true", end, ok)
	}

	re := delivered(point+1, 14, 2*time.Second)
	re = append(re, Event{Lost: true, From: 15, To: 16, At: 3 * time.Second})
	re = append(re, delivered(17, 25, 3*time.Second)...)
	rs = testStream(point, 0, re...)
	if end, ok := stateEnd(rs, ps, point, install); !ok || end != 14 {
		t.Fatalf("requester lost since: stateEnd = %d, %v; want 14, true", end, ok)
	}

	pe = delivered(1, 20, 0)
	pe = append(pe, Event{Lost: true, From: 21, To: 22, At: 3 * time.Second})
	ps = testStream(0, 0, pe...)
	rs = testStream(point, 0, delivered(point+1, 25, 2*time.Second)...)
	if end, ok := stateEnd(rs, ps, point, install); !ok || end != 20 {
		t.Fatalf("provider lost after the install: stateEnd = %d, %v; want 20, true", end, ok)
	}

	rs = testStream(point, 0, append([]Event{{Lost: true, From: 9, To: 12, At: install, Resync: true}},
		delivered(13, 25, install)...)...)
	if _, ok := stateEnd(rs, ps, point, install); ok {
		t.Fatal("a requester told lost the message its point falls inside: stateEnd ok")
	}
}
