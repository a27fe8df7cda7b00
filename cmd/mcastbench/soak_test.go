package main

import "testing"

// TestSoakBadFlagsExit2: soak settings with no room for a kill and a
// restart, or too few members, are refused at once naming what is wrong.
func TestSoakBadFlagsExit2(t *testing.T) {
	badFlagsExit2(t, []badFlags{
		{[]string{"soak", "-members", "1"}, "-members 1"},
		{[]string{"soak", "-every", "5s", "-down", "10s"}, "Every > Down"},
		{[]string{"soak", "-duration", "30s"}, "Duration 30s, Every 1m0s, Down 10s: no kill and restart fits"},
	})
}
