#!/usr/bin/env bash
# Installs everything kandle's tests talk to, idempotently:
#   Debian: kcat (an outside Kafka client), redis-server (Valkey protocol), gcc (Pebble's cgo zstd),
#           chromium (the chart page's headless browser test)
#   npm (tools/emu): dynalite, kinesis-local, kinesalite, s3rver, @duckdb/node-api
# Safe to run again: it skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v kcat >/dev/null || need_apt+=(kcat)
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v gcc >/dev/null || need_apt+=(gcc)
command -v chromium >/dev/null || need_apt+=(chromium)
command -v node >/dev/null || need_apt+=(nodejs npm)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
  echo "test-deps: installing ${need_apt[*]} with apt-get"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -d tools/emu/node_modules/@duckdb/node-api ] || [ ! -d tools/emu/node_modules/dynalite ] \
  || [ ! -d tools/emu/node_modules/kinesis-local ] || [ ! -d tools/emu/node_modules/s3rver ]; then
  echo "test-deps: installing npm emulators into tools/emu"
  # `npm install` with the lock, not `npm ci`: npm 11's ci rejects a lock
  # without entries for @duckdb's optional bindings of other platforms.
  # --no-save keeps the tracked lock file untouched.
  (cd tools/emu && npm install --no-audit --no-fund --no-save --loglevel=error)
fi
echo "test-deps: kcat, chromium, redis-server $(redis-server --version | awk '{print $3}' | cut -d= -f2), node $(node --version), emulators in tools/emu"
