// Command mcastbench measures nakcast against the raw limit of the same
// path, in the same run.
//
// Usage:
//
//	mcastbench                      the default suite on loopback (~15 s): 1 sender,
//	                                2 receivers, 64 B and 1 KiB messages, 64 KB
//	                                datagrams, lossless and 5% loss, beside the raw
//	                                batched-UDP bundler; prints a table
//	mcastbench throughput [flags]   one nakcast throughput run (and its raw baseline)
//	mcastbench latency [flags]      ping-pong round trips, nakcast vs raw UDP
//	mcastbench raw [flags]          the raw bundler alone
//	mcastbench member [flags]       one member as its own process, JSON result
//	mcastbench raw-member [flags]   one raw bundler process (sender or receiver), JSON result
//	mcastbench netns [flags]        members in network namespaces (root); with
//	                                -transport xdp,udp,udp+gso the backends compared
//	mcastbench pingpong-member      one side of a ping-pong between namespaces
//	mcastbench soak [flags]         ten minutes of members in namespaces under loss,
//	                                one killed and restarted every minute (root)
//	mcastbench results [flags]      regenerate bench/RESULTS.md
//
// Every mode takes -h. Invalid flags exit with status 2; a run that cannot
// start exits with status 1 and says what is missing. Ctrl-C stops a run
// cleanly and prints what was measured so far.
//
// The command owns its flags and output; measuring is bench/'s job.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// usageError is a bad command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

const topUsage = `usage: mcastbench [mode] [flags]

modes:
  (none)      default suite on loopback, nakcast beside the raw baseline (~15 s)
  throughput  one nakcast throughput run beside the raw baseline
  latency     ping-pong round trips, nakcast vs raw UDP, same path
  raw         the raw batched UDP bundler alone
  member      one engine member as its own process (JSON result)
  raw-member  one raw bundler process, sender or receiver (JSON result)
  pingpong-member  one side of a ping-pong between namespaces (JSON result)
  netns       one member per network namespace on a bridge (root); -transport xdp,udp compares backends;
              -chaos kills, stops, restarts and partitions members on a schedule
  soak        members in namespaces for 10 minutes under loss, one killed and restarted every minute (root)
  results     regenerate bench/RESULTS.md (make bench-results)
  keygen      write a new group key file for -key-file

run "mcastbench MODE -h" for the flags of a mode.
`

func main() {
	os.Exit(profiled(func() int { return run(os.Args[1:], os.Stdout, os.Stderr) }))
}

// run executes the command line and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	mode := ""
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		mode, args = args[0], args[1:]
	}
	var err error
	switch mode {
	case "", "suite":
		err = runSuite(ctx, args, stdout, stderr)
	case "throughput":
		err = runThroughput(ctx, args, stdout, stderr)
	case "latency":
		err = runLatency(ctx, args, stdout, stderr)
	case "raw":
		err = runRawMode(ctx, args, stdout, stderr)
	case "member":
		err = runMember(ctx, args, stdout, stderr)
	case "raw-member":
		err = runRawMember(ctx, args, stdout, stderr)
	case "pingpong-member":
		err = runPingPongMember(ctx, args, stdout, stderr)
	case "netns":
		err = runNetns(ctx, args, stdout, stderr)
	case "soak":
		err = runSoak(ctx, args, stdout, stderr)
	case "results":
		err = runResults(ctx, args, stdout, stderr)
	case "keygen":
		err = runKeygen(ctx, args, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, topUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "mcastbench: unknown mode %q\n\n%s", mode, topUsage)
		return 2
	}
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "mcastbench %s: %v (see mcastbench %s -h)\n", modeName(mode), err, modeName(mode))
		return 2
	case errors.Is(err, errFlagParse):
		return 2 // the flag package printed the error and the usage
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "mcastbench: interrupted: %v\n", err)
		return 130
	default:
		fmt.Fprintf(stderr, "mcastbench %s: %v\n", modeName(mode), err)
		if errors.Is(err, syscall.EADDRINUSE) {
			fmt.Fprintf(stderr, "mcastbench %s: a port asked for is in use by another process: pick another one (a unicast port, -unicast, may be 0 for a free one; the group port must be the same non-zero port at every member)\n", modeName(mode))
		}
		return 1
	}
}

func modeName(m string) string {
	if m == "" {
		return "suite"
	}
	return m
}
