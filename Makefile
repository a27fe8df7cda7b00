# nakcast: build, test, benchmark, fuzz.
#
#   make test    gofmt + vet + cross builds + short benchmarks + namespace tests + race pass (reduced
#                counts) + full pass
#   make bench   the main job: mcastbench on loopback defaults
#                (go run ./cmd/mcastbench)

GO        ?= go
PKGS      ?= ./...
FUZZTIME  ?= 15s
BENCHTIME ?= 1s

.PHONY: all build test fmt-check vet cross race unit bench-smoke netns-test bench fuzz generate sim-long soak clean

all: build

build:
	$(GO) build $(PKGS)

test: fmt-check vet cross bench-smoke netns-test race unit

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# The library builds beyond linux/amd64: a 32-bit platform (int is 32 bits)
# and one without the Linux transport (udp_other.go).
cross:
	GOOS=linux GOARCH=386 $(GO) build $(PKGS)
	GOOS=darwin GOARCH=arm64 $(GO) build $(PKGS)

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

# Tests that build network namespaces (TestNetnsChaos among them: the chaos schedules); they
# skip themselves without root/CAP_NET_ADMIN.
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

# 10,000 seeds of each randomised simulator test (the nakack group and the
# whole-group one) and the 200- and 1,000-receiver scale runs.
sim-long:
	$(GO) test -count=1 -timeout 120m ./sim/ -sim.seeds=10000 -sim.scale=200,1000 -sim.scaleseeds=10

# The soak (not part of make test; root, nftables): ten minutes, five member processes in
# namespaces, two sending 1,000 messages/s each, 5% loss on every member's link, member 4
# killed and restarted every minute; prints each process's resident memory (start, after
# warm-up, end), the chaos check and what the members that stayed lost (must be 0).
soak:
	$(GO) run ./cmd/mcastbench soak

clean:
	$(GO) clean -testcache

# Regenerate bench/RESULTS.md (loopback, and network namespaces as root):
# the numbers in it come only from this target.
.PHONY: bench-results bench-compare
bench-results:
	$(GO) run ./cmd/mcastbench results -o bench/RESULTS.md -command 'make bench-results'

# Package benchmarks at BASE (default HEAD~1) and at the working tree,
# compared with benchstat. Both sides' test binaries are built first, then
# run in turn COMPARE_COUNT times (base, head, base, head...), so load from
# other work on the machine falls on both sides alike; 6 runs each is what
# benchstat needs for a confidence interval. A package missing at BASE is
# skipped with a message. In ./engine/ it runs the benchmarks
# COMPARE_ENGINE selects: the loopback throughput rows (about a second a
# row: two members open and close, and the raw baseline runs beside), not
# the ping-pong's long latency runs.
BASE              ?= HEAD~1
BENCHSTAT         ?= golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
COMPARE_PKGS      ?= ./ring/ ./wire/ ./nakack/ ./engine/
COMPARE_ENGINE    ?= EngineLoopback
COMPARE_COUNT     ?= 6
COMPARE_BENCHTIME ?= 100ms
CMP_DIR           ?= /tmp/nakcast-compare
bench-compare:
	@rm -rf $(CMP_DIR) && mkdir -p $(CMP_DIR)/src $(CMP_DIR)/base $(CMP_DIR)/head && git archive $(BASE) | tar -x -C $(CMP_DIR)/src
	@pkgs=""; for p in $(COMPARE_PKGS); do n=$$(echo $$p | tr -c 'a-zA-Z0-9\n' _); \
		if ! (cd $(CMP_DIR)/src && $(GO) test -c -o $(CMP_DIR)/base/$$n.test $$p >/dev/null 2>&1); then echo "bench-compare: $$p skipped: does not build at $(BASE)"; continue; fi; \
		$(GO) test -c -o $(CMP_DIR)/head/$$n.test $$p || exit 1; pkgs="$$pkgs $$p"; done; \
	for i in $$(seq $(COMPARE_COUNT)); do echo "bench-compare: run $$i of $(COMPARE_COUNT):$$pkgs"; for p in $$pkgs; do n=$$(echo $$p | tr -c 'a-zA-Z0-9\n' _); \
		f=.; if [ "$$p" = ./engine/ ]; then f='$(COMPARE_ENGINE)'; fi; \
		(cd $(CMP_DIR)/src/$$p && $(CMP_DIR)/base/$$n.test -test.run '^$$' -test.bench "$$f" -test.benchmem -test.benchtime=$(COMPARE_BENCHTIME) >> $(CMP_DIR)/base.txt) || exit 1; \
		(cd $$p && $(CMP_DIR)/head/$$n.test -test.run '^$$' -test.bench "$$f" -test.benchmem -test.benchtime=$(COMPARE_BENCHTIME) >> $(CMP_DIR)/head.txt) || exit 1; \
	done; done
	$(GO) run $(BENCHSTAT) base=$(CMP_DIR)/base.txt head=$(CMP_DIR)/head.txt
