//go:build !race

package bench

import "time"

// Test sizes that depend on the race detector, in one place: norace_test.go
// holds them for a plain run, race_test.go the same names under -race, which
// slows the code about tenfold.
const (
	raceEnabled = false

	pingPongRounds  = 2000                   // TestRunRawPingPong
	groupMessages   = 20000                  // TestRunGroupExactDelivery, per sender
	netnsMessages   = 20000                  // TestNetnsThreeMembers, per sender
	rawFlowDuration = 300 * time.Millisecond // TestRunRawMessagesFlow
)
