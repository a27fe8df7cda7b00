//go:build !race

package gms

// raceEnabled reduces seed counts under the race detector.
const raceEnabled = false
