#!/usr/bin/env bash
# GPU check for a machine with an NVIDIA GPU (run there from the repository root, with a
# release build of tandem at target/release/tandem). It shows:
#   1. the agent discovering the GPUs through NVML (no --gpus given),
#   2. a job that asks for one GPU seeing exactly it through CUDA_VISIBLE_DEVICES,
#   3. PyTorch using it (when torch is importable),
#   4. a container step (--container-image, from a registry on loopback) given its GPU through
#      the node's CDI specification (made here with nvidia-ctk where /etc/cdi has none): inside,
#      its device alone, numbered 0, and nvidia-smi sees it. This case fails, never skips:
#      it needs runc, catatonit, umoci, skopeo, docker-registry and nvidia-ctk.
#   5. the built-in GPU health check through NVML (health_check_interval = 1): it runs at each
#      turn, and a healthy GPU leaves the node up (its findings, if any, are printed).
#   6. on a pure cgroup v2 host (this machine: no v1 memory hierarchy), a job's limits are the
#      kernel's: its cgroup has memory.max and cpu.max from --mem and -c, and a job that
#      allocates past its --mem ends OUT_OF_MEMORY. Fails, never skips, where the host is v2.
set -euo pipefail
T=${TANDEM:-target/release/tandem}
D=$(mktemp -d)
trap 'kill %1 2>/dev/null; [ -n "${REG:-}" ] && kill "$REG" 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
for tool in runc catatonit umoci skopeo docker-registry nvidia-ctk; do
  command -v "$tool" >/dev/null || { echo "gpu-check: $tool is not installed (the container case needs it)" >&2; exit 1; }
done
# The container case's registry and image, and the CDI specification, before the cluster starts.
mkdir -p "$D/cdi" "$D/reg"
if ls /etc/cdi/*.yaml /etc/cdi/*.json /var/run/cdi/*.yaml /var/run/cdi/*.json >/dev/null 2>&1; then
  export TANDEM_CDI_SPEC_DIRS=/etc/cdi,/var/run/cdi
else
  nvidia-ctk cdi generate --output="$D/cdi/nvidia.yaml" >/dev/null
  export TANDEM_CDI_SPEC_DIRS="$D/cdi"
fi
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf 'version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' "$D/reg" "$PORT" > "$D/reg.yml"
docker-registry serve "$D/reg.yml" > "$D/reg.log" 2>&1 & REG=$!
umoci init --layout "$D/layout" && umoci new --image "$D/layout:1"
umoci unpack --image "$D/layout:1" "$D/bundle" >/dev/null
mkdir -p "$D/bundle/rootfs/bin"; cp /bin/busybox "$D/bundle/rootfs/bin/" 2>/dev/null || cp "$(command -v busybox)" "$D/bundle/rootfs/bin/"
for a in sh ls cat echo; do ln -sf busybox "$D/bundle/rootfs/bin/$a"; done
# nvidia-smi (bound in by the CDI specification) needs the C library.
for f in $(ldd "$(command -v nvidia-smi)" | grep -o '/[^ ]*' | grep -v nvidia); do mkdir -p "$D/bundle/rootfs$(dirname "$f")"; cp -L "$f" "$D/bundle/rootfs$f"; done
umoci repack --image "$D/layout:1" "$D/bundle" && umoci config --image "$D/layout:1" --config.env PATH=/bin:/usr/bin
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/v2/" >/dev/null && break; sleep 0.2; done
skopeo copy --dest-tls-verify=false "oci:$D/layout:1" "docker://127.0.0.1:$PORT/check/gpu:1" >/dev/null
export TANDEM_INSECURE_REGISTRIES=127.0.0.1:$PORT
printf 'health_check_interval = 1\ngpu_health_check = true\n' > "$D/tandem.toml"
"$T" up --agents 1 --port 0 --data "$D" --config "$D/tandem.toml" > "$D/up.out" 2>&1 &
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
echo "== container step with one GPU (CDI specifications in $TANDEM_CDI_SPEC_DIRS)"
out=$("$T" run --gpus=1 --container-remap-root --container-image="127.0.0.1:$PORT#check/gpu:1" sh -c 'echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; ls /dev | grep "^nvidia[0-9]"; nvidia-smi -L' 2>&1) || { echo "$out"; echo "gpu-check: the container step failed" >&2; exit 1; }
echo "$out"
echo "$out" | grep -q '^CUDA_VISIBLE_DEVICES=0$' || { echo "gpu-check: the container does not number its GPU 0" >&2; exit 1; }
[ "$(echo "$out" | grep -c '^nvidia[0-9]')" = 1 ] || { echo "gpu-check: the container does not have exactly its one GPU" >&2; exit 1; }
echo "$out" | grep -q '^GPU 0:' || { echo "gpu-check: nvidia-smi sees no GPU inside" >&2; exit 1; }
echo "== container case: ok"
echo "== GPU health check (NVML, every second)"
sleep 3
state=$("$T" nodes -N -h -o '%T|%E' 2>/dev/null || sinfo -N -h -o '%T|%E')
echo "$state"
grep -h "GPU check" "$D"/node1.log || echo "(no GPU check findings)"
case "$state" in drain*"GPU check"*|down*) echo "gpu-check: the GPU check drained a healthy node: $state" >&2; exit 1;; esac
echo "== GPU health check: ok"
if [ -f /sys/fs/cgroup/cgroup.controllers ] && ! grep -q ':memory:' /proc/self/cgroup; then
  echo "== cgroup v2 limits"
  grep -i "cgroup" "$D"/node1.log || true
  "$T" submit -W -c 2 --mem=96M -o v2.out --wrap 'c=$(sed -n "s/^0:://p" /proc/self/cgroup); echo "cgroup $c"; echo "memory.max $(cat /sys/fs/cgroup${c%/*}/memory.max)"; echo "cpu.max $(cat /sys/fs/cgroup${c%/*}/cpu.max)"' || true
  cat v2.out
  grep -q "^memory.max $((96 * 1024 * 1024))$" v2.out || { echo "gpu-check: the job's cgroup has no memory.max of its --mem" >&2; exit 1; }
  grep -q "^cpu.max 200000 100000$" v2.out || { echo "gpu-check: the job's cgroup has no cpu.max of its 2 CPUs" >&2; exit 1; }
  id=$("$T" submit --parsable --mem=64M -o oom.out --wrap 'python3 -c "b = bytearray(512 * 1024 * 1024); print(len(b))"')
  for _ in $(seq 120); do
    st=$("$T" show job "$id" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
    case "$st" in COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY|NODE_FAIL) break;; esac
    sleep 0.5
  done
  echo "job $id (512 MiB in a 64 MiB job): $st"
  [ "$st" = OUT_OF_MEMORY ] || { echo "gpu-check: a job past its --mem was not ended by the kernel (state $st)" >&2; exit 1; }
  echo "== cgroup v2 limits: ok"
else
  echo "== cgroup v2 limits: not a pure cgroup v2 host (skipped)"
fi
