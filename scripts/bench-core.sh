#!/usr/bin/env bash
# The aggregation core against its hand-written limit, measured in one run:
# BenchmarkAggregatorCore and BenchmarkAggregatorCoreLimit (processors/
# bench_test.go, the same generated records) run in turns, one result at a
# time, the order swapped every round, so both see the same machine load.
# Prints the raw results, then the ratio of the medians of CPU per trade
# (core / limit) against the 1.5× target (scripts/benchratio), and benchstat's
# summary when benchstat is on the PATH
# (go install golang.org/x/perf/cmd/benchstat@latest).
#
# Each result is over the same 2^20 trades (four passes over the 2^18
# generated records, each pass on a fresh aggregator or limit), so both
# contestants amortise the same rebuilds whatever the machine's load does
# to how many trades a fixed time holds.
#
#   make bench-core                                  # 5 rounds of 2^20 trades each
#   CORE_COUNT=10 CORE_BENCHTIME=4194304x make bench-core
#   CORE_OUT=core.txt make bench-core                # keep the raw results (benchstat input)
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${CORE_COUNT:-5}
BENCHTIME=${CORE_BENCHTIME:-1048576x}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
OUT=${CORE_OUT:-$work/core.txt}
: >"$OUT"
go test -c -o "$work/processors.test" ./processors
go build -o "$work/benchratio" ./scripts/benchratio
for i in $(seq "$COUNT"); do
  order="AggregatorCore AggregatorCoreLimit"
  if [ $((i % 2)) -eq 0 ]; then order="AggregatorCoreLimit AggregatorCore"; fi
  for b in $order; do
    "$work/processors.test" -test.run '^$' -test.bench "^Benchmark$b\$" -test.benchmem \
      -test.benchtime "$BENCHTIME" -test.count 1 | grep '^Benchmark' | tee -a "$OUT"
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
if command -v benchstat >/dev/null; then benchstat "$OUT"; fi  # medians with confidence intervals, when installed
"$work/benchratio" -num AggregatorCore -den AggregatorCoreLimit -target 1.5 <"$OUT"
