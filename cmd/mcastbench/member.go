package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"

	"github.com/nakcast/nakcast/bench"
)

// profiled runs f, writing a CPU profile of the whole process to
// PREFIX.PID when MCASTBENCH_CPUPROFILE=PREFIX is in the environment. The
// netns mode passes its environment on, so every member process of a run
// writes one: the way to see where a multi-process run spends its time.
func profiled(f func() int) int {
	prefix := os.Getenv("MCASTBENCH_CPUPROFILE")
	if prefix == "" {
		return f()
	}
	out, err := os.Create(fmt.Sprintf("%s.%d", prefix, os.Getpid()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcastbench: MCASTBENCH_CPUPROFILE:", err)
		return 1
	}
	defer out.Close()
	if err := pprof.StartCPUProfile(out); err != nil {
		fmt.Fprintln(os.Stderr, "mcastbench: MCASTBENCH_CPUPROFILE:", err)
		return 1
	}
	defer pprof.StopCPUProfile()
	return f()
}

// runMember is one member as its own process (bench.MemberMain).
func runMember(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	err := bench.MemberMain(ctx, args, os.Stdin, stdout, stderr)
	if errors.Is(err, bench.ErrUsage) {
		return usageError{err.Error()}
	}
	return err
}
