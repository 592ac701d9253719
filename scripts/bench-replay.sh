#!/usr/bin/env bash
# Replay speed: `kandle replay` of N trades (default 10 M; REPLAY_N to change)
# over 1000 symbols through the crypto topology (1m candles + seven rollups),
# against a `kandle dev-broker` on a free loopback port. Prints trades/s (wall
# clock of the replay process, start-up included) and its peak RSS.
#
#   make bench-replay                 # 10 M trades
#   REPLAY_N=1000000 make bench-replay
set -euo pipefail
cd "$(dirname "$0")/.."
N=${REPLAY_N:-10000000}
SYMBOLS=${REPLAY_SYMBOLS:-1000}
OUT=${REPLAY_OUT:-topics}
for tool in /usr/bin/time python3; do
  command -v "$tool" >/dev/null || { echo "bench-replay needs $tool (Debian: apt-get install time python3)" >&2; exit 1; }
done
go build -o bin/kandle ./cmd/kandle
work=$(mktemp -d)
broker=""
cleanup() {
  if [ -n "$broker" ]; then kill "$broker" 2>/dev/null || true; wait "$broker" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
addr=127.0.0.1:$port
./bin/kandle dev-broker --listen "$addr" --partitions 3 --topics trades >"$work/broker.log" 2>&1 &
broker=$!
for _ in $(seq 100); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
  sleep 0.1
done
syms=$(seq -f 'SYM%04g' 0 $((SYMBOLS - 1)) | paste -sd, -)
# 7.2 ms of event time per trade, like BenchmarkEndToEnd's dense stream.
span_ms=$((N * 72 / 10))
start=$(date +%s.%N)
./bin/kandle gen -brokers "$addr" -topic trades -symbols "$syms" -count "$N" -span "${span_ms}ms" -start 2026-01-01T00:00:00Z >/dev/null
echo "produced $N trades in $(python3 -c "import sys; print(round($(date +%s.%N)-$start, 1))") s" >&2
/usr/bin/time -v -o "$work/time.txt" ./bin/kandle replay -t testdata/topologies/crypto.yaml -brokers "$addr" --out "$OUT" >"$work/replay.log" 2>&1 || {
  cat "$work/replay.log" >&2; exit 1; }
wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$work/time.txt")
rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time.txt")
cpu=$(awk -F': ' '/User time/ {u=$2} /System time/ {s=$2} END {print u+s}' "$work/time.txt")
secs=$(python3 -c "p='$wall'.split(':'); print(sum(float(x)*60**i for i,x in enumerate(reversed(p))))")
python3 - "$N" "$secs" "$cpu" "$rss" <<'PY'
import sys
n, secs, cpu, rss = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
print(f"replay of {n} trades (1m + 7 rollups, --out topics): {secs:.1f} s wall, {n/secs:,.0f} trades/s, "
      f"{cpu:.1f} CPU-s ({n/cpu:,.0f} trades/CPU-s), peak RSS {rss/1024:.0f} MiB")
PY
