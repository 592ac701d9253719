#!/usr/bin/env python3
"""Split a CPU profile of an end-to-end run into the parts that
docs/performance.md reports. Each sample counts for the first part, in the
order below, that has a frame in the sample's stack.

    python3 scripts/pprof-split.py engine.test cpu.prof
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
    ("rollup core (Rollup.Process less decode)", ["processors.(*Rollup).Process"]),
    ("franz-go fetch, decode, decompress", ["kgo.(*source)", "kgo.ProcessFetchPartition"]),
    ("franz-go produce (Produce, batch encode, compress)",
     ["kgo.(*sink)", "kgo.(*Client).produce", "kgo.(*recBuf)", "kgo.(*produceRequest)", "kgo.(*Client).Produce"]),
    ("commit: changelog, end of transaction, Pebble", ["engine.(*liveStage).commit", "pebble"]),
    ("engine other (stage loop, slab)", ["kandle/engine", "kandle/processors", "kandle/candle"]),
    ("franz-go other (connections, transactions, group)", ["franz-go/pkg/kgo"]),
    ("GC and runtime", ["runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge",
                        "runtime.mcall", "runtime.morestack", "runtime.schedule"]),
]
OTHER = "other (syscalls, scheduler)"
UNITS = {"s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: pprof-split.py BINARY PROFILE")
    out = subprocess.run(["go", "tool", "pprof", "-traces", sys.argv[1], sys.argv[2]],
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
        total += v
        stack = "\n".join(lines)
        for name, frames in PARTS:
            if any(f in stack for f in frames):
                parts[name] += v
                break
        else:
            parts[OTHER] += v
    for name in [p[0] for p in PARTS] + [OTHER]:
        print(f"{name:55s} {100 * parts[name] / total:5.1f} %")
    print(f"total samples {total:.2f} s")


if __name__ == "__main__":
    main()
