#!/usr/bin/env bash
# Issue 16, Must show 5: where `tandem proxy`'s CPU goes at a fixed load. Starts 4
# `tandem __upstream`s and `tandem proxy --threads 2` in front of them (round robin), offers
# `tandem bench load` an open loop of RATE requests/s for 20 s, and `perf record`s the proxy
# for 10 s of it; prints the split by binary (kernel, tandem, libc), the top symbols, and the
# load generator's figures. The profile stays in $OUT/proxy.perf (default target/proxy-profile).
#
#   bench/proxy-profile.sh [RATE]     (default 8000)
#
# Uses target/release/tandem (cargo build --release -p tandem) and perf.
set -euo pipefail
rate=${1:-8000}
root=$(cd "$(dirname "$0")/.." && pwd)
tandem=${TANDEM:-$root/target/release/tandem}
out=${OUT:-$root/target/proxy-profile}
mkdir -p "$out"
[ -x "$tandem" ] || { echo "proxy-profile.sh: build $tandem first (cargo build --release -p tandem)" >&2; exit 1; }
command -v perf >/dev/null || { echo "proxy-profile.sh: perf not found (apt-get install linux-perf)" >&2; exit 1; }
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
ups=()
for i in 1 2 3 4; do
  "$tandem" __upstream --port 0 --name "up$i" > "$out/up$i.txt" &
  pids+=($!)
done
for i in 1 2 3 4; do
  until grep -q 'listening on' "$out/up$i.txt" 2>/dev/null; do sleep 0.1; done
  ups+=("$(grep -o '127.0.0.1:[0-9]*' "$out/up$i.txt" | head -1)")
done
list=$(IFS=,; echo "${ups[*]}")
"$tandem" proxy --listen 127.0.0.1:0 --threads 2 --static "bench=$list" > "$out/proxy.txt" 2>&1 &
proxy=$!
pids+=($proxy)
until grep -q '127.0.0.1:' "$out/proxy.txt" 2>/dev/null; do sleep 0.1; done
addr=$(grep -o '127.0.0.1:[0-9]*' "$out/proxy.txt" | head -1)
"$tandem" bench load "http://$addr/s/bench/hello" --rate "$rate" --duration 20 --json > "$out/load.json" &
load=$!
sleep 5
perf record -F 999 -g -p "$proxy" -o "$out/proxy.perf" -- sleep 10 2> /dev/null
wait "$load"
echo "== by binary"
perf report -i "$out/proxy.perf" --no-children --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -6 || true
echo "== top symbols"
perf report -i "$out/proxy.perf" --no-children --sort dso,sym --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -25 || true
echo "== load"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('sent', d['sent'], 'ok', d['ok'], 'failed', d['failed'], 'achieved', round(d['achieved_rps']), 'req/s', 'latency ms', d['latency_ms'])" "$out/load.json"
