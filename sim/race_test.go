//go:build race

package sim

// raceEnabled reduces seed counts and scale under the race detector, which
// slows the simulator about tenfold.
const raceEnabled = true
