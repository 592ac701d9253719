# kandle — make targets. `make demo` and `make test` are the two commands a new user needs.
GO       ?= go
BIN      := bin/kandle
PKGS     := ./...
# -count=1: always execute (never report cached results). make test runs
# three lanes side by side (scripts/test-lanes.sh): cmd/kandle; engine, then
# connectors/kinesis (TEST_LANES: a lane's packages joined by +); and every
# other package. A lane runs its packages one at a time (-p 1: the emulator
# tests compete for the 2 cores otherwise, and that makes timing-sensitive
# fault tests flaky). Inside a package, tests that mostly wait for the wall
# clock with servers of their own call t.Parallel (testkit.WallClockTest in
# cmd/kandle and engine, the TestKinesis subtests): cmd/kandle runs four of
# them at once (its TestMain, unless -parallel is given), its cluster tests'
# unfused runs (TestUnfused) among them, the other packages -parallel
# (GOMAXPROCS by default), which keeps make test near ~10 minutes on 2 cores.
TESTFLAGS ?= -p 1 -count=1 -timeout 30m
TEST_LANES := ./cmd/kandle ./engine+./connectors/kinesis

.PHONY: build demo test test-unfused race deps bench bench-core bench-peers bench-replay soak soak-outage lint docs chart-lib clean fuzz

build:
	$(GO) build -o $(BIN) ./cmd/kandle

## demo: dev broker + trade generator + the embedded crypto topology, candles printed as a table and
## drawn live by the chart page at http://127.0.0.1:8080/
demo: build
	./$(BIN) demo

## deps: install what the tests talk to (kcat, redis-server, npm emulators)
deps:
	bash scripts/test-deps.sh

## test: every test, against real servers started on free loopback ports, and the Helm chart's
## strict render check (deploy/chartcheck, a module of its own: the Helm SDK and the Kubernetes
## API types stay out of kandle's go.mod)
test: deps
	$(GO) vet $(PKGS)
	bash scripts/test-lanes.sh $(foreach l,$(TEST_LANES),'$(GO) test $(TESTFLAGS) $(subst +, ,$(l))' --) \
		'$(GO) test $(TESTFLAGS) $$($(GO) list $(PKGS) | grep -vxF "$$($(GO) list $(subst +, ,$(TEST_LANES)))")' \
		'cd deploy/chartcheck && $(GO) vet ./... && $(GO) test $(TESTFLAGS) ./...'

# TestUnfused (cmd/kandle) runs the cluster tests whose topologies chain
# rollups (kills, faults, broker trouble, outages with revisions, the crash
# harness) again with every rollup a stage of its own; make test runs it with
# the rest of cmd/kandle, and the engine's chain tests run both modes as
# subtests.
## test-unfused: only the unfused runs of the cluster tests of cmd/kandle (part of make test)
test-unfused:
	$(GO) test $(TESTFLAGS) -run '^TestUnfused$$' ./cmd/kandle

## race: the tests of the packages below with the race detector and the invariant checks compiled in
## (-race -tags invariants; see internal/invariant): decimal, candle, topology, processors, state and the
## internal helpers (about 10 minutes on 2 cores, processors most of it), then the engine's restore,
## restart and Kinesis tests (RACE_ENGINE_RUN: shard restores and handoffs, splits and merges, killed
## instances; about 5 minutes more). The rest of the engine, the connectors and the commands are left
## out (their end-to-end tests run 5-10x slower under -race), and so is the Kinesis snapshot test
## (RACE_ENGINE_SKIP: its 27,600 live candles do not keep up under -race); run one with e.g.
## make race RACE_PKGS=./connectors/kinesis RACE_RUN=TestKinesis RACE_ENGINE_RUN=Ghost
RACE_PKGS ?= ./decimal ./candle ./topology/... ./processors ./state ./internal/invariant ./internal/archtest ./internal/gen
RACE_RUN  ?= .
RACE_ENGINE_RUN ?= TestKinesis|TestRestartResumesExactly|Restore|Snapshot|Barrier
RACE_ENGINE_SKIP ?= TestKinesisEmptyDiskRestoreReadsFromTheSnapshot
# Allocation counts mean nothing under -race (it allocates for itself): those tests run in make test.
RACE_SKIP ?= Allocation
race:
	$(GO) vet -tags invariants $(RACE_PKGS) ./engine
	$(GO) test -race -tags invariants -p 1 -count=1 -timeout 60m -run '$(RACE_RUN)' -skip '$(RACE_SKIP)' $(RACE_PKGS)
	$(GO) test -race -tags invariants -count=1 -timeout 60m -run '$(RACE_ENGINE_RUN)' -skip '$(RACE_SKIP)|$(RACE_ENGINE_SKIP)' ./engine

## bench: throughput figures (aggregation core, end to end, sinks, Valkey vs per-trade Lua)
# BenchmarkFailover's 10 M-trade history needs >10 GiB of RAM with the in-process
# broker (it keeps every record in memory); make bench stops at 1 M.
KANDLE_FAILOVER_HISTORY ?= 1000000
export KANDLE_FAILOVER_HISTORY
bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 2s ./processors ./decimal ./engine ./connectors/...
	$(GO) test -run '^$$' -bench 'BenchmarkAPI' -benchtime 2s ./serve
	$(GO) test -run '^$$' -bench 'BenchmarkStreamFanout' -benchtime 20x -timeout 10m ./serve

## bench-core: the aggregation core against its hand-written limit, interleaved in one run:
## ratio of the medians of CPU per trade against the 1.5× target (CORE_COUNT rounds, default 5, of CORE_BENCHTIME, default 2^20 trades)
bench-core:
	bash scripts/bench-core.sh

## bench-peers: kandle (rollups fused, the default) vs a naive franz-go consumer and Goka (LevelDB), same
## broker, same trades, contestants interleaved; prints trades/s, trades/CPU-s and kandle's ratios
## (PEERS_N trades, default 1 M: Goka takes minutes; PEERS_N=10000000 PEERS_RUNS=3 PEERS_ONLY=kandle,naive
## for the recorded run; PEERS_ONLY=kandle,kandle-unfused compares fused and unfused rollups; PEERS_FLAGS for
## more, e.g. -cleaner 10s -maxrss 7000, -cpuprofile p)
PEERS_N     ?= 1000000
PEERS_RUNS  ?= 1
PEERS_ONLY  ?= kandle,naive,goka
PEERS_FLAGS ?=
bench-peers:
	cd bench/peers && $(GO) run . -n $(PEERS_N) -runs $(PEERS_RUNS) -only $(PEERS_ONLY) $(PEERS_FLAGS)

## bench-replay: `kandle replay` of REPLAY_N trades (default 10 M) through 1m + 7 rollups: trades/s and peak RSS
bench-replay:
	bash scripts/bench-replay.sh

## fuzz: run every fuzz target for FUZZTIME each (seed corpora in each package's
## testdata/fuzz/<Target>/; `make test` runs those seeds as ordinary tests)
FUZZTIME ?= 30s
FUZZ_TARGETS := \
	./processors:FuzzDecode \
	./decimal:FuzzParse \
	./decimal:FuzzSum \
	./candle:FuzzParseEventTime \
	./candle:FuzzParseJSON \
	./topology:FuzzParse \
	./connectors/kinesis:FuzzRecordStream \
	./engine:FuzzDeadLetter \
	./serve:FuzzCandleRequests \
	./cmd/kandle:FuzzDeviceRequests
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$pkg $$name ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) -parallel 1 $$pkg; \
	done

## soak: the crash harness, the live-under-faults and broker-trouble tests for minutes (many more kills,
## faults and trades than make test) with the shipped defaults, and 40 rounds of group members killed
## mid-rebalance on the dev broker; SOAK_COUNT=5 runs them five times in a row
SOAK_COUNT ?= 1
soak: deps
	KANDLE_SOAK=1 $(GO) test -p 1 -count=$(SOAK_COUNT) -run '^(TestCrashHarness|TestLiveEqualsReplayUnderFaults|TestBrokerTroubleThroughProxies)$$' -timeout 180m -v ./cmd/kandle
	KANDLE_SOAK=1 $(GO) test -count=$(SOAK_COUNT) -run '^TestDevBrokerGroupNeverWedges$$' -timeout 60m -v ./connectors/kafka

## soak-outage: the producer-outage tests five times in a row (a live group with the shipped defaults
## whose producer holds its trades for 30s, longer than the idle advance, then sends the backlog: it
## becomes revisions whose newest candles equal a replay's, also with instances SIGKILLed during the
## revision burst; the two run side by side, up to 2 minutes a round: a wait of up to 52s that puts the
## outage across a minute boundary, 60s of input, the replay). make test runs them once; OUTAGE_COUNT=1
## runs them once here
OUTAGE_COUNT ?= 5
soak-outage: deps
	$(GO) test -p 1 -count=$(OUTAGE_COUNT) -run '^TestOutageBacklogBecomesRevisions' -timeout 60m -v ./cmd/kandle

# bench/peers and deploy/chartcheck are modules of their own (Goka, sarama,
# the Helm SDK and the Kubernetes API types stay out of kandle's go.mod),
# which `go vet ./...` does not enter: vet them here so they keep building.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	cd bench/peers && $(GO) vet ./...
	cd deploy/chartcheck && $(GO) vet ./...

## docs: regenerate docs/reference.md from the component specs
docs:
	$(GO) run ./cmd/kandle docs > docs/reference.md

## chart-lib: refresh the chart page's embedded lightweight-charts from npm (serve/web/package.json pins it)
chart-lib:
	bash scripts/refresh-chart-lib.sh

clean:
	rm -rf bin
