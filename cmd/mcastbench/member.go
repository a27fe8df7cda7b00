package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"

	"github.com/nakcast/nakcast/bench"
)

// profiled runs f, writing a CPU profile of the whole process to
// PREFIX.PID when MCASTBENCH_CPUPROFILE=PREFIX is in the environment, and
// a Go execution trace to PREFIX.PID when MCASTBENCH_TRACE=PREFIX is (read
// it with go tool trace; -pprof=sched shows how long goroutines, the
// agent's included, waited for a processor). The netns mode passes its
// environment on, so every member process of a run writes them: the way
// to see where a multi-process run spends its time.
func profiled(f func() int) int {
	if tp := os.Getenv("MCASTBENCH_TRACE"); tp != "" {
		out, err := os.Create(fmt.Sprintf("%s.%d", tp, os.Getpid()))
		if err != nil {
			fmt.Fprintln(os.Stderr, "mcastbench: MCASTBENCH_TRACE:", err)
			return 1
		}
		defer out.Close()
		if err := trace.Start(out); err != nil {
			fmt.Fprintln(os.Stderr, "mcastbench: MCASTBENCH_TRACE:", err)
			return 1
		}
		defer trace.Stop()
	}
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

// runPingPongMember is one side of a ping-pong between namespaces
// (bench.PingPongMemberMain), what the netns comparison runs.
func runPingPongMember(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	err := bench.PingPongMemberMain(ctx, args, os.Stdin, stdout, stderr)
	if errors.Is(err, bench.ErrUsage) {
		return usageError{err.Error()}
	}
	return err
}
