#!/bin/bash
# System calls an agent and its launcher make per task (BENCHMARKS.md 4.10).
#
# usage: bench/syscalls-per-task.sh DIR [N]   (as root; needs strace)
#
# DIR holds a build's `tandem` and `tandem-slurm`. Starts `tandem up --agents 1` from it, runs one
# job, then `strace -c -f` of the agent and its launcher (`tandem __launcher`) while N (50) jobs
# `sbatch --parsable -o /dev/null --wrap true` run one after another, and prints strace's table
# (its counts divided by N are the per-task figures). `-f` follows each task until it ends, so the
# tasks' own system calls after their exec are in the counts too, as is the agent's usage
# sampler (every /proc/PID/stat every 2 s while tasks run). Everything it starts is stopped.
set -u
if [ $# -lt 1 ]; then sed -n '2,12p' "$0"; exit 2; fi
bin=$1
n=${2:-50}
d=$(mktemp -d /tmp/tandem-syscalls-XXXXXX)
trap 'pkill -f "tandem up --agents 1 --data $d/data" 2>/dev/null; sleep 1; rm -rf "$d"' EXIT
timeout 600 "$bin/tandem" up --agents 1 --data "$d/data" --port 0 --proxy-port 0 --no-proxy --no-hosts > "$d/up.log" 2>&1 &
for _ in $(seq 100); do [ -f "$d/data/env" ] && break; sleep 0.2; done
sleep 2
# shellcheck disable=SC1091
source "$d/data/env"
"$bin/tandem" shims "$d/bin" > /dev/null
"$d/bin/sbatch" --parsable -o /dev/null --wrap true > /dev/null
sleep 1
agent=$(pgrep -f "agent --server.*--data $d/data/node1" | head -1)
launcher=$(pgrep -f "__launcher $d/data/node1" | head -1)
strace -c -f -p "$agent" -p "$launcher" -o "$d/strace.txt" > /dev/null 2>&1 &
st=$!
sleep 1
for _ in $(seq "$n"); do
  env -i PATH=/usr/bin:/bin TANDEM_SERVER="$TANDEM_SERVER" "$d/bin/sbatch" --parsable -o /dev/null --wrap true > /dev/null
done
sleep 3
kill -INT "$st"
wait "$st" 2> /dev/null
echo "== $bin: $n tasks (strace -c -f of the agent, its launcher and the tasks)"
cat "$d/strace.txt"
