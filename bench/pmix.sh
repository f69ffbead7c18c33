#!/usr/bin/env bash
# MPI ranks started directly by srun, side by side on a real Slurm and on `tandem up`: the
# wall time of a whole `srun` (its allocation, the step, MPI_Init's wire-up, an allreduce, the
# end), Open MPI over PMIx and MPICH over PMI-2.
#
#   bench/pmix.sh [--tandem-bin PATH] [--rounds N] [--keep]
#
# Slurm: Debian's slurm-wlm 22.05 and munge (installed with apt-get when missing), a private
# munged, slurmctld and 2 slurmd (`slurmd -N node1`, `-N node2`, on 127.0.0.1 with their own
# ports, as bench/golden-vs-slurm.sh, each with a /tmp of its own), 4 CPUs each; its mpi/pmix plugin (Debian's
# `mpi_pmix_v4`, over the same OpenPMIx 4.2 as Tandem's) and mpi/pmi2. Tandem: `tandem up
# --agents 2 --cpus-per-agent 4` with its shims. The programs: tests/clients/hello_local.c built
# with mpicc.openmpi (Open MPI 4.1) and tests/clients/hello_allreduce.c with mpicc.mpich (MPICH
# 4.0). Both systems' two nodes are this one host, so Open MPI is told OMPI_MCA_btl=tcp,self on
# both (its shared-memory segments of the two nodes' first ranks would collide).
#
# Each round runs, on Slurm then on Tandem (the same command lines, each system's own srun):
#   bare   srun -N2 --ntasks-per-node=2 true
#   pmix   srun --mpi=pmix -N2 --ntasks-per-node=2 ./hello_local
#   pmix1  srun --mpi=pmix -N1 -n4 ./hello_local
#   pmi2   srun --mpi=pmi2 -N2 --ntasks-per-node=2 ./hello_allreduce
# and checks each MPI run printed its 4 ranks of one world. Prints the median (min, max) of N
# rounds (default 9) per case and system and Tandem's median over Slurm's. Needs root.

set -euo pipefail

if [[ -z ${PMIX_BENCH_NS:-} && $(id -u) == 0 ]]; then
    exec env PMIX_BENCH_NS=1 unshare --mount --propagation private "$0" "$@"
fi
if [[ -n ${PMIX_BENCH_NS:-} ]]; then
    mount -t tmpfs tmpfs /run
    mkdir -p /run/munge
fi

REPO=$(cd "$(dirname "$0")/.." && pwd)
TANDEM_BIN=""
ROUNDS=9
KEEP=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --tandem-bin) TANDEM_BIN=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "pmix: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "pmix: --rounds takes a positive number" >&2; exit 2; }
if [[ -z $TANDEM_BIN ]]; then
    TANDEM_BIN=$REPO/target/debug/tandem
    [[ -x $TANDEM_BIN ]] || (cd "$REPO" && cargo build -p tandem >&2)
fi
# Not under /tmp: each slurmd gets a /tmp of its own (below).
WORK=$(mktemp -d /var/tmp/pmix-bench.XXXXXX)
chmod 755 "$WORK"
PIDS=()
LOG() { echo "pmix: $*" >&2; }

cleanup() {
    local rc=$? p i
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill -TERM "${PIDS[i]}" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do
        for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    [[ -n ${TANDEM_DATA:-} ]] && "$TANDEM_BIN" down --data "$TANDEM_DATA" > /dev/null 2>&1 || true
    [[ $KEEP == 1 || $rc != 0 ]] && LOG "work directory kept: $WORK" || rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start() { # logfile command...
    local log=$1
    shift
    "$@" > "$log" 2>&1 &
    PIDS+=("$!")
}

wait_for() { # seconds description command...
    local n=$1 what=$2 i
    shift 2
    for ((i = 0; i < n * 10; i++)); do "$@" > /dev/null 2>&1 && return 0; sleep 0.1; done
    LOG "timed out: $what"
    return 1
}

for t in mpicc.openmpi mpicc.mpich; do command -v $t > /dev/null || { LOG "$t is missing (apt-get install libopenmpi-dev libmpich-dev)"; exit 2; }; done
if ! command -v slurmctld > /dev/null || ! command -v slurmd > /dev/null || ! command -v munged > /dev/null; then
    [[ $(id -u) == 0 ]] || { LOG "Slurm is missing and installing it needs root"; exit 2; }
    LOG "installing slurm-wlm and munge (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge >&2 \
        || { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge >&2; }
fi
mkdir -p "$WORK/prog"
chmod 755 "$WORK/prog"
mpicc.openmpi -o "$WORK/prog/hello_local" "$REPO/tests/clients/hello_local.c"
mpicc.mpich -o "$WORK/prog/hello_allreduce" "$REPO/tests/clients/hello_allreduce.c"
export OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=lo

CASES=(bare pmix pmix1 pmi2)
declare -A CMD=(
    [bare]="srun -N2 --ntasks-per-node=2 true"
    [pmix]="srun --mpi=pmix -N2 --ntasks-per-node=2 ./hello_local"
    [pmix1]="srun --mpi=pmix -N1 -n4 ./hello_local"
    [pmi2]="srun --mpi=pmi2 -N2 --ntasks-per-node=2 ./hello_allreduce"
)

# One timed run: appends milliseconds to $WORK/times.SYSTEM.CASE; fails unless an MPI case
# printed 4 ranks of one world.
timed() { # system case
    local sys=$1 c=$2 t0 t1 out
    t0=$(date +%s%N)
    out=$(cd "$WORK/prog" && ${CMD[$c]} 2>"$WORK/err.$sys.$c") || { LOG "$sys $c failed: $(tail -5 "$WORK/err.$sys.$c")"; return 1; }
    t1=$(date +%s%N)
    if [[ $c != bare && $(grep -c "^rank .* of 4 sum 6" <<< "$out") != 4 ]]; then
        LOG "$sys $c: not one world of 4: $out"
        return 1
    fi
    echo $(((t1 - t0) / 1000000)) >> "$WORK/times.$sys.$c"
}

start_slurm() {
    local d=$WORK/slurm port i host
    mkdir -p "$d"/{munge,state,spool/node1,spool/node2,run,log}
    chmod 700 "$d/munge"
    host=$(hostname -s)
    port=$((20000 + RANDOM % 20000))
    {
        echo "ClusterName=pmixbench"
        echo "SlurmctldHost=$host(127.0.0.1)"
        echo "SlurmctldPort=$port"
        echo "SlurmdPort=$((port + 1))"
        echo "SlurmUser=root"
        echo "AuthType=auth/munge"
        echo "AuthInfo=socket=/run/munge/munge.socket.2"
        echo "StateSaveLocation=$d/state"
        echo "SlurmdSpoolDir=$d/spool/%n"
        echo "SlurmctldPidFile=$d/run/slurmctld.pid"
        echo "SlurmdPidFile=$d/run/slurmd-%n.pid"
        echo "SlurmctldLogFile=$d/log/slurmctld.log"
        echo "SlurmdLogFile=$d/log/slurmd-%n.log"
        echo "SlurmdParameters=config_overrides"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_Core"
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "MpiDefault=none"
        echo "ReturnToService=2"
        for i in 1 2; do
            echo "NodeName=node$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 1 + i)) CPUs=4 State=UNKNOWN"
        done
        echo "PartitionName=batch Nodes=node[1-2] Default=YES MaxTime=INFINITE State=UP"
    } > "$d/slurm.conf"
    export SLURM_CONF=$d/slurm.conf
    dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$d/munge/munge.key"
    start "$d/log/munged.out" munged -F -f --socket=/run/munge/munge.socket.2 --key-file="$d/munge/munge.key" \
        --pid-file="$d/munge/munged.pid" --log-file="$d/munge/munged.log" --seed-file="$d/munge/munged.seed"
    wait_for 10 munged test -S /run/munge/munge.socket.2
    start "$d/log/slurmctld.out" slurmctld -D -i -f "$SLURM_CONF"
    # Each slurmd with a /tmp of its own: Slurm's mpi/pmix names its directories there by job,
    # step and user only, so two nodes on one host would collide (Tandem's name the node).
    for i in 1 2; do
        mkdir -p "$d/tmp-node$i"
        chmod 1777 "$d/tmp-node$i"
        start "$d/log/slurmd-$i.out" unshare --mount --propagation private \
            sh -c 'mount --bind "$1" /tmp && shift && exec "$@"' sh "$d/tmp-node$i" slurmd -D -N "node$i" -f "$SLURM_CONF"
    done
    idle2() { [[ $(sinfo -h -N -o '%N %t' | awk '$2 == "idle"' | sort -u | wc -l) -ge 2 ]]; }
    wait_for 60 "Slurm's nodes idle" idle2 || { tail -20 "$d/log/slurmctld.log" >&2; return 1; }
    LOG "$(sinfo -V): 2 nodes idle; MPI types: $(srun --mpi=list 2>&1 | tr -s '\n\t ' ' ')"
}

start_tandem() {
    local d=$WORK/tandem
    mkdir -p "$d/bin"
    "$TANDEM_BIN" shims "$d/bin" > /dev/null
    TANDEM_DATA=$d/cluster
    start "$d/up.log" "$TANDEM_BIN" up --agents 2 --cpus-per-agent 4 --data "$TANDEM_DATA" --port 0 --no-proxy --no-hosts
    wait_for 60 "tandem up" test -S "$TANDEM_DATA/controller/tandem.sock"
    TANDEM_PATH=$d/bin:$PATH
    TANDEM_SERVER=unix://$TANDEM_DATA/controller/tandem.sock
    idle2() { [[ $(PATH=$TANDEM_PATH TANDEM_SERVER=$TANDEM_SERVER sinfo -h -N -o '%N %t' | grep -c idle) -ge 2 ]]; }
    wait_for 60 "Tandem's nodes idle" idle2
    LOG "Tandem $("$TANDEM_BIN" --version 2>/dev/null | head -1): 2 nodes idle"
}

start_slurm
start_tandem
SLURM_PATH=$PATH
LOG "$ROUNDS rounds of ${CASES[*]}"
for ((r = 1; r <= ROUNDS; r++)); do
    for c in "${CASES[@]}"; do
        PATH=$SLURM_PATH timed slurm "$c"
        (export PATH=$TANDEM_PATH TANDEM_SERVER; unset SLURM_CONF; timed tandem "$c")
    done
done

stats() { # file: "median (min, max)"
    sort -n "$1" | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%d ms (%d, %d)", m, v[1], v[NR] }'
}
median() { sort -n "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "| case | command | Slurm 22.05: median (min, max) | Tandem: median (min, max) | Tandem ÷ Slurm |"
echo "|---|---|---|---|---|"
for c in "${CASES[@]}"; do
    s=$(median "$WORK/times.slurm.$c")
    t=$(median "$WORK/times.tandem.$c")
    printf '| %s | `%s` | %s | %s | %.2fx |\n' "$c" "${CMD[$c]}" "$(stats "$WORK/times.slurm.$c")" "$(stats "$WORK/times.tandem.$c")" "$(echo "$t / $s" | bc -l)"
done
