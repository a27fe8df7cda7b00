package bench

import (
	"syscall"
	"time"
	_ "unsafe" // go:linkname
)

// ProcessCPU is the CPU time, user and system, this process has used
// (getrusage RUSAGE_SELF); 0 where the platform does not say.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Nanotime returns CLOCK_MONOTONIC in nanoseconds: the runtime's monotonic
// clock, read through the vDSO without a system call. Every process on one
// host reads the same clock, so a send time embedded in a payload by one
// member process can be compared with the delivery time in another.
func Nanotime() int64 { return nanotime() }

// runtime.nanotime is CLOCK_MONOTONIC on Linux; the runtime keeps it
// reachable by linkname on purpose (it is on its list of symbols widely
// linked by other packages).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64
