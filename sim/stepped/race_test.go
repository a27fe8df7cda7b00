//go:build race

package stepped_test

// Test sizes that depend on the race detector, in one place: norace_test.go
// holds them for a plain run, race_test.go the same names under -race, which
// slows the code about tenfold.
const (
	crashJoinSeeds     = 3 // TestCrashAndJoin
	staticSeeds        = 3 // TestStaticGroup
	closeTogetherSeeds = 3 // TestCloseTogether
	leaveSeeds         = 3 // TestLeave
)
