#!/usr/bin/env bash
# callgrind.sh: instructions a message, by function, for one engine
# benchmark run under valgrind's callgrind. Wall time on these 2-core VMs
# moves 20% run to run and they expose no hardware counters (perf stat
# reports instructions "not supported"); instruction counts are the same
# every run, so they show what a change to a per-message path saves.
#
# usage: scripts/callgrind.sh [BENCH_REGEX [MESSAGES [SKIP_REGEX]]]
#   default: the default configuration's 64 B loopback row, 300000 messages
#
# Needs valgrind (apt-get install valgrind). Go's runtime needs two
# GODEBUG settings under valgrind 3.19: cpu.rdtscp=off (valgrind does not
# decode RDTSCP, which runtime.cputicks uses) and asyncpreemptoff=1
# (callgrind asserts on the preemption signal). Valgrind runs the
# threads one at a time, so the table counts work, not contention: the
# cost of a locked instruction or of a line another core wrote is not in
# it, and idle loops (the scheduler's share) depend on how valgrind
# interleaves the goroutines; only the engine's own functions are listed.
# The figures are self costs divided by the messages sent: a function that
# runs once a delivery counts once for each receiving member and once for
# the sender's own delivery.
set -euo pipefail
bench=${1:-'EngineLoopback/^64B$/^block$'}
msgs=${2:-300000}
skip=${3:-'EngineLoopback/64B/block/.'}
out=${CALLGRIND_OUT:-/tmp/nakcast-callgrind}
mkdir -p "$out"
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind not installed (apt-get install valgrind)" >&2; exit 2; }
cd "$(dirname "$0")/../engine"
root=$(cd .. && pwd)
goroot=$(go env GOROOT)
go test -c -o "$out/engine.test" .
GODEBUG=cpu.rdtscp=off,asyncpreemptoff=1 valgrind --tool=callgrind \
	--callgrind-out-file="$out/callgrind.out" "$out/engine.test" \
	-test.run '^$' -test.bench "$bench" -test.skip "$skip" \
	-test.benchtime "${msgs}x" >"$out/run.log" 2>&1 || {
	echo "callgrind.sh: run failed, see $out/run.log" >&2
	exit 1
}
grep '^Benchmark' "$out/run.log" || true
echo "instructions a message sent (self cost / $msgs), engine functions:"
callgrind_annotate --auto=no --threshold=100 "$out/callgrind.out" 2>/dev/null |
	grep -E 'nakcast/nakcast|memmove|memclr' |
	grep -vE 'bench/raw\.go|bench\.(parseRaw|fillRaw)' |
	sed -E "s# \\[[^]]*\\]\$##; s#go\\.shape\\.struct \\{[^}]*\\}#T#g; s#github\\.com/nakcast/nakcast/##g; s#$root/##; s#$goroot/src/##" |
	awk -v n="$msgs" '{x=$1; gsub(",", "", x); v=x/n; if (v >= 0.5) printf "%8.1f  %s\n", v, $NF; t+=v} END {printf "%8.1f  total listed (every function, also those under 0.5)\n", t}'
