package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"syscall"

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
	if hp := os.Getenv("MCASTBENCH_MEMPROFILE"); hp != "" {
		stop := heapProfileOnSignal(hp)
		defer stop()
	}
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

// heapProfileOnSignal writes the heap profile (what is live after a
// collection) to PREFIX.PID.N each time the process gets SIGUSR1 (N
// counts from 1): with MCASTBENCH_MEMPROFILE=PREFIX in the environment,
// every process of a run does, so a long run's members can be compared
// between two points (go tool pprof -base). stop ends the watching.
func heapProfileOnSignal(prefix string) (stop func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	done := make(chan struct{})
	go func() {
		for n := 1; ; n++ {
			select {
			case <-done:
				return
			case <-sig:
			}
			out, err := os.Create(fmt.Sprintf("%s.%d.%d", prefix, os.Getpid(), n))
			if err != nil {
				fmt.Fprintln(os.Stderr, "mcastbench: MCASTBENCH_MEMPROFILE:", err)
				continue
			}
			runtime.GC()
			if err := pprof.WriteHeapProfile(out); err != nil {
				fmt.Fprintln(os.Stderr, "mcastbench: MCASTBENCH_MEMPROFILE:", err)
			}
			out.Close()
		}
	}()
	return func() { signal.Stop(sig); close(done) }
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
