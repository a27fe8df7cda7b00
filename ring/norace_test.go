//go:build !race

package ring

// Test sizes that depend on the race detector, in one place: norace_test.go
// holds them for a plain run, race_test.go the same names under -race, which
// slows the code about tenfold.
const (
	modelSteps  = 20000     // TestWindowAgainstModel, per case
	stressCount = 1_000_000 // seqnos the concurrent stress tests move
)
