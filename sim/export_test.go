package sim

// Flags and build facts for the external tests (package sim_test).

// ReplaySeed returns -sim.seed (-1: none).
func ReplaySeed() int64 { return *flagSeed }

// LaggardSeeds is how many seeds each slow-receiver test runs: 20, 3
// under -race.
func LaggardSeeds() int { return laggardSeeds }

// SeedFrom is the first seed of each randomised test (-sim.seedfrom).
func SeedFrom() int { return *flagSeedFrom }

// WholeGroupSeeds is how many whole-group randomised seeds to run: 300, 30
// under -race, -sim.seeds when set.
func WholeGroupSeeds() int {
	switch {
	case *flagSeeds > 0:
		return *flagSeeds
	default:
		return wholeGroupSeeds
	}
}
