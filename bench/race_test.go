//go:build race

package bench

import "time"

// Test sizes that depend on the race detector, in one place: norace_test.go
// holds them for a plain run, race_test.go the same names under -race, which
// slows the code about tenfold.
const (
	raceEnabled = true

	pingPongRounds  = 200                    // TestRunRawPingPong
	groupMessages   = 3000                   // TestRunGroupExactDelivery, per sender
	netnsMessages   = 5000                   // TestNetnsThreeMembers, per sender
	rawFlowDuration = 100 * time.Millisecond // TestRunRawMessagesFlow
)
