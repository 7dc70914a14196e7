# spannerme: the project's commands. See README.md.
GO ?= go
# staticcheck and benchstat are run through `go run` at a pinned version, so nothing needs
# installing by hand.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCHSTAT ?= golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
# Integration and demo waits are bounded by their own contexts; this is the outer guard.
TEST_TIMEOUT ?= 20m
ARGS ?=
# chaos: length of the run and seed of its schedule (0: a random seed, printed).
DURATION ?= 2m
SEED ?= 0
# Says whether the Cloud Spanner emulator and Chromium were found: go test ./... prints only
# "ok" for a package whose emulator or browser tests skipped, so a missing one is announced
# before and after the tests, after them whatever their outcome (the exit status stays go test's).
EMULATOR_STATUS = $(GO) run ./internal/cmd/emulator-status
# Runs go test -json and prints go test's closing line of each package as it finishes, with a
# running count and its tests passed/failed/skipped, then "N passed, N failed, N skipped".
TEST_PROGRESS = $(GO) run ./internal/cmd/test-progress -go '$(GO)' --

.PHONY: all check demo chaos emulator test race lint fmt vet staticcheck fuzz bench bench-client bench-compare compat ci

all: ci

## check: `spannerme check` of a configuration file. ARGS: --config FILE --database D [--json ...].
check:
	$(GO) run ./cmd/spannerme check $(ARGS)

## demo: the main job on an embedded default (in-memory Spanner + fake PSC endpoints). ARGS=-h for flags.
demo:
	$(GO) run ./cmd/spannerme-demo $(ARGS)

## emulator: the Cloud Spanner emulator for the command line: an instance, a database with the
##           Accounts table of testdata/, a configuration file, and the flags to pass to
##           `spannerme check` and `spannerme query`; Ctrl-C stops it.
emulator:
	$(GO) run ./internal/cmd/cli-emulator $(ARGS)

## chaos: the chaos soak, built with -race: random faults under read-write load over three fake PSC
##        endpoints in front of ONE backend, then a table of invariants (exit 1 if one fails).
##        DURATION=2m, SEED=n to replay a run, ARGS=-emulator for the Cloud Spanner emulator, ARGS=-h for flags.
chaos:
	$(GO) run -race ./cmd/spannerme-chaos -duration $(DURATION) -seed $(SEED) $(ARGS)

## test: every test, including the integration suite against the Cloud Spanner emulator.
test:
	@$(EMULATOR_STATUS)
	@echo '$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...  (a line per package as it finishes)'; \
	$(TEST_PROGRESS) -count=1 -timeout $(TEST_TIMEOUT) ./...; status=$$?; \
	$(EMULATOR_STATUS) -after; exit $$status

## race: every test under the race detector.
race:
	@$(EMULATOR_STATUS)
	@echo '$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...  (a line per package as it finishes)'; \
	$(TEST_PROGRESS) -race -count=1 -timeout $(TEST_TIMEOUT) ./...; status=$$?; \
	$(EMULATOR_STATUS) -after; exit $$status

## fuzz: each native fuzz target for FUZZTIME (10m by default), one after the other, each with
##       -parallel FUZZPARALLEL (1 by default): the configuration parser (YAML, JSON), endpoint
##       parsing, the request classifiers, the command line's escaping of text (terminal and
##       JSON). A crasher is written to the package's testdata/fuzz/<target>/ and fails the
##       run; `make test` runs every seed.
FUZZTIME ?= 10m
FUZZPARALLEL ?= 1
FUZZ_TARGETS = ./spannerme:FuzzParseConfigYAML ./spannerme:FuzzParseConfigJSON ./spannerme:FuzzEndpoint \
	./internal/spannerreq:FuzzRequestClassifiers ./cmd/spannerme:FuzzTerminalText
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; name=$${t##*:}; \
		echo "$(GO) test -run '^$$' -fuzz '^$$name\$$' -fuzztime $(FUZZTIME) -parallel $(FUZZPARALLEL) $$pkg"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -parallel $(FUZZPARALLEL) $$pkg; \
	done

## lint: formatting, go vet and staticcheck.
lint: fmt vet staticcheck

fmt:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

staticcheck:
	$(GO) run $(STATICCHECK) ./...

## bench: every benchmark, ours against upstream and a plain client in the same run. ARGS are
##        more go test flags, e.g. ARGS='-benchtime 100ms'.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -timeout $(TEST_TIMEOUT) $(ARGS) ./...

## bench-client: the end-to-end benchmarks through the Spanner client only (plain, upstream, ours):
## point reads and streaming queries on spannertest, and 100/400/1000 concurrent queries through a
## 100-stream frontend adding 50 ms. BENCHTIME=2s by default.
BENCHTIME ?= 2s
bench-client:
	$(GO) test -run '^$$' -bench 'Client_' -benchmem -benchtime $(BENCHTIME) -timeout $(TEST_TIMEOUT) ./spannerme/

## bench-compare: the end-to-end benchmarks COUNT times, then benchstat's table with one column
##                per client (plain, upstream, spannerme): medians with 95% confidence intervals
##                (6 runs at least) and each client against plain. COUNT=6, BENCHTIME=2s,
##                BENCH=Client_ (a -bench pattern); the raw results are kept in BENCH_OUT.
##                Its timeout follows the work: BENCH_TIMEOUT, COUNT x BENCH_MINUTES (10: one
##                count of every Client_ row at 2s, with room) plus 10 minutes.
COUNT ?= 6
BENCH ?= Client_
BENCH_OUT ?= $(or $(TMPDIR),/tmp)/spannerme-bench-compare.txt
BENCH_MINUTES ?= 10
BENCH_TIMEOUT ?= $(shell expr $(COUNT) \* $(BENCH_MINUTES) + 10)m
bench-compare:
	@echo "benchmarks $(BENCH), $(COUNT) times (timeout $(BENCH_TIMEOUT)); results in $(BENCH_OUT)"
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -benchtime $(BENCHTIME) -count $(COUNT) \
		-timeout $(BENCH_TIMEOUT) ./spannerme/ > $(BENCH_OUT); status=$$?; \
		if [ $$status -ne 0 ]; then cat $(BENCH_OUT); exit $$status; fi
	$(GO) run $(BENCHSTAT) -col /client $(BENCH_OUT)
	@echo "raw results: $(BENCH_OUT)"

## compat: the differential suite on spannertest against the oldest supported Spanner client
##         (SPANNER_OLDEST; the README names the range), in a temporary copy of the module (the
##         working tree, without .git) whose go.mod is moved to that version by go get.
SPANNER_OLDEST ?= v1.95.0
compat:
	@set -e; dir=$$(mktemp -d); trap 'chmod -R u+w "$$dir"; rm -rf "$$dir"' EXIT; \
	tar --exclude=./.git -cf - . | tar -xf - -C "$$dir"; cd "$$dir"; \
	echo "cloud.google.com/go/spanner@$(SPANNER_OLDEST) in $$dir"; \
	$(GO) get cloud.google.com/go/spanner@$(SPANNER_OLDEST); \
	$(GO) list -m cloud.google.com/go/spanner; \
	$(GO) build ./...; \
	if ! $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run 'TestDifferential/spannertest' -v ./integration_test > compat.out 2>&1; then \
		cat compat.out; exit 1; fi; \
	grep -E '^(--- |ok)|cells' compat.out

## ci: what CI runs (.ci/run): lint, then every test under -race, then the oldest supported
##     Spanner client (compat).
ci: lint race compat
