#!/bin/bash
# Alternated rounds of `tandem bench submit` for several builds (BENCHMARKS.md 4.7, 4.8).
#
# usage: bench/rounds.sh N NAME=PATH/TO/tandem ...   (tandem-slurm beside each)
#
# Runs `tandem bench submit --jobs 3000 --cli-jobs 100 --agents 4 --json` of each build in turn,
# N rounds, and prints one line per run: the name, completed jobs/s, API submissions/s, CLI
# submissions/s and the controller's CPU seconds (None for builds whose report lacks it).
#
# Each build's `tandem` and `tandem-slurm` are first copied into a directory of their own, as
# an install would put them, and run from there: a binary the linker has just written starts
# measurably slower than a copy of it (more page faults per command: BENCHMARKS.md 4.9), so
# builds compared must start from the same kind of file.
set -euo pipefail
if [ $# -lt 2 ]; then sed -n '2,14p' "$0"; exit 2; fi
n=$1
shift
installed=$(mktemp -d /tmp/tandem-rounds-XXXXXX)
trap 'rm -rf "$installed"' EXIT
builds=()
for lb in "$@"; do
  l=${lb%%=*}
  b=${lb#*=}
  mkdir "$installed/$l"
  cp "$b" "$(dirname "$b")/tandem-slurm" "$installed/$l/"
  builds+=("$l=$installed/$l/tandem")
done
for _ in $(seq "$n"); do
  for lb in "${builds[@]}"; do
    l=${lb%%=*}
    b=${lb#*=}
    "$b" bench submit --jobs 3000 --cli-jobs 100 --agents 4 --json 2>/dev/null | python3 -c "
import json, sys
r = json.load(sys.stdin)
print('$l', round(r['completed_jobs_per_s'], 1), round(r['api_submissions_per_s']), round(r['cli_submissions_per_s'], 1), r.get('controller_cpu_s'))"
  done
done
