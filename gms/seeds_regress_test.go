package gms

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// seedsEnv (GMS_SEEDS) replaces the seed list of the scenario tests that
// use seedList, to replay or survey seeds: "928", "0-2000" (half-open),
// "71,100-200". Failures name the seed; with subtests, -run Test/SEED
// picks one of a list.
const seedsEnv = "GMS_SEEDS"

// seedList returns the seeds a scenario test runs: 0..n-1, n =
// seeds(full, race), then the regression seeds (found failing beyond the
// default count, fixed, and kept running whatever the count). GMS_SEEDS,
// when set, replaces the list.
func seedList(t testing.TB, full, race int, regress ...uint64) []uint64 {
	if s := os.Getenv(seedsEnv); s != "" {
		l, err := parseSeeds(s)
		if err != nil {
			t.Fatalf("%s=%q: %v", seedsEnv, s, err)
		}
		return l
	}
	var l []uint64
	for i := range uint64(seeds(full, race)) {
		l = append(l, i)
	}
	for _, r := range regress {
		if r >= uint64(len(l)) {
			l = append(l, r)
		}
	}
	return l
}

// defaultSeeds reports whether the scenario tests run their default seed
// lists (GMS_SEEDS unset): aggregate checks over a list hold only for it.
func defaultSeeds() bool { return os.Getenv(seedsEnv) == "" }

func parseSeeds(s string) ([]uint64, error) {
	var l []uint64
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		a, b, isRange := strings.Cut(part, "-")
		from, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			return nil, err
		}
		if !isRange {
			l = append(l, from)
			continue
		}
		to, err := strconv.ParseUint(b, 10, 64)
		if err != nil {
			return nil, err
		}
		if to <= from {
			return nil, fmt.Errorf("empty range %q", part)
		}
		for i := from; i < to; i++ {
			l = append(l, i)
		}
	}
	return l, nil
}

func TestParseSeeds(t *testing.T) {
	l, err := parseSeeds("71, 3-6,928")
	if err != nil || fmt.Sprint(l) != "[71 3 4 5 928]" {
		t.Fatalf("got %v, %v", l, err)
	}
	for _, bad := range []string{"x", "5-5", "1-", ""} {
		if _, err := parseSeeds(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
