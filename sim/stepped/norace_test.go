//go:build !race

package stepped_test

// Test sizes that depend on the race detector, in one place: norace_test.go
// holds them for a plain run, race_test.go the same names under -race, which
// slows the code about tenfold.
const (
	crashJoinSeeds     = 10 // TestCrashAndJoin
	staticSeeds        = 10 // TestStaticGroup
	closeTogetherSeeds = 10 // TestCloseTogether
	leaveSeeds         = 10 // TestLeave
)
