#!/usr/bin/env bash
# Refreshes the chart page's copy of TradingView lightweight-charts from npm:
# installs the version pinned in serve/web/package.json into a temporary
# folder and copies its standalone production build and license into
# serve/web/vendor, which is committed and embedded in the binary (go build
# never needs npm). Run it after changing the pinned version, then commit.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp serve/web/package.json "$tmp/"
(cd "$tmp" && npm install --no-audit --no-fund --loglevel=error)
dist="$tmp/node_modules/lightweight-charts"
cp "$dist/dist/lightweight-charts.standalone.production.js" serve/web/vendor/lightweight-charts.standalone.production.js
{
  echo "serve/web/vendor/lightweight-charts.standalone.production.js is TradingView Lightweight Charts"
  echo "version $(node -p "require('$dist/package.json').version"), copied unchanged from the npm package"
  echo "(the standalone build includes its dependency fancy-canvas, MIT License)."
  echo
  cat "$dist/LICENSE"
} > serve/web/vendor/LICENSE-lightweight-charts.txt
echo "refresh-chart-lib: serve/web/vendor updated to lightweight-charts $(node -p "require('$dist/package.json').version")"
