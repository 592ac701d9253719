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

if [ "${1:-}" = "--lane" ]; then # internal: one lane, in a session of its own
  out=$2
  shift 2
  status=0
  for c in "$@"; do
    t0=$SECONDS
    echo "\$ $c"
    if bash -c "$c"; then
      echo "done ($((SECONDS - t0))s): $c"
    else
      echo "FAILED ($((SECONDS - t0))s): $c"
      status=1
    fi
  done >"$out.log" 2>&1
  echo "$status" >"$out.status"
  exit 0
fi

dir=$(mktemp -d)
pids=()
lanes=()
lane=()
start=$SECONDS

# Each lane runs under setsid, in a process group of its own (its pid), so
# that an interrupt or SIGTERM of this script stops the whole lane: go test,
# its test binary, whose servers and kandle children die with it.
spawn() {
  [ ${#lane[@]} -eq 0 ] && return
  setsid bash "$0" --lane "$dir/${#pids[@]}" "${lane[@]}" &
  pids+=($!)
  local IFS=';'
  lanes+=("${lane[*]}")
  lane=()
}
trap 'for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done; wait; rm -rf "$dir"; exit 130' INT TERM
for a in "$@"; do
  if [ "$a" = "--" ]; then spawn; else lane+=("$a"); fi
done
spawn

failed=0
left=${#pids[@]}
printed=()
while [ "$left" -gt 0 ]; do
  sleep 1 &
  wait $! # a wait that a trapped signal interrupts at once
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
