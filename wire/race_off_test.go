//go:build !race

package wire

// raceEnabled reduces iteration counts under the race detector.
const raceEnabled = false
