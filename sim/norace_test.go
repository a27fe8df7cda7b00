//go:build !race

package sim

// Test sizes that depend on the race detector, in one place: norace_test.go
// holds them for a plain run, race_test.go the same names under -race, which
// slows the code about tenfold.
const (
	attackSeeds     = 10  // TestForgedMsgNotFoundNeverSkips
	flowSeedCount   = 6   // each flow-control test
	randomSeeds     = 500 // TestRandomised (-sim.seeds overrides)
	wholeGroupSeeds = 300 // TestWholeGroupRandomised (-sim.seeds overrides)
	scaleReceivers  = 200 // the scale simulation (-sim.scale overrides)
	laggardSeeds    = 20  // TestLaggardWait, TestLaggardExclude (each)
)
