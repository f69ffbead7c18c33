#!/usr/bin/env bash
# Tandem against a real Slurm, side by side, on this machine, in the same shape.
#
#   bench/vs-slurm.sh [--jobs N] [--slurm-config default|htc|both] [--tandem-only]
#                     [--workloads all|loops] [--latency-jobs M] [--latency-gap S] [--submitters K]
#                     [--tandem-bin PATH] [--keep]
#
# Slurm: Debian's slurm-wlm and munge (installed with apt-get when missing), a private munged,
# slurmctld and 16 slurmd (one per node, `slurmd -N nXX`, each on 127.0.0.1 with its own Port and
# spool directory), 8 CPUs per node; completions are read from jobcomp/filetxt, not by polling
# the controller. Tandem: `tandem up` with 16 agents of 8 CPUs, production defaults (durable
# SQLite commits, Unix-socket peer-credential identity), driven through its `sbatch`/`squeue`
# shims. The same workloads run through both; one table compares them (ratio > 1: Tandem ahead).
# Every daemon this script starts is stopped on exit by its process id; nothing else is touched.
#
# Needs root for the Slurm side (apt-get, daemons as root) and for the CPU accounting cgroups
# (cgroup v1 cpuacct; without them those rows say n/a). `--tandem-only` needs neither.
# `--workloads loops` runs only the two sbatch loops (one loop, then K parallel loops, each timed
# until all N have ended) and skips the latency, array, CPU-per-job and held/squeue parts; the
# table then has only the rows measured. Default `all`: every workload.

set -euo pipefail

JOBS=1000
CONFIGS=both
TANDEM_ONLY=0
WORKLOADS=all
LAT_JOBS=100
LAT_GAP=0.25
SUBMITTERS=4
NODES=16
CPUS=8
KEEP=0
TANDEM_BIN=""
ARGV="$*"

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --jobs) JOBS=$2; shift 2 ;;
        --jobs=*) JOBS=${1#*=}; shift ;;
        --slurm-config) CONFIGS=$2; shift 2 ;;
        --slurm-config=*) CONFIGS=${1#*=}; shift ;;
        --tandem-only) TANDEM_ONLY=1; shift ;;
        --workloads) WORKLOADS=$2; shift 2 ;;
        --workloads=*) WORKLOADS=${1#*=}; shift ;;
        --latency-jobs) LAT_JOBS=$2; shift 2 ;;
        --latency-jobs=*) LAT_JOBS=${1#*=}; shift ;;
        --latency-gap) LAT_GAP=$2; shift 2 ;;
        --latency-gap=*) LAT_GAP=${1#*=}; shift ;;
        --submitters) SUBMITTERS=$2; shift 2 ;;
        --submitters=*) SUBMITTERS=${1#*=}; shift ;;
        --tandem-bin) TANDEM_BIN=$2; shift 2 ;;
        --tandem-bin=*) TANDEM_BIN=${1#*=}; shift ;;
        --keep) KEEP=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "vs-slurm: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done
[[ $JOBS =~ ^[0-9]+$ && $JOBS -ge 4 ]] || { echo "vs-slurm: --jobs must be a number >= 4" >&2; exit 2; }
[[ $LAT_JOBS =~ ^[0-9]+$ && $LAT_JOBS -ge 1 ]] || { echo "vs-slurm: --latency-jobs must be >= 1" >&2; exit 2; }
[[ $SUBMITTERS =~ ^[0-9]+$ && $SUBMITTERS -ge 1 ]] || { echo "vs-slurm: --submitters must be >= 1" >&2; exit 2; }
case "$CONFIGS" in
    default) SLURM_CONFIGS=(default) ;;
    htc) SLURM_CONFIGS=(htc) ;;
    both) SLURM_CONFIGS=(default htc) ;;
    *) echo "vs-slurm: --slurm-config is default, htc or both" >&2; exit 2 ;;
esac
[[ $TANDEM_ONLY == 1 ]] && SLURM_CONFIGS=()
[[ $WORKLOADS == all || $WORKLOADS == loops ]] || { echo "vs-slurm: --workloads is all or loops" >&2; exit 2; }

REPO=$(cd "$(dirname "$0")/.." && pwd)
if [[ -z $TANDEM_BIN ]]; then
    TANDEM_BIN=$REPO/target/release/tandem
    if [[ ! -x $TANDEM_BIN || ! -x $(dirname "$TANDEM_BIN")/tandem-slurm ]]; then
        echo "vs-slurm: building tandem (cargo build --release -p tandem)" >&2
        (cd "$REPO" && cargo build --release -p tandem >&2)
    fi
fi
[[ -x $TANDEM_BIN ]] || { echo "vs-slurm: no tandem binary at $TANDEM_BIN" >&2; exit 2; }
TANDEM_BIN=$(cd "$(dirname "$TANDEM_BIN")" && pwd)/$(basename "$TANDEM_BIN")

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vs-slurm.XXXXXX")
chmod 755 "$WORK"
HZ=$(getconf CLK_TCK)
PIDS=()      # every daemon this script started, in start order
CGROUPS=()   # every cgroup this script made
LOG() { echo "vs-slurm: $*" >&2; }

# ---------------------------------------------------------------------------------------------
# Teardown: only what we started, by pid, newest first.

stop_pids() {
    local p i
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        p=${PIDS[i]}
        kill -TERM "$p" 2>/dev/null || true
    done
    local deadline=$((SECONDS + 15))
    for p in "${PIDS[@]}"; do
        while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    PIDS=()
}

remove_cgroups() {
    local cg
    for cg in "${CGROUPS[@]}"; do
        [[ -d $cg ]] || continue
        # Anything left inside (a straggling job step of ours) goes back to the parent first.
        while read -r p; do echo "$p" > "$(dirname "$cg")/cgroup.procs" 2>/dev/null || true; done < "$cg/cgroup.procs"
        rmdir "$cg" 2>/dev/null || true
    done
    CGROUPS=()
}

cleanup() {
    local rc=$?
    stop_pids
    remove_cgroups
    if [[ $KEEP == 1 || $rc != 0 ]]; then
        LOG "work directory kept: $WORK"
    else
        rm -rf "$WORK"
    fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
# Measurement helpers.

now() { echo "$EPOCHREALTIME"; }
fsub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", a - b }'; }

# utime+stime of processes, in seconds.
cpu_of() {
    local t=0 p s
    for p in "$@"; do
        s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
        s=${s##*) }
        set -- $s
        t=$((t + ${12} + ${13}))
    done
    awk -v t="$t" -v hz="$HZ" 'BEGIN { printf "%.3f", t / hz }'
}

# cpuacct usage of a cgroup in seconds ("" when there is none).
cg_cpu() {
    [[ -n $1 && -r $1/cpuacct.usage ]] || { echo ""; return; }
    awk '{ printf "%.3f", $1 / 1e9 }' "$1/cpuacct.usage"
}

mib() { awk -v k="$(awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status" 2>/dev/null)" 'BEGIN { printf "%.1f", k / 1024 }'; }

make_cgroup() {
    local base=/sys/fs/cgroup/cpuacct cg
    cg=$base/vs-slurm-$$-$1
    if [[ -w $base ]] && mkdir "$cg" 2>/dev/null; then
        CGROUPS+=("$cg")
        echo "$cg"
    else
        echo ""
    fi
}

join_cgroup() { # cgroup pid...
    local cg=$1 p
    shift
    [[ -n $cg ]] || return 0
    for p in "$@"; do echo "$p" > "$cg/cgroup.procs" 2>/dev/null || true; done
}

# Starts a daemon in the background (inside a cgroup when given), logging to a file; sets LASTPID.
start() { # cgroup logfile command...
    local cg=$1 log=$2
    shift 2
    if [[ -n $cg ]]; then
        bash -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' "$cg" "$@" > "$log" 2>&1 &
    else
        "$@" > "$log" 2>&1 &
    fi
    LASTPID=$!
    PIDS+=("$LASTPID")
}

percentile() { # p file-of-numbers
    sort -g "$2" | awk -v p="$1" '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit } i = int(p / 100 * NR + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR; printf "%.1f", v[i] }'
}

free_port_base() { # a base port with base..base+NODES all free
    # Below the kernel's ephemeral range, so that no outgoing connection (other programs on a
    # busy machine open thousands) takes one of them between this check and the daemons' bind;
    # and free of every socket, not only listening ones.
    local b p busy lo
    read -r lo _ < /proc/sys/net/ipv4/ip_local_port_range
    ((lo > 12000)) || lo=61000
    for b in $(shuf -i 10000-$((lo - NODES - 2)) -n 50); do
        busy=0
        for ((p = b; p <= b + NODES; p++)); do
            if ss -Htan "sport = :$p" | grep -q .; then busy=1; break; fi
        done
        [[ $busy == 0 ]] && { echo "$b"; return; }
    done
    echo "vs-slurm: no free port range" >&2
    return 1
}

# ---------------------------------------------------------------------------------------------
# Per-system hooks, set by the setup functions: ended_count (jobs that have ended, cumulatively),
# CTL_PID, NODE_PIDS, CG_CTL, CG_NODES, SUBMIT_ENV (PATH and the variables the CLI needs).

declare -A R   # results: R[system.key]

wait_ended() { # target timeout_s
    local target=$1 limit=$((SECONDS + $2)) n
    while :; do
        n=$(ended_count)
        ((n >= target)) && return 0
        if ((SECONDS > limit)); then
            LOG "timed out waiting: $n of $target jobs ended"
            return 1
        fi
        sleep 0.2
    done
}

submit_loop() { # first step count extra-args...: one client's sequential loop
    local i=$1 step=$2 n=$3
    shift 3
    while ((i < n)); do
        sbatch --parsable -o /dev/null "$@" --wrap true > /dev/null || { LOG "sbatch failed"; return 1; }
        i=$((i + step))
    done
}

parallel_submit() { # count extra-args...
    local n=$1 k pids=() rc=0
    shift
    for ((k = 0; k < SUBMITTERS; k++)); do
        submit_loop "$k" "$SUBMITTERS" "$n" "$@" &
        pids+=($!)
    done
    for k in "${pids[@]}"; do wait "$k" || rc=1; done
    return $rc
}

run_loops() { # system-name: workloads 2 and 3
    local S=$1 N=$JOBS t0 t1 t2 base

    # 2. One client loop of sbatch.
    LOG "$S: $N jobs from one sbatch loop"
    base=$(ended_count)
    t0=$(now)
    submit_loop 0 1 "$N"
    t1=$(now)
    wait_ended $((base + N)) 3600
    t2=$(now)
    R[$S.loop_rate]=$(awk -v n="$N" -v d="$(fsub "$t1" "$t0")" 'BEGIN { printf "%.1f", n / d }')
    R[$S.loop_done]=$(awk -v d="$(fsub "$t2" "$t0")" 'BEGIN { printf "%.2f", d }')

    # 3. K parallel sbatch loops.
    LOG "$S: $N jobs from $SUBMITTERS parallel sbatch loops"
    base=$(ended_count)
    t0=$(now)
    parallel_submit "$N"
    t1=$(now)
    wait_ended $((base + N)) 3600
    t2=$(now)
    R[$S.par_rate]=$(awk -v n="$N" -v d="$(fsub "$t1" "$t0")" 'BEGIN { printf "%.1f", n / d }')
    R[$S.par_done]=$(awk -v d="$(fsub "$t2" "$t0")" 'BEGIN { printf "%.2f", d }')
}

run_workloads() { # system-name
    local S=$1 N=$JOBS t0 t1 t2 base i f v
    local lat=$WORK/$S-latency.txt
    mkdir -p "$WORK/$S-run"
    cd "$WORK/$S-run"
    : > "$lat"

    # With --workloads loops: only the two sbatch loops (2 and 3), no CPU accounting.
    if [[ $WORKLOADS == loops ]]; then
        run_loops "$S"
        R[$S.ended_ok]=$(ended_ok_count)
        cd "$WORK"
        return 0
    fi

    # 1. Submit-to-start latency on an idle cluster: single jobs, one every LAT_GAP seconds
    #    (open loop: a slow scheduler cannot slow the arrivals down, and the cluster stays idle:
    #    never more than a few of these trivial jobs exist at once against 128 CPUs). The client
    #    notes the time just before it runs sbatch; the job writes the time it started.
    LOG "$S: submit-to-start latency, $LAT_JOBS single jobs, one every $LAT_GAP s"
    base=$(ended_count)
    local next
    next=$(now)
    for ((i = 0; i < LAT_JOBS; i++)); do
        f=$WORK/$S-run/lat-$i.out
        local rem
        rem=$(fsub "$next" "$(now)")
        [[ $rem == -* ]] || sleep "$rem"
        next=$(awk -v a="$next" -v g="$LAT_GAP" 'BEGIN { printf "%.6f", a + g }')
        t0=$(now)
        sbatch --parsable -o "$f" --wrap 'date +%s.%N' > /dev/null
        echo "$t0" > "$f.submitted"
    done
    for ((i = 0; i < LAT_JOBS; i++)); do
        f=$WORK/$S-run/lat-$i.out
        local limit=$((SECONDS + 300))
        until [[ -s $f ]] && read -r v < "$f" 2> /dev/null; do
            ((SECONDS < limit)) || { LOG "$S: latency job $i did not start in 300 s"; return 1; }
            sleep 0.01
        done
        read -r t0 < "$f.submitted"
        awk -v a="$v" -v b="$t0" 'BEGIN { printf "%.3f\n", (a - b) * 1000 }' >> "$lat"
    done
    wait_ended $((base + LAT_JOBS)) 300
    R[$S.lat_p50]=$(percentile 50 "$lat")
    R[$S.lat_p99]=$(percentile 99 "$lat")

    # CPU accounting starts here: the three throughput workloads below (3N jobs).
    local c0 n0 g0 h0
    c0=$(cpu_of "$CTL_PID"); n0=$(cpu_of $NODE_PIDS); g0=$(cg_cpu "$CG_CTL"); h0=$(cg_cpu "$CG_NODES")

    # 2. and 3.: the sbatch loops.
    run_loops "$S"

    # 4. One job array of N.
    LOG "$S: a job array of $N"
    base=$(ended_count)
    t0=$(now)
    sbatch --parsable -o /dev/null --array=0-$((N - 1)) --wrap true > /dev/null
    t1=$(now)
    wait_ended $((base + N)) 3600
    t2=$(now)
    R[$S.arr_rate]=$(awk -v n="$N" -v d="$(fsub "$t1" "$t0")" 'BEGIN { printf "%.1f", n / d }')
    R[$S.arr_done]=$(awk -v d="$(fsub "$t2" "$t0")" 'BEGIN { printf "%.2f", d }')
    R[$S.arr_tput]=$(awk -v n="$N" -v d="$(fsub "$t2" "$t0")" 'BEGIN { printf "%.1f", n / d }')

    local c1 n1 g1 h1 jobs=$((3 * N))
    c1=$(cpu_of "$CTL_PID"); n1=$(cpu_of $NODE_PIDS); g1=$(cg_cpu "$CG_CTL"); h1=$(cg_cpu "$CG_NODES")
    R[$S.cpu_ctl]=$(awk -v a="$c0" -v b="$c1" -v n="$jobs" 'BEGIN { printf "%.3f", (b - a) * 1000 / n }')
    R[$S.cpu_nodes]=$(awk -v a="$n0" -v b="$n1" -v n="$jobs" 'BEGIN { printf "%.3f", (b - a) * 1000 / n }')
    if [[ -n $h0 && -n $h1 ]]; then
        R[$S.cpu_nodes_all]=$(awk -v a="$h0" -v b="$h1" -v n="$jobs" 'BEGIN { printf "%.3f", (b - a) * 1000 / n }')
    else
        R[$S.cpu_nodes_all]=n/a
    fi
    R[$S.ended_ok]=$(ended_ok_count)

    # 5. N jobs held (pending), then squeue.
    LOG "$S: $N held jobs, then squeue"
    parallel_submit "$N" --hold
    local pend
    pend=$(squeue -h -t PD | wc -l)
    ((pend >= N)) || { LOG "$S: expected $N pending jobs, squeue shows $pend"; return 1; }
    local sq=$WORK/$S-squeue.txt
    : > "$sq"
    for i in 1 2 3 4 5; do
        t0=$(now)
        squeue > /dev/null
        t1=$(now)
        awk -v d="$(fsub "$t1" "$t0")" 'BEGIN { printf "%.3f\n", d * 1000 }' >> "$sq"
    done
    R[$S.squeue]=$(percentile 50 "$sq")
    R[$S.rss]=$(mib "$CTL_PID" VmRSS)
    R[$S.hwm]=$(mib "$CTL_PID" VmHWM)
    cd "$WORK"
}

# ---------------------------------------------------------------------------------------------
# Slurm.

ensure_slurm() {
    local missing=()
    command -v slurmctld > /dev/null || missing+=(slurmctld)
    command -v slurmd > /dev/null || missing+=(slurmd)
    command -v sbatch > /dev/null || missing+=(slurm-client)
    command -v munged > /dev/null || missing+=(munge)
    ((${#missing[@]} == 0)) && return 0
    [[ $(id -u) == 0 ]] || { echo "vs-slurm: Slurm is missing and installing it needs root" >&2; exit 2; }
    LOG "installing slurm-wlm and munge (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge >&2 \
        || { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge >&2; }
}

write_slurm_conf() { # dir config port
    local d=$1 cfg=$2 port=$3 i host max_array max_jobs
    host=$(hostname -s)
    max_array=$((JOBS + 1 > 1001 ? JOBS + 1 : 1001))
    max_jobs=$((5 * JOBS + LAT_JOBS + 1000 > 10000 ? 5 * JOBS + LAT_JOBS + 1000 : 10000))
    {
        echo "# Local Slurm cluster for bench/vs-slurm.sh ($cfg configuration)."
        echo "ClusterName=vsbench"
        echo "SlurmctldHost=$host(127.0.0.1)"
        echo "SlurmctldPort=$port"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/munge"
        echo "CredType=cred/munge"
        echo "AuthInfo=socket=$d/munge/munge.sock"
        echo "StateSaveLocation=$d/state"
        echo "SlurmdSpoolDir=$d/spool/%n"
        echo "SlurmctldPidFile=$d/run/slurmctld.pid"
        echo "SlurmdPidFile=$d/run/slurmd-%n.pid"
        echo "SlurmctldLogFile=$d/log/slurmctld.log"
        echo "SlurmdLogFile=$d/log/slurmd-%n.log"
        echo "# Shape: 16 nodes of 8 CPUs on this one machine (slurmd -N), CPUs as configured."
        echo "SlurmdParameters=config_overrides"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_Core"
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "MpiDefault=none"
        echo "ReturnToService=2"
        echo "# Completions are read from this file (no polling of the controller)."
        echo "JobCompType=jobcomp/filetxt"
        echo "JobCompLoc=$d/jobcomp.txt"
        echo "# Raised only so that the workload fits (defaults: MaxArraySize=1001, MaxJobCount=10000)."
        echo "MaxArraySize=$max_array"
        echo "MaxJobCount=$max_jobs"
        if [[ $cfg == htc ]]; then
            echo "# SchedMD's high-throughput recommendations (high_throughput.html)."
            echo "SchedulerParameters=batch_sched_delay=20,bf_continue,bf_interval=300,bf_min_age_reserve=10800,bf_resolution=600,bf_yield_interval=1000000,partition_job_depth=500,sched_max_job_start=200,sched_min_interval=2000000"
            echo "MinJobAge=2"
            echo "JobAcctGatherType=jobacct_gather/none"
            echo "PriorityType=priority/basic"
            echo "SlurmctldDebug=error"
            echo "SlurmdDebug=error"
        fi
        for ((i = 1; i <= NODES; i++)); do
            printf 'NodeName=n%02d NodeHostname=%s NodeAddr=127.0.0.1 Port=%d CPUs=%d RealMemory=1000 State=UNKNOWN\n' \
                "$i" "$host" $((port + i)) "$CPUS"
        done
        printf 'PartitionName=batch Nodes=n[01-%02d] Default=YES MaxTime=INFINITE State=UP\n' "$NODES"
    } > "$d/slurm.conf"
}

SLURM_SAVED_PATH=$PATH

setup_slurm() { # config
    local cfg=$1 d=$WORK/slurm-$1 port i
    mkdir -p "$d"/{munge,state,spool,run,log}
    chmod 700 "$d/munge"
    port=$(free_port_base)
    write_slurm_conf "$d" "$cfg" "$port"
    export SLURM_CONF=$d/slurm.conf
    export PATH=$SLURM_SAVED_PATH
    unset TANDEM_SERVER
    dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$d/munge/munge.key"
    start "" "$d/log/munged.out" munged -F -f --socket="$d/munge/munge.sock" --key-file="$d/munge/munge.key" \
        --pid-file="$d/munge/munged.pid" --log-file="$d/munge/munged.log" --seed-file="$d/munge/munged.seed"
    for i in $(seq 100); do [[ -S $d/munge/munge.sock ]] && break; sleep 0.1; done
    [[ -S $d/munge/munge.sock ]] || { LOG "munged did not start"; cat "$d/log/munged.out" >&2; return 1; }
    CG_CTL=$(make_cgroup "slurm-$cfg-ctl")
    CG_NODES=$(make_cgroup "slurm-$cfg-nodes")
    start "$CG_CTL" "$d/log/slurmctld.out" slurmctld -D -i -f "$SLURM_CONF"
    CTL_PID=$LASTPID
    NODE_PIDS=""
    for ((i = 1; i <= NODES; i++)); do
        mkdir -p "$d/spool/$(printf 'n%02d' "$i")"
        start "$CG_NODES" "$d/log/slurmd-$i.out" slurmd -D -N "$(printf 'n%02d' "$i")" -f "$SLURM_CONF"
        NODE_PIDS+=" $LASTPID"
    done
    local idle=0
    for i in $(seq 600); do
        idle=$(sinfo -h -N -o '%N %t' 2> /dev/null | awk '$2 == "idle"' | sort -u | wc -l)
        ((idle >= NODES)) && break
        sleep 0.1
    done
    if ((idle < NODES)); then
        LOG "Slurm ($cfg): only $idle of $NODES nodes idle after 60 s"
        sinfo -N -l >&2 || true
        tail -20 "$d/log/slurmctld.log" >&2 || true
        return 1
    fi
    LOG "Slurm ($cfg): $NODES nodes idle (slurmctld pid $CTL_PID)"
    JOBCOMP=$d/jobcomp.txt
    ended_count() { if [[ -f $JOBCOMP ]]; then wc -l < "$JOBCOMP"; else echo 0; fi; }
    ended_ok_count() { if [[ -f $JOBCOMP ]]; then grep -c 'JobState=COMPLETED' "$JOBCOMP" || true; else echo 0; fi; }
}

teardown() { stop_pids; remove_cgroups; }

# ---------------------------------------------------------------------------------------------
# Tandem.

setup_tandem() {
    local d=$WORK/tandem i
    mkdir -p "$d/bin" "$d/data"
    "$TANDEM_BIN" shims "$d/bin" > /dev/null
    local max_array=$((JOBS + 1 > 1001 ? JOBS + 1 : 1001))
    TANDEM_ARGS=(up --agents "$NODES" --cpus-per-agent "$CPUS" --port 0 --data "$d/data")
    if ((max_array > 1001)); then
        printf 'max_array_size = %d    # raised only so that the workload fits (default 1001, as Slurm)\n' "$max_array" > "$d/tandem.toml"
        TANDEM_ARGS+=(--config "$d/tandem.toml")
    else
        : > "$d/tandem.toml"
    fi
    unset SLURM_CONF
    export PATH=$d/bin:$SLURM_SAVED_PATH
    CG_CTL=$(make_cgroup tandem-ctl)
    CG_NODES=$(make_cgroup tandem-nodes)
    start "" "$d/up.log" "$TANDEM_BIN" "${TANDEM_ARGS[@]}"
    local up=$LASTPID
    for i in $(seq 300); do [[ -s $d/data/env && -s $d/data/controller/addr ]] && break; sleep 0.1; done
    [[ -s $d/data/env ]] || { LOG "tandem up did not start"; cat "$d/up.log" >&2; return 1; }
    # shellcheck disable=SC1091
    source "$d/data/env"
    export TANDEM_SERVER
    TANDEM_ADDR=$(cat "$d/data/controller/addr")
    TANDEM_CA_FILE=$d/data/controller/ca.pem
    # /metrics needs an identity over TCP (SECURITY.md): a token of this user's.
    METRICS_TOKEN=$("$TANDEM_BIN" token --lifespan 86400 | sed 's/^export TANDEM_TOKEN=//')
    # /metrics needs an identity over TCP (SECURITY.md): a token of this user's.
    METRICS_TOKEN=$("$TANDEM_BIN" token --lifespan 86400 | sed 's/^export TANDEM_TOKEN=//')
    CTL_PID="" NODE_PIDS=""
    local p cmd
    for p in $(pgrep -P "$up"); do
        cmd=$(tr '\0' ' ' < "/proc/$p/cmdline")
        case "$cmd" in
            *" server "*) CTL_PID=$p ;;
            *" agent "*) NODE_PIDS+=" $p" ;;
        esac
    done
    [[ -n $CTL_PID ]] || { LOG "no tandem server under tandem up"; return 1; }
    join_cgroup "$CG_CTL" "$CTL_PID"
    join_cgroup "$CG_NODES" $NODE_PIDS
    local up_nodes=0
    for i in $(seq 300); do
        up_nodes=$(sinfo -N 2> /dev/null | grep -c " idle " || true)
        ((up_nodes >= NODES)) && break
        sleep 0.1
    done
    ((up_nodes >= NODES)) || { LOG "only $up_nodes of $NODES Tandem nodes idle"; sinfo -N >&2 || true; return 1; }
    LOG "Tandem: $NODES nodes idle (server pid $CTL_PID)"
    # The controller's Prometheus endpoint, over its TLS port with a token, as a scraper would.
    command -v curl > /dev/null || { LOG "curl is needed to read the controller's /metrics"; return 1; }
    metrics() {
        curl -sf --cacert "$TANDEM_CA_FILE" -H "Authorization: Bearer $METRICS_TOKEN" "https://$TANDEM_ADDR/metrics"
    }
    ended_count() {
        metrics | awk '/^tandem_jobs\{/ && !/"PENDING"|"RUNNING"/ { n += $2 } END { print n + 0 }'
    }
    ended_ok_count() {
        metrics | awk '/^tandem_jobs\{state="COMPLETED"\}/ { n += $2 } END { print n + 0 }'
    }
}

# ---------------------------------------------------------------------------------------------
# The runs.

SYSTEMS=()
for cfg in "${SLURM_CONFIGS[@]}"; do
    ensure_slurm
    setup_slurm "$cfg"
    run_workloads "slurm_$cfg"
    teardown
    SYSTEMS+=("slurm_$cfg")
done
setup_tandem
run_workloads tandem
teardown
SYSTEMS+=(tandem)

# ---------------------------------------------------------------------------------------------
# The report.

N=$JOBS
ROWS=(
    "loop_rate|submissions/s, one sbatch loop|hi"
    "par_rate|submissions/s, $SUBMITTERS parallel sbatch loops|hi"
    "arr_rate|submissions/s, one job array of $N (--array)|hi"
    "loop_done|s, first submission to all $N completed (one loop)|lo"
    "par_done|s, first submission to all $N completed ($SUBMITTERS loops)|lo"
    "arr_done|s, first submission to all $N completed (array)|lo"
    "arr_tput|completed jobs/s (array)|hi"
    "lat_p50|ms, submit-to-start latency p50 ($LAT_JOBS single jobs, one per $LAT_GAP s)|lo"
    "lat_p99|ms, submit-to-start latency p99 ($LAT_JOBS single jobs, one per $LAT_GAP s)|lo"
    "squeue|ms, squeue with $N jobs pending (median of 5)|lo"
    "rss|MiB, controller RSS with $N jobs pending (VmRSS)|lo"
    "hwm|MiB, controller peak RSS (VmHWM)|lo"
    "cpu_ctl|CPU ms per job, controller|lo"
    "cpu_nodes|CPU ms per job, node daemons (slurmd / agents)|lo"
    "cpu_nodes_all|CPU ms per job, node side incl. step processes and job|lo"
)

ratio() { # tandem slurm hi|lo
    awk -v t="$1" -v s="$2" -v d="$3" 'BEGIN {
        if (t == "n/a" || s == "n/a" || t == "" || s == "") { print "n/a"; exit }
        if (d == "hi") r = (s > 0) ? t / s : 0; else r = (t > 0) ? s / t : 0
        if (r == 0) print "n/a"; else printf "%.2fx", r }'
}

label() { case "$1" in slurm_default) echo "Slurm default" ;; slurm_htc) echo "Slurm HTC" ;; tandem) echo "Tandem" ;; esac; }

echo
echo "# Tandem vs Slurm: $N jobs, $NODES nodes x $CPUS CPUs, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# command: bench/vs-slurm.sh $ARGV"
echo "# machine: $(nproc) CPUs ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)), $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(uname -sr)"
echo "# tandem: $("$TANDEM_BIN" --version) (git $(git -C "$(dirname "$TANDEM_BIN")" rev-parse --short HEAD 2>/dev/null || echo unknown)), $TANDEM_BIN; sbatch -> $(readlink "$WORK/tandem/bin/sbatch" || echo "?")"
echo "# workloads: $WORKLOADS"
[[ ${#SLURM_CONFIGS[@]} -gt 0 ]] && echo "# slurm: $(slurmctld -V)"
echo
header="| row"
sep="|---"
for s in "${SYSTEMS[@]}"; do header+=" | $(label "$s")"; sep+="|---"; done
for s in "${SYSTEMS[@]}"; do
    [[ $s == tandem ]] && continue
    header+=" | Tandem ÷ $(label "$s")"
    sep+="|---"
done
echo "$header |"
echo "$sep|"
for row in "${ROWS[@]}"; do
    IFS='|' read -r key name dir <<< "$row"
    # Only the rows measured (--workloads loops measures four).
    measured=0
    for s in "${SYSTEMS[@]}"; do [[ -n ${R[$s.$key]:-} ]] && measured=1; done
    [[ $measured == 1 ]] || continue
    line="| $name"
    for s in "${SYSTEMS[@]}"; do line+=" | ${R[$s.$key]:-n/a}"; done
    for s in "${SYSTEMS[@]}"; do
        [[ $s == tandem ]] && continue
        line+=" | $(ratio "${R[tandem.$key]:-n/a}" "${R[$s.$key]:-n/a}" "$dir")"
    done
    echo "$line |"
done
echo
echo "Ratios: > 1 means Tandem ahead (rates: Tandem/Slurm; times, memory, CPU: Slurm/Tandem)."
for s in "${SYSTEMS[@]}"; do
    echo "$(label "$s"): jobs that ended COMPLETED in the throughput workloads (cumulative): ${R[$s.ended_ok]:-n/a}"
done
if [[ $WORKLOADS == all ]]; then
    echo "CPU per job: utime+stime deltas over the three throughput workloads ($((3 * N)) jobs) from /proc/PID/stat;"
    echo "the last CPU row is the cpuacct cgroup of the node daemons and everything they start"
    echo "(slurmstepd and the job / tandem's task launcher and the job)."
fi
echo
for cfg in "${SLURM_CONFIGS[@]}"; do
    echo "## slurm.conf ($cfg)"
    echo '```'
    sed "s|$WORK|\$WORK|g" "$WORK/slurm-$cfg/slurm.conf"
    echo '```'
done
echo "## Tandem"
echo '```'
echo "tandem ${TANDEM_ARGS[*]}" | sed "s|$WORK|\$WORK|g"
if [[ -s $WORK/tandem/tandem.toml ]]; then
    echo "# tandem.toml:"
    cat "$WORK/tandem/tandem.toml"
else
    echo "# no tandem.toml: built-in defaults"
fi
echo "# production defaults: SQLite WAL with synchronous=FULL (every acknowledged submission is on disk),"
echo "# Unix-socket peer-credential identity for the CLI, agents authenticated with the cluster secret,"
echo "# real process launches through the task launcher (own process group, cgroup where possible)."
echo '```'
