//go:build !race

package nakack

const raceEnabled = false
