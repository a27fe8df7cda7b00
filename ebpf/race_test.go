//go:build race

package ebpf_test

// raceEnabled skips the allocation tests under -race (in race_test.go and
// norace_test.go only).
const raceEnabled = true
