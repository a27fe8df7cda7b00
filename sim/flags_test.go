package sim

import (
	"flag"
	"fmt"
	"os"
	"strconv"
)

// Test flags. Replay one failing randomised seed with
//
//	go test ./sim/ -run 'TestRandomised' -sim.seed=N -v
//
// and run the long suites (make sim-long) with
//
//	go test -count=1 -timeout 120m ./sim/ -sim.seeds=10000 -sim.scale=1000
//
// NAKCAST_SIM_SEEDS and NAKCAST_SIM_SCALE in the environment set the
// defaults of -sim.seeds and -sim.scale.
var (
	flagSeed  = flag.Int64("sim.seed", -1, "run only this randomised simulator seed (replay)")
	flagSeeds = flag.Int("sim.seeds", envInt("NAKCAST_SIM_SEEDS", 0), "number of randomised simulator seeds (0: 500, or 50 under -race)")
	// flagLooseWindows runs the small-send-window scenarios with receive
	// windows 4x the send window instead of nakack's default RecvWindow ==
	// SendWindow. Tight windows are the default since nakack re-checks gaps
	// after every purge (a receiver whose STABILITY is late drops the
	// sender's next window as Full and asks for it once it has purged);
	// loose windows exercise the path where Full drops are rare.
	flagLooseWindows = flag.Bool("sim.loosewindows", false, "small-window scenarios with RecvWindow = 4x SendWindow instead of nakack's default RecvWindow == SendWindow")
	flagScale        = flag.Int("sim.scale", envInt("NAKCAST_SIM_SCALE", 0), "receivers in the scale simulation (0: 200, or 50 under -race)")
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
	case raceEnabled:
		return 50
	default:
		return 500
	}
}

// scaleReceivers is how many receivers the scale simulation has.
func scaleReceivers() int {
	switch {
	case *flagScale > 0:
		return *flagScale
	case raceEnabled:
		return 50
	default:
		return 200
	}
}
