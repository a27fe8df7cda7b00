//go:build !race

package ebpf_test

const raceEnabled = false
