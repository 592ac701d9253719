#!/usr/bin/env python3
"""Split a CPU profile of an end-to-end run into the parts that
docs/performance.md reports. Each sample counts for the first part, in the
order below, that has a frame in the sample's stack.

    python3 scripts/pprof-split.py engine.test cpu.prof

With --core, the parts are those of the aggregation core and its
hand-written limit (processors: BenchmarkAggregatorCore and
BenchmarkAggregatorCoreLimit); samples of the benchmarks' set-up (generating
the records, rebuilding the aggregator) are left out of the shares:

    python3 scripts/pprof-split.py --core processors.test cpu.prof
"""
import collections
import re
import subprocess
import sys

PARTS = [
    ("kfake broker", ["kfake."]),
    ("candle encode (AppendJSON)", ["candle.(*Candle).AppendJSON"]),
    ("rollup decode (ParseJSONRaw)", ["candle.ParseJSONRaw"]),
    ("1m aggregation (Aggregator.Process)", ["processors.(*Aggregator).Process"]),
    ("rollup core (Rollup.Process less decode, Rollup.Take)", ["processors.(*Rollup).Process", "processors.(*Rollup).Take"]),
    ("franz-go fetch, decode, decompress", ["kgo.(*source)", "kgo.ProcessFetchPartition"]),
    ("franz-go produce (Produce, batch encode, compress)",
     ["kgo.(*sink)", "kgo.(*Client).produce", "kgo.(*recBuf)", "kgo.(*produceRequest)", "kgo.(*Client).Produce"]),
    ("commit: changelog, end of transaction, Pebble", ["engine.(*liveStage).commit", "pebble"]),
    ("engine other (stage loop, slab)", ["kandle/engine", "kandle/processors", "kandle/candle"]),
    ("franz-go other (connections, transactions, group)", ["franz-go/pkg/kgo"]),
    ("GC and runtime", ["runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge",
                        "runtime.mcall", "runtime.morestack", "runtime.schedule"]),
]
SETUP = "set-up outside the timer (records, rebuilds)"
CORE_PARTS = [
    (SETUP, ["processors.benchKeyedTrades", "processors.newBenchAggregator", "processors.newCoreLimit"]),
    ("checkpoint (Changes)", ["processors.(*Aggregator).Changes"]),
    ("live scan (Active)", ["processors.(*Aggregator).Active"]),
    ("decode: shape match (member bytes, values validated)", ["processors.(*shape).match"]),
    ("decode: the rest (numbers, price x qty, event time)", ["processors.(*Decoder)."]),
    ("dedupe: remembering the trade id", ["processors.(*window).appendNum", "processors.numericID"]),
    ("key table lookup", ["processors.(*table["]),
    ("key check (record key = key field)", ["bytes.Equal"]),
    ("window update, closes, the rest of Process", ["processors.(*Aggregator).Process"]),
    ("limit: map lookup", ["runtime.mapaccess", "internal/runtime/maps."]),
    ("limit: closing windows", ["processors.(*coreLimit).closeDue"]),
    ("limit: parse and update", ["processors.(*coreLimit).", "processors.limitFixed", "processors.limitInt"]),
    ("the benchmark loop", ["processors.benchAggregator", "processors.BenchmarkAggregatorCoreLimit"]),
    ("GC and runtime", ["runtime."]),
]
OTHER = "other (syscalls, scheduler)"
UNITS = {"s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}


def main():
    args, parts_table, skip = sys.argv[1:], PARTS, None
    if args[:1] == ["--core"]:
        args, parts_table, skip = args[1:], CORE_PARTS, SETUP
    if len(args) != 2:
        sys.exit("usage: pprof-split.py [--core] BINARY PROFILE")
    out = subprocess.run(["go", "tool", "pprof", "-traces", args[0], args[1]],
                         capture_output=True, text=True, check=True).stdout
    parts, total = collections.Counter(), 0.0
    for block in out.split("-----------+-------------------------------------------------------"):
        lines = [l for l in block.strip().split("\n") if l.strip()]
        if not lines:
            continue
        m = re.match(r"\s*([\d.]+)(ms|s|us|µs)\s", lines[0] + " ")
        if not m:
            continue
        v = float(m.group(1)) * UNITS[m.group(2)]
        stack = "\n".join(lines)
        part = next((name for name, frames in parts_table if any(f in stack for f in frames)), OTHER)
        parts[part] += v
        if part != skip:
            total += v
    for name in [p[0] for p in parts_table] + [OTHER]:
        if name == skip:
            print(f"{name:55s} {parts[name]:.2f} s, left out of the shares")
            continue
        if parts[name]:
            print(f"{name:55s} {100 * parts[name] / total:5.1f} %")
    print(f"total samples {total:.2f} s")


if __name__ == "__main__":
    main()
