#!/usr/bin/env bash
# Issue 16, Must show 1: `tandem bench llm` as paired runs in alternating order, reported as
# medians. For each workload the replicas' capacity is measured once (the first run) and the
# same offered rate is used in every round; round k runs the policies in the listed order when
# k is odd and reversed when even, with seed k (the same arrivals and texts for every policy of
# a round). Prints one table per workload (medians over the rounds, and the per-round values
# of the headline figures), and writes every run's JSON under $OUT (default target/llm-paired).
#
#   bench/llm-paired.sh [--rounds 3] [--requests 2000] [--workloads "shared-prefix multi-turn unique"]
#
# Uses target/release/tandem (cargo build --release -p tandem).
set -euo pipefail
rounds=3
requests=2000
workloads="shared-prefix multi-turn unique"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --workloads) workloads=$2; shift 2 ;;
    *) echo "llm-paired.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
tandem=${TANDEM:-$root/target/release/tandem}
out=${OUT:-$root/target/llm-paired}
mkdir -p "$out"
[ -x "$tandem" ] || { echo "llm-paired.sh: build $tandem first (cargo build --release -p tandem)" >&2; exit 1; }
for w in $workloads; do
  case "$w" in
    unique) policies="least_request llm" ;;
    *) policies="round_robin least_request llm" ;;
  esac
  cap=""
  for k in $(seq 1 "$rounds"); do
    order=$policies
    if [ $((k % 2)) -eq 0 ]; then order=$(echo "$policies" | tr ' ' '\n' | tac | tr '\n' ' '); fi
    args=()
    for p in $order; do args+=(--balance "$p"); done
    [ -n "$cap" ] && args+=(--capacity "$cap")
    echo "== $w round $k: $order $(date -u +%H:%M:%S)" >&2
    # Arrivals stop at --requests; --duration only bounds the run.
    "$tandem" bench llm --workload "$w" "${args[@]}" --requests "$requests" --duration 3600 --seed "$k" --json > "$out/$w-$k.json"
    if [ -z "$cap" ]; then cap=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["capacity_rps"])' "$out/$w-$k.json"); fi
  done
done
python3 - "$out" "$rounds" $workloads <<'PY'
import json, statistics, sys
out, rounds, workloads = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
for w in workloads:
    runs = [json.load(open(f"{out}/{w}-{k}.json")) for k in range(1, rounds + 1)]
    pols = [p["balance"] for p in runs[0]["policies"]]
    pols.sort(key=lambda p: ["round_robin", "least_request", "p2c", "llm"].index(p) if p in ["round_robin", "least_request", "p2c", "llm"] else 9)
    def vals(p, f):
        return [next(x for x in r["policies"] if x["balance"] == p)[f] for r in runs]
    med = lambda p, f: statistics.median(vals(p, f))
    r0 = runs[0]
    print(f"\n### {w}: capacity {r0['capacity_rps']:.1f} req/s, offered {r0['offered_rps']:.1f} req/s, {rounds} rounds, medians")
    print("| figure | " + " | ".join(pols) + " |")
    print("|---|" + "---|" * len(pols))
    rows = [("requests per run", "requests", "{:.0f}"), ("TTFT p50 (ms)", "ttft_p50_ms", "{:.1f}"), ("TTFT p99 (ms)", "ttft_p99_ms", "{:.1f}"),
            ("time per output token p50 (ms)", "tpot_p50_ms", "{:.2f}"), ("end-to-end p99 (ms)", "e2e_p99_ms", "{:.0f}"),
            ("throughput (req/s)", "throughput_rps", "{:.1f}"), ("prefix-cache hit rate", "cache_hit_rate", "{:.1%}"),
            ("shed", "shed", "{:.0f}"), ("failed", "failed", "{:.0f}")]
    for name, f, fmt in rows:
        print(f"| {name} | " + " | ".join(fmt.format(med(p, f)) for p in pols) + " |")
    for f in ["ttft_p99_ms", "cache_hit_rate"]:
        print(f"per round {f}: " + "; ".join(f"{p} " + " / ".join(f"{v:.3g}" for v in vals(p, f)) for p in pols))
    if "llm" in pols:
        for base in ["round_robin", "least_request"]:
            if base in pols:
                print(f"llm / {base}: TTFT p99 {med('llm','ttft_p99_ms')/med(base,'ttft_p99_ms'):.2f}x, TTFT p50 {med('llm','ttft_p50_ms')/med(base,'ttft_p50_ms'):.2f}x, "
                      f"cache hits {med('llm','cache_hit_rate')/max(med(base,'cache_hit_rate'),1e-9):.2f}x")
PY
