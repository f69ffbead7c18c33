#!/usr/bin/env bash
# Golden outputs: the same small workload on a real Slurm and on `tandem up`, the query commands'
# outputs captured from both, normalized and diffed.
#
#   bench/golden-vs-slurm.sh [--tandem-bin PATH] [--out DIR] [--update] [--keep]
#
# Slurm: Debian's slurm-wlm and munge (installed with apt-get when missing, as bench/vs-slurm.sh
# does), a private munged, slurmctld and 2 slurmd (`slurmd -N node1`, `-N node2`, on 127.0.0.1
# with their own ports), 4 CPUs and 4096 MB each, one partition `batch` (DefaultTime 1 hour, as
# Tandem's), and for sacct a slurmdbd over a private MariaDB server (Debian's slurmdbd and
# mariadb-server, installed when missing; the database in the work directory, on loopback).
# Tandem: `tandem up --agents 2 --cpus-per-agent 4 --mem-per-agent 4G` with its shims.
#
# The workload, in this order on both (so that job ids agree): a job that completes, one that
# fails (exit 3), one cancelled while running, one held (pending), an array of 3 tasks, one
# left running, a held array of 4. Then `squeue` (default, -l, -o, -O, -r, --start), `sinfo`
# (default, -N, -l, -N -l, -s, -o, -O), `scontrol show job` (the running job, the held job),
# `sacct` (default, -X -o with widths, -P, -b) and five commands with bad values (unknown users
# for squeue, sacct, scancel; sbatch -t soon; sinfo -O Bogus). Then accounting, as root: an
# account, a user in it, a QOS and a limit added with `sacctmgr -i`, `sacctmgr -P` listings,
# `scontrol show assoc_mgr`, and refusals (an unknown account, an unknown entity, `sacctmgr
# add` by tandem-alice, who is no administrator; the script creates the users tandem-alice and
# tandem-mallory when missing). Outputs are written raw and normalized (times, dates, paths, host names, the cluster's name in the accounting outputs, the
# date line of -l; widths kept) under DIR (default: a temporary directory), with a diff per
# command. `--update` copies Slurm's normalized outputs to tests/clients/slurm-22.05-*.txt,
# the fixtures of crates/tandem/tests/golden.rs (slurm_22_05s_layouts_match_where_versions_agree).
# Every daemon this script starts is stopped on exit by its process id. Needs root for Slurm.

set -euo pipefail

# Slurm's clients reach slurmdbd through munge's default socket whatever AuthInfo says (22.05):
# the whole run is in a private mount namespace with a tmpfs on /run, so that our munged's
# socket is /run/munge/munge.socket.2 there and nothing of the machine's is touched.
if [[ -z ${GOLDEN_NS:-} && $(id -u) == 0 ]]; then
    exec env GOLDEN_NS=1 unshare --mount --propagation private "$0" "$@"
fi
if [[ -n ${GOLDEN_NS:-} ]]; then
    mount -t tmpfs tmpfs /run
    mkdir -p /run/munge
fi

REPO=$(cd "$(dirname "$0")/.." && pwd)
TANDEM_BIN=""
OUT=""
UPDATE=0
KEEP=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --tandem-bin) TANDEM_BIN=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --update) UPDATE=1; shift ;;
        --keep) KEEP=1; shift ;;
        -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "golden-vs-slurm: unknown option $1" >&2; exit 2 ;;
    esac
done
if [[ -z $TANDEM_BIN ]]; then
    TANDEM_BIN=$REPO/target/debug/tandem
    [[ -x $TANDEM_BIN ]] || (cd "$REPO" && cargo build -p tandem >&2)
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/golden-vs-slurm.XXXXXX")
chmod 755 "$WORK"
OUT=${OUT:-$WORK/out}
mkdir -p "$OUT"
PIDS=()
LOG() { echo "golden-vs-slurm: $*" >&2; }

cleanup() {
    local rc=$? p i
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill -TERM "${PIDS[i]}" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do
        for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
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

state_is() { scontrol show job "$1" 2>/dev/null | grep -q "JobState=$2 "; }
queue_empty_but() { # the running and held jobs stay
    [[ $(squeue -h -o %i | wc -l) -le 2 ]]
}

# ---------------------------------------------------------------------------------------------
# The workload and the captures, the same for both systems.

workload() { # dir
    local d=$1
    cd "$d"
    OK=$(sbatch --parsable -J ok -o /dev/null --wrap 'sleep 1')
    BAD=$(sbatch --parsable -J bad -o /dev/null --wrap 'exit 3')
    CANCEL=$(sbatch --parsable -J cancelme -o /dev/null --wrap 'sleep 300')
    HELD=$(sbatch --parsable -J held -H -o /dev/null --wrap true)
    ARR=$(sbatch --parsable -J arr --array=1-3 -o /dev/null --wrap 'sleep 1')
    wait_for 60 "job $CANCEL running" state_is "$CANCEL" RUNNING
    scancel "$CANCEL"
    wait_for 60 "job $CANCEL cancelled" state_is "$CANCEL" CANCELLED
    wait_for 60 "the short jobs ending" queue_empty_but
    RUN=$(sbatch --parsable -J running -t 30 -o /dev/null --wrap 'sleep 300')
    wait_for 60 "job $RUN running" state_is "$RUN" RUNNING
    # A second array, held, so that squeue shows pending tasks collapsed.
    PARR=$(sbatch --parsable -J parr -H --array=1-4 -o /dev/null --wrap true)
    LOG "jobs: ok=$OK bad=$BAD cancel=$CANCEL held=$HELD arr=$ARR run=$RUN parr=$PARR"
}

capture() { # system sacct-extra-args...
    local s=$1
    shift
    local sa=("$@")
    c() { local name=$1; shift; "$@" > "$OUT/$s-$name.raw" 2>&1 || echo "exit $?" >> "$OUT/$s-$name.raw"; }
    c squeue squeue
    c squeue-l squeue -l
    c squeue-o squeue -o '%.18i %.9P %.8j %.8u %.2t %.10M %.10l %.6D %.5C %R'
    c squeue-O squeue -O JobID,Name,State,NumCPUs,TimeLimit,ReasonList
    c squeue-r squeue -r
    c squeue-start squeue --start
    c sinfo sinfo
    c sinfo-N sinfo -N
    c sinfo-l sinfo -l
    c sinfo-Nl sinfo -N -l
    c sinfo-s sinfo -s
    c sinfo-o sinfo -o '%P %.5a %.10l %.6D %.6t %N %c %m'
    c sinfo-O sinfo -O PartitionName,Nodes,StateLong,NodeList
    c scontrol-run scontrol show job "$RUN"
    c scontrol-held scontrol show job "$HELD"
    c sacct sacct "${sa[@]}" -j "$OK,$BAD,$CANCEL,$ARR"
    c sacct-X sacct "${sa[@]}" -X -j "$OK,$BAD,$CANCEL,$ARR" -o 'JobID,JobName%12,Partition,State,ExitCode,NNodes,NCPUS,Elapsed,Timelimit'
    c sacct-P sacct "${sa[@]}" -X -P -j "$OK,$BAD,$CANCEL,$ARR" -o 'JobID,JobIDRaw,JobName,State,ExitCode,NodeList'
    c sacct-b sacct "${sa[@]}" -X -b -j "$OK,$BAD,$CANCEL,$ARR"
    # Bad values: the messages and exit codes.
    c err-squeue-u squeue -h -u nosuchuser
    c err-sacct-u sacct -n -u nosuchuser
    c err-scancel-u scancel -u nosuchuser
    c err-sbatch-t sbatch -t soon --wrap true
    c err-sinfo-O sinfo -O Bogus
}

# Accounting, the same on both, as root, after the captures above: an account, a user in it, a
# QOS, a limit; then `sacctmgr -P` listings, `scontrol show assoc_mgr`, and refusals (an
# unknown account, an unknown entity, a user who is not an administrator).
accounting() { # system
    local s=$1
    c() { local name=$1; shift; "$@" > "$OUT/$s-$name.raw" 2>&1 || echo "exit $?" >> "$OUT/$s-$name.raw"; }
    c acct-add-account sacctmgr -i add account lab Description=ml-lab Organization=research
    c acct-add-user sacctmgr -i add user tandem-alice Account=lab
    c acct-add-qos sacctmgr -i add qos gold Priority=10
    c acct-modify-user sacctmgr -i modify user tandem-alice set MaxJobs=4 MaxSubmitJobs=8
    c acct-show-account sacctmgr -P show account lab format=Account,Descr,Org
    c acct-show-user sacctmgr -nP show user tandem-alice format=User,DefaultAccount,Admin
    c acct-show-assoc sacctmgr -P show assoc where users=tandem-alice format=Account,User,Partition,MaxJobs,MaxSubmit
    c acct-show-qos sacctmgr -P show qos gold format=Name,Priority
    c acct-assoc-mgr scontrol show assoc_mgr users=tandem-alice flags=assoc
    c acct-err-account sacctmgr -i add user tandem-mallory Account=nosuch
    c acct-err-entity sacctmgr show bogus
    c acct-err-nonadmin setpriv --reuid tandem-alice --regid tandem-alice --clear-groups \
        env PATH="$PATH" ${TANDEM_SERVER:+TANDEM_SERVER=$TANDEM_SERVER} ${SLURM_CONF:+SLURM_CONF=$SLURM_CONF} \
        sacctmgr -i add account intruders
    c acct-delete-user sacctmgr -i delete user tandem-alice
}

# Width-preserving normalization: dates, durations (digits to 0), paths, this machine's name,
# the date line of `-l`. Durations: `[D-]HH:MM:SS` anywhere; `M:SS` too in squeue's outputs
# (elsewhere `0:15` is an exit code).
normalize() { # system
    local s=$1 f short
    for f in "$OUT/$s"-*.raw; do
        short=0
        [[ $f == */$s-squeue* ]] && short=1
        acct=0
        [[ $f == */$s-acct-* ]] && acct=1
        W=$WORK H=$(hostname -s) SHORT=$short ACCT=$acct perl -pe '
            s{\Q$ENV{W}\E/[a-z]+}{WORK}g;
            s{\b\Q$ENV{H}\E\b}{HOST}g;
            s{\b(golden|tandem)\b(?!-)}{CLUSTER}g if $ENV{ACCT};
            s{^(Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-9]\d \d\d:\d\d:\d\d \d{4}$}{DATE};
            s{\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d}{2000-01-01T00:00:00}g;
            s{(?<![\w.])(\d+-)?\d{1,2}:\d\d:\d\d(?![\w.])}{(my $x = $&) =~ tr/0-9/0/; $x}ge;
            s{(?<![\w.:])\d{1,2}:\d\d(?![\w.:])}{(my $x = $&) =~ tr/0-9/0/; $x}ge if $ENV{SHORT};
        ' "$f" > "${f%.raw}.txt"
    done
}

# ---------------------------------------------------------------------------------------------
# Slurm.

ensure_slurm() {
    command -v slurmctld > /dev/null && command -v slurmd > /dev/null && command -v sbatch > /dev/null \
        && command -v munged > /dev/null && command -v slurmdbd > /dev/null && command -v mariadbd > /dev/null && return 0
    [[ $(id -u) == 0 ]] || { LOG "Slurm is missing and installing it needs root"; exit 2; }
    LOG "installing slurm-wlm and munge (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge slurmdbd mariadb-server >&2 \
        || { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge slurmdbd mariadb-server >&2; }
}

run_slurm() {
    local d=$WORK/slurm port i host
    mkdir -p "$d"/{munge,state,spool/node1,spool/node2,run,log,work,db}
    chmod 700 "$d/munge"
    chmod 777 "$d/work"
    host=$(hostname -s)
    port=$((20000 + RANDOM % 20000))
    {
        echo "ClusterName=golden"
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
        echo "SelectTypeParameters=CR_Core_Memory"
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "MpiDefault=none"
        echo "ReturnToService=2"
        echo "AccountingStorageType=accounting_storage/slurmdbd"
        echo "AccountingStorageHost=127.0.0.1"
        echo "AccountingStoragePort=$((port + 10))"
        echo "JobAcctGatherType=jobacct_gather/linux"
        echo "MinJobAge=300"
        for i in 1 2; do
            echo "NodeName=node$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 1 + i)) CPUs=4 RealMemory=4096 State=UNKNOWN"
        done
        echo "PartitionName=batch Nodes=node[1-2] Default=YES DefaultTime=60 MaxTime=INFINITE State=UP"
    } > "$d/slurm.conf"
    export SLURM_CONF=$d/slurm.conf
    dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$d/munge/munge.key"
    start "$d/log/munged.out" munged -F -f --socket=/run/munge/munge.socket.2 --key-file="$d/munge/munge.key" \
        --pid-file="$d/munge/munged.pid" --log-file="$d/munge/munged.log" --seed-file="$d/munge/munged.seed"
    wait_for 10 munged test -S /run/munge/munge.socket.2
    # MariaDB for slurmdbd: private data directory, loopback only.
    mariadb-install-db --datadir="$d/db" --user=root --auth-root-authentication-method=socket > "$d/log/db-install.out" 2>&1
    start "$d/log/mariadbd.out" mariadbd --datadir="$d/db" --user=root --socket="$d/db.sock" --port=$((port + 11)) \
        --bind-address=127.0.0.1 --pid-file="$d/run/mariadbd.pid" --skip-log-error
    wait_for 60 mariadbd mariadb --socket="$d/db.sock" -e "select 1"
    mariadb --socket="$d/db.sock" -e "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'golden'; GRANT ALL ON *.* TO 'slurm'@'127.0.0.1';"
    {
        echo "AuthType=auth/munge"
        echo "AuthInfo=socket=/run/munge/munge.socket.2"
        echo "DbdHost=$host"
        echo "DbdAddr=127.0.0.1"
        echo "DbdPort=$((port + 10))"
        echo "SlurmUser=root"
        echo "PidFile=$d/run/slurmdbd.pid"
        echo "LogFile=$d/log/slurmdbd.log"
        echo "StorageType=accounting_storage/mysql"
        echo "StorageHost=127.0.0.1"
        echo "StoragePort=$((port + 11))"
        echo "StorageUser=slurm"
        echo "StoragePass=golden"
        echo "StorageLoc=slurm_acct_db"
    } > "$d/slurmdbd.conf"
    chmod 600 "$d/slurmdbd.conf"
    SLURM_CONF=$d/slurm.conf start "$d/log/slurmdbd.out" env SLURMDBD_CONF="$d/slurmdbd.conf" slurmdbd -D
    wait_for 60 slurmdbd timeout 10 sacctmgr -n list cluster
    sacctmgr -i add cluster golden > /dev/null
    start "$d/log/slurmctld.out" slurmctld -D -i -f "$SLURM_CONF"
    for i in 1 2; do start "$d/log/slurmd-$i.out" slurmd -D -N "node$i" -f "$SLURM_CONF"; done
    idle2() { [[ $(sinfo -h -N -o '%N %t' | awk '$2 == "idle"' | sort -u | wc -l) -ge 2 ]]; }
    wait_for 60 "Slurm's nodes idle" idle2 || { tail -20 "$d/log/slurmctld.log" >&2; return 1; }
    LOG "Slurm $(sinfo -V): 2 nodes idle"
    workload "$d/work"
    recorded() { [[ $(sacct -n -X -j "$OK,$BAD,$CANCEL,$ARR" -o State | grep -c -e COMPLETED -e FAILED -e CANCELLED) -ge 6 ]]; }
    wait_for 60 "the ended jobs in slurmdbd" recorded || true
    capture slurm
    id tandem-alice > /dev/null 2>&1 || useradd --no-create-home --shell /usr/sbin/nologin tandem-alice
    id tandem-mallory > /dev/null 2>&1 || useradd --no-create-home --shell /usr/sbin/nologin tandem-mallory
    accounting slurm
    normalize slurm
    scancel "$RUN" "$HELD" "$PARR" || true
    wait_for 30 "Slurm's jobs ending" bash -c '[[ -z $(squeue -h) ]]' || true
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill -TERM "${PIDS[i]}" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
    unset SLURM_CONF
}

# ---------------------------------------------------------------------------------------------
# Tandem.

run_tandem() {
    local d=$WORK/tandem
    mkdir -p "$d/bin" "$d/work"
    "$TANDEM_BIN" shims "$d/bin" > /dev/null
    start "$d/up.log" "$TANDEM_BIN" up --agents 2 --cpus-per-agent 4 --mem-per-agent 4G --no-hosts --no-proxy \
        --port 0 --data "$d/data"
    wait_for 60 "tandem up" test -s "$d/data/env"
    # shellcheck disable=SC1091
    source "$d/data/env"
    export TANDEM_SERVER
    local saved=$PATH
    export PATH=$d/bin:$PATH
    idle2() { [[ $(sinfo -h -N -o '%N %t' | awk '$2 == "idle"' | sort -u | wc -l) -ge 2 ]]; }
    wait_for 60 "Tandem's nodes idle" idle2
    LOG "Tandem $("$TANDEM_BIN" --version): 2 nodes idle"
    workload "$d/work"
    capture tandem
    accounting tandem
    normalize tandem
    scancel "$RUN" "$HELD" "$PARR" || true
    export PATH=$saved
}

ensure_slurm
run_slurm
run_tandem

differ=0
for f in "$OUT"/slurm-*.txt; do
    name=$(basename "$f" .txt)
    name=${name#slurm-}
    if diff -u --label "slurm-22.05 $name" --label "tandem $name" "$f" "$OUT/tandem-$name.txt" > "$OUT/$name.diff"; then
        echo "same:    $name"
    else
        echo "differs: $name ($(grep -c '^[-+][^-+]' "$OUT/$name.diff") lines; $OUT/$name.diff)"
        differ=$((differ + 1))
    fi
done
echo "$differ outputs differ; raw and normalized outputs, diffs: $OUT"
if [[ $UPDATE == 1 ]]; then
    for f in "$OUT"/slurm-*.txt; do
        cp "$f" "$REPO/tests/clients/slurm-22.05-$(basename "$f" .txt | sed 's/^slurm-//').txt"
    done
    LOG "fixtures written: tests/clients/slurm-22.05-*.txt"
fi
# The outputs live in the work directory unless --out put them elsewhere.
if [[ $OUT == "$WORK"/* ]]; then KEEP=1; fi
