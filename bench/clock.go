package bench

import _ "unsafe" // go:linkname

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
