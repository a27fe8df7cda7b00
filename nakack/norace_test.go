//go:build !race

package nakack

// Test sizes that depend on the race detector, in one place: norace_test.go
// holds them for a plain run, race_test.go the same names under -race, which
// slows the code about tenfold; fragSeeds(full, short) takes
// its short count under -race.
const (
	raceEnabled = false

	lossySeeds = 40 // TestLossyRuns
)
