//go:build race

package sim

// Test sizes that depend on the race detector, in one place: norace_test.go
// holds them for a plain run, race_test.go the same names under -race, which
// slows the code about tenfold.
const (
	attackSeeds     = 3  // TestForgedMsgNotFoundNeverSkips
	flowSeedCount   = 2  // each flow-control test
	randomSeeds     = 50 // TestRandomised (-sim.seeds overrides)
	wholeGroupSeeds = 30 // TestWholeGroupRandomised (-sim.seeds overrides)
	scaleReceivers  = 50 // the scale simulation (-sim.scale overrides)
	laggardSeeds    = 3  // TestLaggardWait, TestLaggardExclude (each)
)
