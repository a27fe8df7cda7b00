# nakcast: build, test, benchmark, fuzz.
#
#   make test    gofmt + vet + short benchmarks + namespace tests + race pass (reduced
#                counts) + full pass
#   make bench   the main job: mcastbench on loopback defaults
#                (go run ./cmd/mcastbench)

GO        ?= go
PKGS      ?= ./...
FUZZTIME  ?= 15s
BENCHTIME ?= 1s

.PHONY: all build test fmt-check vet race unit bench-smoke netns-test bench fuzz generate sim-long clean

all: build

build:
	$(GO) build $(PKGS)

test: fmt-check vet bench-smoke netns-test race unit

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# The race pass: the heaviest suites run reduced counts under the race build tag.
race:
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

# The full pass without -race: full simulator seed counts and scale runs.
unit:
	$(GO) test -count=1 -timeout 15m $(PKGS)

# Package benchmarks with a tiny benchtime so they keep compiling and running.
bench-smoke:
	$(GO) test -count=1 -run '^$$' -bench . -benchtime=100x -benchmem $(PKGS) > /dev/null

# Tests that build network namespaces; they skip themselves without root/CAP_NET_ADMIN.
netns-test:
	@if [ "$$(id -u)" = "0" ] && command -v ip >/dev/null 2>&1; then \
		$(GO) test -count=1 -run 'Netns' -timeout 10m ./bench/; \
	else echo "netns-test: skipped (needs root with CAP_NET_ADMIN and iproute2)"; fi

bench:
	@if [ -d cmd/mcastbench ]; then $(GO) run ./cmd/mcastbench; \
	else $(GO) test -run '^$$' -bench . -benchmem -benchtime=$(BENCHTIME) $(PKGS); fi

# Run every fuzz target for FUZZTIME each.
fuzz:
	@./scripts/fuzz.sh $(FUZZTIME)

generate:
	$(GO) generate $(PKGS)

# 10,000 simulator seeds (and the 1,000-receiver scale run).
sim-long:
	$(GO) test -count=1 -timeout 120m ./sim/ -sim.seeds=10000 -sim.scale=1000

clean:
	$(GO) clean -testcache

# Regenerate bench/RESULTS.md (loopback, and network namespaces as root):
# the numbers in it come only from this target.
.PHONY: bench-results bench-compare
bench-results:
	$(GO) run ./cmd/mcastbench results -o bench/RESULTS.md -command 'make bench-results'

# Package benchmarks at BASE (default HEAD~1) and at the working tree,
# 5 runs each, compared with benchstat.
BASE         ?= HEAD~1
BENCHSTAT    ?= golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
COMPARE_PKGS ?= ./ring/ ./wire/ ./nakack/
bench-compare:
	@rm -rf /tmp/nakcast-base && mkdir -p /tmp/nakcast-base && git archive $(BASE) | tar -x -C /tmp/nakcast-base
	cd /tmp/nakcast-base && $(GO) test -run '^$$' -bench . -benchmem -count 5 -benchtime=200ms $(COMPARE_PKGS) > /tmp/nakcast-bench-base.txt
	$(GO) test -run '^$$' -bench . -benchmem -count 5 -benchtime=200ms $(COMPARE_PKGS) > /tmp/nakcast-bench-head.txt
	$(GO) run $(BENCHSTAT) /tmp/nakcast-bench-base.txt /tmp/nakcast-bench-head.txt
