//go:build !race

package engine

import "time"

// Test sizes that depend on the race detector, in one place: norace_test.go
// holds them for a plain run, race_test.go the same names under -race, which
// slows the code about tenfold.
const (
	raceEnabled = false

	perSenderMessages   = 20000 // exact-delivery tests, per sender
	blockingMessages    = 5000  // TestInvokedBlockingCallsDrive
	joinedMessages      = 10000 // testExactDeliveryJoined, per sender
	pollMessages        = 20000 // TestTrySendPollOneGoroutine, per sender
	deliveryRingRecords = 30000 // TestDeliveryRing

	// The namespace tests (package engine_test) read these; every member
	// process is race-instrumented too under -race.
	NetnsMessages = 2000             // per sender (also with -short)
	NetnsTimeout  = 40 * time.Second // one test's run once the namespaces exist
	NetnsSuspect  = 2 * time.Second  // the members' SuspectTimeout
)
