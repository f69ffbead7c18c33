#!/usr/bin/env bash
# PyTorch DDP check (not run in CI: torch is large). Run from the repository root:
#
#   bash scripts/ddp-check.sh
#
# It makes (or reuses) a virtual environment with CPU torch, starts a 2-node `tandem up`
# cluster, and submits one job (`sbatch -N2 --ntasks-per-node=2`) that trains scripts/ddp.py
# with DDP on the gloo backend twice:
#   1. `srun python3 ddp.py`: 4 tasks, the rendezvous from the variables Tandem sets per task;
#   2. `srun --ntasks-per-node=1 torchrun --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d ...`:
#      one torchrun per node, each starting 2 workers.
# It prints the job's output and exits non-zero if either part failed. The cluster is stopped
# on exit.
#
# Environment:
#   TORCH_VENV  the virtual environment (default /tmp/torch-venv; outside the repository)
#   TANDEM      the tandem binary (default: the newer of target/release/tandem and
#               target/debug/tandem; `cargo build -p tandem` when neither is built)
#   KEEP=1      keep the cluster's data directory (logs) after the run
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${TORCH_VENV:-/tmp/torch-venv}

# --- torch --------------------------------------------------------------------------------
if [ -x "$VENV/bin/python3" ] && "$VENV/bin/python3" -c 'import torch' 2>/dev/null; then
  echo "== reusing $VENV: torch $("$VENV/bin/python3" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
else
  echo "== installing torch into $VENV"
  t0=$(date +%s)
  python3 -m venv "$VENV"
  # CPU wheels first (no CUDA libraries: a few hundred MB); where that index cannot be
  # reached, PyPI's torch (which on x86_64 Linux brings the CUDA libraries: a few GB).
  if ! "$VENV/bin/pip" install --retries 0 --timeout 15 torch --index-url https://download.pytorch.org/whl/cpu; then
    echo "== the PyTorch CPU index is not reachable; installing torch from PyPI"
    "$VENV/bin/pip" install torch
  fi
  t1=$(date +%s)
  echo "== torch $("$VENV/bin/python3" -c 'import torch; print(torch.__version__)' 2>/dev/null) installed in $((t1 - t0)) s; $VENV is $(du -sh "$VENV" | cut -f1)"
fi
# numpy too: without it torch warns at every import (one line a rank).
"$VENV/bin/python3" -c 'import numpy' 2>/dev/null || "$VENV/bin/pip" install -q numpy
[ -x "$VENV/bin/torchrun" ] || { echo "ddp-check: $VENV/bin/torchrun is missing" >&2; exit 1; }

# --- tandem -------------------------------------------------------------------------------
# The newer of the release and debug builds (an old one may lack commands the job uses).
if [ -n "${TANDEM:-}" ]; then
  T=$TANDEM
elif [ -x "$ROOT/target/release/tandem" ] && { [ ! -x "$ROOT/target/debug/tandem" ] || [ "$ROOT/target/release/tandem" -nt "$ROOT/target/debug/tandem" ]; }; then
  T=$ROOT/target/release/tandem
else
  T=$ROOT/target/debug/tandem
  [ -x "$T" ] || (cd "$ROOT" && cargo build -p tandem)
fi
T=$(cd "$(dirname "$T")" && pwd)/$(basename "$T")

D=$(mktemp -d "${TMPDIR:-/tmp}/tandem-ddp.XXXXXX")
chmod 755 "$D"  # `tandem up` refuses a directory others may write
UP_PID=
cleanup() {
  rc=$?
  trap - EXIT INT TERM
  if [ -n "$UP_PID" ] && kill -0 "$UP_PID" 2>/dev/null; then
    kill -INT "$UP_PID" 2>/dev/null || true
    for _ in $(seq 150); do kill -0 "$UP_PID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$UP_PID" 2>/dev/null || true
    wait "$UP_PID" 2>/dev/null || true
  fi
  # What this cluster's jobs started and outlived it: an srun whose job was stopped mid-step
  # keeps asking the gone controller. Each is known by the TANDEM_SERVER it was given.
  local sock="TANDEM_SERVER=unix://$D/controller/tandem.sock" e p
  unset TANDEM_SERVER
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}; p=${p%/environ}
    [ "$p" = "$$" ] && continue
    if tr '\0' '\n' 2>/dev/null < "$e" | grep -qxF "$sock"; then
      echo "== killing $p, left by the cluster: $(tr '\0' ' ' 2>/dev/null < "/proc/$p/cmdline")"
      kill -KILL "$p" 2>/dev/null || true
    fi
  done
  if [ "$rc" -ne 0 ]; then
    for f in "$D/up.out" "$D"/controller.log "$D"/node*.log; do
      [ -s "$f" ] && { echo "== tail of $f"; tail -n 20 "$f"; }
    done
  fi
  if [ "${KEEP:-}" = 1 ]; then echo "== kept $D"; else rm -rf "$D"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "== $T up --agents 2 (data $D)"
"$T" up --agents 2 --cpus-per-agent 4 --port 0 --no-proxy --data "$D" > "$D/up.out" 2>&1 &
UP_PID=$!
for _ in $(seq 300); do
  [ -f "$D/env" ] && break
  kill -0 "$UP_PID" 2>/dev/null || { echo "ddp-check: tandem up exited" >&2; cat "$D/up.out" >&2; exit 1; }
  sleep 0.2
done
[ -f "$D/env" ] || { echo "ddp-check: tandem up wrote no env file" >&2; exit 1; }
# shellcheck disable=SC1091
source "$D/env"  # TANDEM_SERVER (the controller's Unix socket: no token needed)
export TANDEM_SERVER

# The Slurm commands as links, first on the PATH, then the venv's python3 and torchrun: the
# job and its steps get this environment (sbatch's and srun's --export default is ALL).
"$T" shims "$D/bin" > /dev/null
export PATH="$D/bin:$VENV/bin:$PATH"
for _ in $(seq 300); do
  n=$(sinfo -N -h 2>/dev/null | grep -c '^node.* idle' || true)
  [ "$n" -ge 2 ] && break
  sleep 0.2
done
sinfo -N

W=$D/work
mkdir -p "$W"
cp "$ROOT/scripts/ddp.py" "$W/ddp.py"
cat > "$W/ddp.sh" <<'SCRIPT'
#!/bin/bash
#SBATCH -J ddp
#SBATCH -N 2
#SBATCH --ntasks-per-node=2
#SBATCH -t 10
#SBATCH -o slurm-%j.out
export OMP_NUM_THREADS=1
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1)
if [ -n "$first" ]; then
  export MASTER_ADDR=$first
else  # a tandem from before `scontrol show hostnames`
  echo "notice: scontrol show hostnames printed nothing; keeping the MASTER_ADDR Tandem set ($MASTER_ADDR)"
fi
if ! getent hosts "$MASTER_ADDR" > /dev/null; then
  echo "notice: $MASTER_ADDR does not resolve here; using MASTER_ADDR=127.0.0.1 (tandem up's nodes share this machine)"
  export MASTER_ADDR=127.0.0.1
fi
# torchrun's c10d rendezvous is hosted by the torchrun whose host name (or address) is the
# endpoint's. tandem up's nodes share this machine and its one host name, so where node1 is a
# loopback address (tandem up's /etc/hosts lines: 127.0.2.1) no torchrun would host it: name
# the address instead, which every one of them takes as its own, and the first to bind hosts.
RDZV_HOST=$MASTER_ADDR
ip=$(getent ahostsv4 "$MASTER_ADDR" | awk 'NR == 1 { print $1 }')
case "$ip" in
  127.*) if [ "$ip" != "$MASTER_ADDR" ]; then
      echo "notice: $MASTER_ADDR is $ip, on loopback (the nodes share this machine); torchrun's rendezvous endpoint is $ip:29500"
      RDZV_HOST=$ip
    fi ;;
esac
echo "nodes: $SLURM_JOB_NODELIST, MASTER_ADDR=$MASTER_ADDR, python3: $(command -v python3)"

echo "== part 1: srun python3 ddp.py"
srun python3 ddp.py
part1=$?
echo "== part 1 exit: $part1"

echo "== part 2: srun --ntasks-per-node=1 torchrun --nnodes=2 --nproc-per-node=2 (c10d at $RDZV_HOST:29500)"
srun --ntasks-per-node=1 torchrun --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d \
  --rdzv-endpoint="$RDZV_HOST:29500" --rdzv-id="$SLURM_JOB_ID" ddp.py
part2=$?
echo "== part 2 exit: $part2"

[ "$part1" -eq 0 ] && [ "$part2" -eq 0 ]
SCRIPT

cd "$W"
id=$(sbatch --parsable ddp.sh)
echo "== submitted job $id"
st=
for _ in $(seq 1200); do  # 10 minutes at most (the job's own limit is 10)
  st=$(scontrol show job "$id" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  case "$st" in COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY|NODE_FAIL|PREEMPTED) break;; esac
  sleep 0.5
done
echo "== job $id: $st; slurm-$id.out:"
cat "slurm-$id.out" 2>/dev/null || echo "(no output file)"
echo "== sacct -j $id"
sacct -j "$id" --format=JobID,JobName,State,ExitCode,Elapsed,NodeList || true

out=$(cat "slurm-$id.out" 2>/dev/null || true)
oks=$(grep -c '^DDP OK world=4$' <<<"$out" || true)
if [ "$st" = COMPLETED ] && [ "$oks" -eq 2 ]; then
  echo "ddp-check: OK (both parts: DDP OK world=4)"
else
  echo "ddp-check: FAILED (job $st, $oks of 2 parts printed DDP OK world=4)" >&2
  exit 1
fi
