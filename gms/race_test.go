//go:build race

package gms

// raceEnabled is true under -race, which slows the simulation about
// tenfold; seeds(full, race) then gives each randomised test its race count.
const raceEnabled = true
