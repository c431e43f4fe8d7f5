#!/usr/bin/env bash
# Takes the screenshot of the status page that README.md shows: builds the server and the demo,
# runs `make demo`'s setup (bin/coredns on Corefile.example with the demo's web backends and
# resolvers, all on 127.0.0.0/8), lets the demo walk through its steps and hold, then loads
# http://127.0.0.1:8182/ in headless Chromium (Debian's `chromium`) and saves what it renders.
#
#   docs/screenshot.sh [OUT.png] [WIDTHxHEIGHT]     # default docs/status.png 1200x2400
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/status.png}
size=${2:-1200x2400}

make build
go build -o bin/demo ./demo
log=$(mktemp)
profile=$(mktemp -d)
bin/demo -coredns bin/coredns -conf Corefile.example -hold 120s >"$log" 2>&1 &
demo=$!
cleanup() {
	kill -INT "$demo" 2>/dev/null || true
	wait "$demo" 2>/dev/null || true
	rm -rf "$profile" "$log"
}
trap cleanup EXIT

# The demo prints "Holding" once its walk is done.
for _ in $(seq 1 360); do
	grep -q '^Holding' "$log" && break
	kill -0 "$demo" 2>/dev/null || { cat "$log"; echo "the demo stopped" >&2; exit 1; }
	sleep 0.5
done
grep -q '^Holding' "$log" || { cat "$log"; echo "the demo did not finish its walk" >&2; exit 1; }

chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
	--disable-component-update --disable-sync --no-first-run --disable-dev-shm-usage \
	--user-data-dir="$profile" --hide-scrollbars --window-size="${size/x/,}" \
	--screenshot="$out" http://127.0.0.1:8182/
echo "wrote $out"
