#!/usr/bin/env bash
# GPU check for a machine with an NVIDIA GPU (run there from the repository root, with a
# release build of tandem at target/release/tandem). It shows:
#   1. the agent discovering the GPUs through NVML (no --gpus given),
#   2. a job that asks for one GPU seeing exactly it through CUDA_VISIBLE_DEVICES,
#   3. PyTorch using it (when torch is importable).
set -euo pipefail
T=${TANDEM:-target/release/tandem}
D=$(mktemp -d)
trap 'kill %1 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
"$T" up --agents 1 --port 0 --data "$D" > "$D/up.out" 2>&1 &
for _ in $(seq 100); do [ -f "$D/env" ] && break; sleep 0.1; done
source "$D/env"
sleep 1
echo "== agent log"; cat "$D/node1.log"
echo "== sinfo -N"; "$T" nodes -N
cd "$D"
cat > gpu.sh <<'SCRIPT'
#!/bin/bash
#SBATCH --gpus-per-node=1
#SBATCH -o gpu.out
echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES SLURM_JOB_GPUS=$SLURM_JOB_GPUS CUDA_DEVICE_ORDER=$CUDA_DEVICE_ORDER"
nvidia-smi -L || true
python3 - <<'PY' || echo "python3/torch not available"
import torch
print("torch", torch.__version__, "cuda available:", torch.cuda.is_available(), "devices:", torch.cuda.device_count())
if torch.cuda.is_available():
    x = torch.ones(4096, 4096, device="cuda")
    print("device:", torch.cuda.get_device_name(0), "sum(x@x) =", (x @ x).sum().item())
PY
SCRIPT
id=$("$T" submit --parsable gpu.sh)
for _ in $(seq 600); do
  st=$("$T" show job "$id" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  case "$st" in COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY|NODE_FAIL) break;; esac
  sleep 0.5
done
echo "== job $id: $st"; cat gpu.out
"$T" history -j "$id" --format=JobID,State,ExitCode,AllocTRES
