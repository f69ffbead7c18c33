#!/usr/bin/env bash
# Issue 31: `kubectl exec` beside `srun --jobid=J --overlap`, the Slurm way to run a command in a
# running job, which takes the same path to the task (a step, its agent's I/O connection): per
# round, the wall time of each running `true`, and the time each takes to pass PIPE_MB of input
# through `wc -c` (kubectl's WebSocket through the controller's relay; srun's own connection to
# the agent). Alternated, on one local `tandem up` (one agent), as root. Median (min, max) of
# RUNS rounds, and each kubectl figure as a ratio to srun's from the same run.
# Usage: bash bench/exec.sh [TANDEM_BINARY] [RUNS] [PIPE_MB]   (default: target/release/tandem
# if built, else target/debug/tandem; 15 rounds; 64 MiB)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
if [ -z "$bin" ]; then bin=target/release/tandem; [ -x "$bin" ] || bin=target/debug/tandem; fi
bin=$(readlink -f "$bin")
runs=${2:-15}
mb=${3:-64}
kubectl=$(readlink -f target/clients-venv/bin/kubectl)
[ -x "$kubectl" ] || { echo "kubectl is missing: run tests/clients/setup.sh" >&2; exit 1; }
dir=$(mktemp -d /tmp/tandem-execbench.XXXXXX)
"$bin" up --data "$dir/d" --port 0 --no-proxy --no-hosts --agents 1 --cpus-per-agent 4 > "$dir/up.log" 2>&1 &
up=$!
trap 'kill $up 2>/dev/null; wait $up 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$dir/d/controller/tandem.sock" ] && grep -q "is up" "$dir/up.log" && break; sleep 0.1; done
export TANDEM_SERVER="unix://$dir/d/controller/tandem.sock"
"$bin" shims "$dir/shims" > /dev/null
"$bin" token --kubeconfig "$dir/kc"
export KUBECONFIG="$dir/kc"
job=$("$dir/shims/sbatch" --parsable --wrap "sleep 3600")
until "$dir/shims/squeue" -h -j "$job" -o %T | grep -q RUNNING; do sleep 0.1; done
pod="job-$job-0"
"$kubectl" exec "$pod" -- true # discovery cached, as for a user's second command
head -c "$((mb << 20))" /dev/zero > "$dir/input"
ms() { local t0 t1; t0=$(date +%s%N); "$@" > /dev/null; t1=$(date +%s%N); echo $(((t1 - t0) / 1000000)); }
: > "$dir/times"
for r in $(seq "$runs"); do
  s=$(ms "$dir/shims/srun" --jobid="$job" --overlap true)
  k=$(ms "$kubectl" exec "$pod" -- true)
  g=$(ms "$kubectl" get pod "$pod")
  sp=$(ms sh -c "'$dir/shims/srun' --jobid=$job --overlap wc -c < '$dir/input'")
  kp=$(ms sh -c "'$kubectl' exec -i $pod -- wc -c < '$dir/input'")
  echo "$r $s $k $sp $kp $g" >> "$dir/times"
done
"$dir/shims/scancel" "$job"
python3 - "$dir/times" "$mb" <<'EOF'
import statistics, sys
rows = [list(map(int, l.split()[1:])) for l in open(sys.argv[1])]
mb = int(sys.argv[2])
cols = list(zip(*rows))
def fig(c):
    return f"{statistics.median(c):.0f} ms ({min(c)}, {max(c)})"
s, k, sp, kp, g = cols
print(f"rounds: {len(rows)}")
print(f"| srun --overlap true | {fig(s)} | 1 |")
print(f"| kubectl exec true | {fig(k)} | {statistics.median(k) / statistics.median(s):.2f}x |")
print(f"| kubectl get pod (kubectl's own start, its token plugin, one request) | {fig(g)} | {statistics.median(g) / statistics.median(s):.2f}x |")
print(f"| srun --overlap wc -c < {mb} MiB | {fig(sp)} ({mb * 1000 / statistics.median(sp):.0f} MiB/s) | 1 |")
print(f"| kubectl exec -i wc -c < {mb} MiB | {fig(kp)} ({mb * 1000 / statistics.median(kp):.0f} MiB/s) | {statistics.median(kp) / statistics.median(sp):.2f}x |")
EOF
