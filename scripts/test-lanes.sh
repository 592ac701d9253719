#!/usr/bin/env bash
# Runs lanes of commands side by side: the arguments are shell commands, and
# a lone "--" starts the next lane. The commands of a lane run one after the
# other, each whether or not the one before it passed (so no test run is
# skipped because another failed). Each lane's output goes to a file and is
# printed whole, under a header, when the lane ends, so the lanes' outputs
# never interleave. Exits non-zero when any command of any lane failed.
#
#   scripts/test-lanes.sh 'go test ./a' 'go test ./b' -- 'go test ./c'
set -uo pipefail
set -m # each lane in a process group of its own, which an interrupt stops whole

dir=$(mktemp -d)
pids=()
lanes=()
lane=()
start=$SECONDS

run_lane() { # n, commands...: runs them in order, logs to $dir/n.log, status to $dir/n.status
  local n=$1 status=0 c t0
  shift
  for c in "$@"; do
    t0=$SECONDS
    echo "\$ $c"
    bash -c "$c" || { echo "FAILED ($((SECONDS - t0))s): $c"; status=1; continue; }
    echo "done ($((SECONDS - t0))s): $c"
  done >"$dir/$n.log" 2>&1
  echo "$status" >"$dir/$n.status"
}

spawn() {
  [ ${#lane[@]} -eq 0 ] && return
  local n=${#pids[@]}
  run_lane "$n" "${lane[@]}" &
  pids+=($!)
  lanes+=("$(printf '%s; ' "${lane[@]}")")
  lane=()
}
for a in "$@"; do
  if [ "$a" = "--" ]; then spawn; else lane+=("$a"); fi
done
spawn
# Interrupted or terminated: stop every lane's process group (go test, its
# test binary, whose servers and kandle children die with it) and exit.
trap 'for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done; wait; rm -rf "$dir"; exit 130' INT TERM

failed=0
left=${#pids[@]}
printed=()
while [ "$left" -gt 0 ]; do
  sleep 1
  for n in "${!pids[@]}"; do
    [ -n "${printed[$n]:-}" ] && continue
    [ -f "$dir/$n.status" ] || continue
    wait "${pids[$n]}"
    printed[$n]=1
    left=$((left - 1))
    verdict=PASS
    [ "$(cat "$dir/$n.status")" = 0 ] || { verdict=FAIL; failed=1; }
    echo "==== lane $((n + 1)) of ${#pids[@]}: $verdict after $((SECONDS - start))s: ${lanes[$n]}"
    cat "$dir/$n.log"
    echo "==== end of lane $((n + 1)) ($verdict)"
  done
done
rm -rf "$dir"
exit "$failed"
