//go:build linux && race

package engine_test

// netnsRace reduces the multi-process tests' message counts under -race
// (every member process is race-instrumented too).
const netnsRace = true
