//go:build race

package ring

// raceEnabled reduces the heavy stress counts under the race detector.
const raceEnabled = true
