package sim

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Test flags. Replay one failing randomised seed with
//
//	go test ./sim/ -run 'TestRandomised' -sim.seed=N -v
//
// and run the long suites (make sim-long) with
//
//	go test -count=1 -timeout 120m ./sim/ -sim.seeds=10000 -sim.scale=200,1000 -sim.scaleseeds=10
//
// NAKCAST_SIM_SEEDS, NAKCAST_SIM_SCALE and NAKCAST_SIM_SCALESEEDS in the
// environment set the defaults of -sim.seeds, -sim.scale and
// -sim.scaleseeds.
var (
	flagSeed  = flag.Int64("sim.seed", -1, "run only this randomised simulator seed (replay)")
	flagSeeds = flag.Int("sim.seeds", envInt("NAKCAST_SIM_SEEDS", 0), "number of randomised simulator seeds of each randomised test (0: 500 for TestRandomised, 300 for TestWholeGroupRandomised; 50 and 30 under -race)")
	// flagSeedFrom moves a long sweep past the seeds an earlier one ran.
	flagSeedFrom = flag.Int("sim.seedfrom", 0, "first seed of each randomised test: it runs seeds sim.seedfrom to sim.seedfrom+sim.seeds-1")
	// flagLooseWindows runs the small-send-window scenarios with receive
	// windows 4x the send window instead of tight ones (RecvWindow ==
	// SendWindow), where the sender waits for every member's report of its
	// purge before it sends beyond their windows (nakack SendLimit) and a
	// receiver whose STABILITY is lost must never drop data as Full;
	// loose windows exercise the path where that bound never binds.
	flagLooseWindows = flag.Bool("sim.loosewindows", false, "small-window scenarios with RecvWindow = 4x SendWindow instead of RecvWindow == SendWindow")
	flagScale        = flag.String("sim.scale", os.Getenv("NAKCAST_SIM_SCALE"), "receivers in the scale simulation, a comma-separated list of group sizes (empty: 200, or 50 under -race)")
	flagScaleSeed    = flag.Int("sim.scaleseed", 0, "run only this seed of the scale simulation (replay)")
	flagScaleSeeds   = flag.Int("sim.scaleseeds", envInt("NAKCAST_SIM_SCALESEEDS", 0), "seeds per loss pattern and group size in the scale simulation (0: 1)")
)

func envInt(name string, def int) int {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sim: ignoring %s=%q: %v\n", name, v, err)
		return def
	}
	return n
}

// seedCount is how many randomised seeds to run.
func seedCount() int {
	switch {
	case *flagSeeds > 0:
		return *flagSeeds
	default:
		return randomSeeds
	}
}

// scaleSizes returns the group sizes (receivers) of the scale simulation.
func scaleSizes() ([]int, error) {
	if *flagScale == "" {
		return []int{scaleReceivers}, nil
	}
	var ns []int
	for _, f := range strings.Split(*flagScale, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			return nil, fmt.Errorf("-sim.scale %q: want a comma-separated list of receiver counts >= 2", *flagScale)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// scaleSeeds is how many seeds the scale simulation runs per loss pattern
// and group size.
func scaleSeeds() int {
	switch {
	case *flagScaleSeeds > 0:
		return *flagScaleSeeds
	default:
		return 1
	}
}
