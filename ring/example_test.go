package ring_test

import (
	"fmt"

	"github.com/nakcast/nakcast/ring"
)

// A receive window: datagrams (runs) arrive out of order, a gap is asked
// for, part of it is declared lost, and delivery reports messages and the
// lost range in order. Delivered messages stay retained until a purge.
func ExampleWindow() {
	w, err := ring.NewWindow[string](64, 0)
	if err != nil {
		panic(err)
	}
	w.AddRun(1, []string{"a", "b"})
	w.AddRun(6, []string{"f", "g"}) // 3..5 missing
	w.Add(4, "d")
	fmt.Println("gaps:", w.AppendGaps(nil, 0))
	fmt.Println("lost:", w.MarkLost(3, 5)) // 3 and 5 will never come; 4 is held
	for {
		if seq, v, ok := w.Remove(); ok {
			fmt.Println("deliver", seq, v)
			continue
		}
		if r, ok := w.SkipLost(); ok {
			fmt.Println("lost", r)
			continue
		}
		break
	}
	v, _ := w.Get(6) // still retained for retransmission
	fmt.Println("retained 6:", v, "purged:", w.Purge(6, nil), "low:", w.Low())
	// Output:
	// gaps: [[3,3] [5,5]]
	// lost: 2
	// deliver 1 a
	// deliver 2 b
	// lost [3,3]
	// deliver 4 d
	// lost [5,5]
	// deliver 6 f
	// deliver 7 g
	// retained 6: f purged: 4 low: 6
}

// The send side: a producer claims seqnos, commits them, and the sender
// agent polls them in order. A failed claim is the back-pressure signal.
func ExamplePublication() {
	p, err := ring.NewPublication[string](4)
	if err != nil {
		panic(err)
	}
	first, _ := p.TryClaim(3) // a message in three fragments: 1..3
	_, ok := p.TryClaim(2)
	fmt.Println("second claim:", ok)
	p.Commit(first+2, "frag 3")
	p.Commit(first, "frag 1")
	p.Commit(first+1, "frag 2")
	dst := make([]string, 8)
	seq, n := p.Poll(dst)
	fmt.Println(seq, dst[:n], p.Free())
	// Output:
	// second claim: false
	// 1 [frag 1 frag 2 frag 3] 4
}
