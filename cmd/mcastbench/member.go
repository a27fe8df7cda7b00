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

// runMember is one member as its own process (bench.MemberMain). With
// MCASTBENCH_CPUPROFILE=PREFIX in the environment (the netns mode passes
// its environment on), the member writes a CPU profile to PREFIX.PID: the
// way to see where a multi-process run spends its time.
func runMember(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if prefix := os.Getenv("MCASTBENCH_CPUPROFILE"); prefix != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", prefix, os.Getpid()))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	err := bench.MemberMain(ctx, args, os.Stdin, stdout, stderr)
	if errors.Is(err, bench.ErrUsage) {
		return usageError{err.Error()}
	}
	return err
}
