#!/bin/bash
# Alternated rounds of `tandem bench submit` for several builds (BENCHMARKS.md 4.7, 4.8).
#
# usage: bench/rounds.sh N NAME=PATH/TO/tandem ...   (tandem-slurm beside each)
#
# Runs `tandem bench submit --jobs 3000 --cli-jobs 100 --agents 4 --json` of each build in turn,
# N rounds, and prints one line per run: the name, completed jobs/s, API submissions/s, CLI
# submissions/s and the controller's CPU seconds (None for builds whose report lacks it).
set -euo pipefail
if [ $# -lt 2 ]; then sed -n '2,9p' "$0"; exit 2; fi
n=$1
shift
for _ in $(seq "$n"); do
  for lb in "$@"; do
    l=${lb%%=*}
    b=${lb#*=}
    "$b" bench submit --jobs 3000 --cli-jobs 100 --agents 4 --json 2>/dev/null | python3 -c "
import json, sys
r = json.load(sys.stdin)
print('$l', round(r['completed_jobs_per_s'], 1), round(r['api_submissions_per_s']), round(r['cli_submissions_per_s'], 1), r.get('controller_cpu_s'))"
  done
done
