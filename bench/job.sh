#!/usr/bin/env bash
# Issue 31: a Kubernetes Job beside the sbatch job it is. Per round, the wall time from the
# command to the job's end: `sbatch --wait --wrap true` beside `kubectl create job` then
# `kubectl wait --for=condition=Complete` (kubectl's start twice, its token plugin, the write,
# a watch until the Job's view says Complete); and an array of TASKS tasks (`sbatch --wait
# --array=0-(TASKS-1)`) beside an Indexed Job of TASKS completions, all at once (`kubectl apply
# -f`, then `wait`). Alternated, on one local `tandem up` (one agent), as root. Median (min,
# max) of RUNS rounds, each kubectl figure as a ratio to sbatch's from the same run.
# Usage: bash bench/job.sh [TANDEM_BINARY] [RUNS] [TASKS]   (default: target/release/tandem if
# built, else target/debug/tandem; 9 rounds; 16 tasks)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
if [ -z "$bin" ]; then bin=target/release/tandem; [ -x "$bin" ] || bin=target/debug/tandem; fi
bin=$(readlink -f "$bin")
runs=${2:-9}
tasks=${3:-16}
kubectl=$(readlink -f target/clients-venv/bin/kubectl)
[ -x "$kubectl" ] || { echo "kubectl is missing: run tests/clients/setup.sh" >&2; exit 1; }
dir=$(mktemp -d /tmp/tandem-jobbench.XXXXXX)
"$bin" up --data "$dir/d" --port 0 --no-proxy --no-hosts --agents 1 --cpus-per-agent "$tasks" > "$dir/up.log" 2>&1 &
up=$!
trap 'kill $up 2>/dev/null; wait $up 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$dir/d/controller/tandem.sock" ] && grep -q "is up" "$dir/up.log" && break; sleep 0.1; done
export TANDEM_SERVER="unix://$dir/d/controller/tandem.sock"
"$bin" shims "$dir/shims" > /dev/null
"$bin" token --kubeconfig "$dir/kc"
export KUBECONFIG="$dir/kc"
cd "$dir"
"$kubectl" get jobs > /dev/null 2>&1 # discovery cached, as for a user's second command
ms() { local t0 t1; t0=$(date +%s%N); "$@" > /dev/null; t1=$(date +%s%N); echo $(((t1 - t0) / 1000000)); }
indexed() {
  printf 'apiVersion: batch/v1\nkind: Job\nmetadata: {name: %s}\nspec:\n  completions: %s\n  parallelism: %s\n  completionMode: Indexed\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - {name: c, command: ["true"], workingDir: "%s"}\n' "$1" "$tasks" "$tasks" "$dir" > "$dir/$1.yaml"
}
one() { "$kubectl" create job "$1" --image=oci:/nonexistent:1 --dry-run=client -o yaml -- true | sed "s|image: oci:/nonexistent:1|workingDir: $dir|" > "$dir/$1.yaml"; }
: > "$dir/times"
for r in $(seq "$runs"); do
  s=$(ms "$dir/shims/sbatch" --wait -o /dev/null --wrap true)
  one "o$r"
  k=$(ms sh -c "'$kubectl' apply -f '$dir/o$r.yaml' && '$kubectl' wait --for=condition=Complete job/o$r --timeout=120s")
  sa=$(ms "$dir/shims/sbatch" --wait -o /dev/null --array=0-$((tasks - 1)) --wrap true)
  indexed "a$r"
  ka=$(ms sh -c "'$kubectl' apply -f '$dir/a$r.yaml' && '$kubectl' wait --for=condition=Complete job/a$r --timeout=120s")
  "$kubectl" delete job "o$r" "a$r" > /dev/null
  echo "$r $s $k $sa $ka" >> "$dir/times"
done
python3 - "$dir/times" "$tasks" <<'PY'
import statistics, sys
rows = [list(map(int, l.split()[1:])) for l in open(sys.argv[1])]
tasks = int(sys.argv[2])
s, k, sa, ka = list(zip(*rows))
def fig(c):
    return f"{statistics.median(c):.0f} ms ({min(c)}, {max(c)})"
print(f"rounds: {len(rows)}")
print(f"| sbatch --wait --wrap true | {fig(s)} | 1 |")
print(f"| kubectl apply -f (a Job) + kubectl wait --for=condition=Complete | {fig(k)} | {statistics.median(k) / statistics.median(s):.2f}x |")
print(f"| sbatch --wait --array=0-{tasks - 1} --wrap true | {fig(sa)} | 1 |")
print(f"| kubectl apply -f (Indexed, {tasks} completions) + kubectl wait | {fig(ka)} | {statistics.median(ka) / statistics.median(sa):.2f}x |")
PY
