#!/usr/bin/env bash
# Start-up cost of the Slurm-compatible commands against a running `tandem up`.
#
#   bench/startup.sh [--tandem PATH] [--cli PATH] [--runs N] [--strace-runs M] [--json]
#
# Starts its own `tandem up --agents 2 --port 0 --no-proxy --data $(mktemp -d)` with the
# --tandem binary (default: target/release/tandem of this checkout, built with
# `cargo build --release -p tandem` when missing), makes a directory of symlinks `sbatch`,
# `squeue` -> the binary under test (busybox-style dispatch on argv[0]), and measures, N times
# each (default 100, at least 50), interleaved between binaries, after 5 unmeasured warm-ups:
#   - `squeue -h` (queue empty or nearly), then `sbatch --wrap true -o /dev/null` (the jobs run
#     and complete on the cluster);
#   - baselines: `/bin/true`, and `sbatch --bogus-option` (process start + argument parsing; it
#     is checked to exit non-zero without connecting to the controller).
# Figures are MEDIANS: CPU time of the child (user+system, from wait4's rusage) and wall time
# (fork/exec to reap, from a python3 parent), in ms.
# With strace installed, M runs (default 20) of each command under
# `strace -f -ttt -e trace=execve,connect,write,...,exit_group` split it into phases (medians):
# execve -> connect to the controller's socket (start + parse), connect -> first write of the
# request on that socket, that write -> first read returning data (controller commit + reply),
# that read -> exit_group. strace slows every syscall, so those are shares, not absolute costs.
#
# --cli PATH: the binary the Slurm links point to, measured BESIDE the --tandem binary, as a
# second column with a ratio (tandem / cli; > 1: the --cli binary is cheaper). Without it only
# the --tandem binary is measured. --json prints one JSON object instead of the table.
# The machine may be shared: the load average at start and end is printed with the figures.
# Everything this script starts is stopped on exit by its process id.

set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TANDEM=""
CLI=""
RUNS=100
STRACE_RUNS=20
JSON=0
WARMUP=5

usage() { sed -n '2,27p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
LOG() { echo "startup: $*" >&2; }
die() { LOG "$*"; exit 2; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --tandem) TANDEM=$2; shift 2 ;;
        --tandem=*) TANDEM=${1#*=}; shift ;;
        --cli) CLI=$2; shift 2 ;;
        --cli=*) CLI=${1#*=}; shift ;;
        --runs) RUNS=$2; shift 2 ;;
        --runs=*) RUNS=${1#*=}; shift ;;
        --strace-runs) STRACE_RUNS=$2; shift 2 ;;
        --strace-runs=*) STRACE_RUNS=${1#*=}; shift ;;
        --json) JSON=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
[[ $RUNS =~ ^[0-9]+$ ]] && ((RUNS >= 50)) || die "--runs must be a number >= 50 (medians need enough runs)"
[[ $STRACE_RUNS =~ ^[0-9]+$ ]] && ((STRACE_RUNS >= 1)) || die "--strace-runs must be a number >= 1"
command -v python3 > /dev/null || die "python3 is needed"

if [[ -z $TANDEM ]]; then
    TANDEM=${CARGO_TARGET_DIR:-$REPO/target}/release/tandem
    if [[ ! -x $TANDEM || ! -x $(dirname "$TANDEM")/tandem-slurm ]]; then
        LOG "building $TANDEM (cargo build --release -p tandem)"
        (cd "$REPO" && cargo build --release -p tandem >&2)
    fi
fi
[[ -x $TANDEM ]] || die "no tandem binary at $TANDEM"
TANDEM=$(realpath "$TANDEM")
if [[ -n $CLI ]]; then
    [[ -x $CLI ]] || die "no binary at --cli $CLI"
    CLI=$(realpath "$CLI")
fi

COMMIT=$(git -C "$REPO" rev-parse --short HEAD 2> /dev/null || echo unknown)
if ! git -C "$REPO" diff --quiet HEAD 2> /dev/null; then COMMIT="$COMMIT+dirty"; fi
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------------------------
# The cluster, and teardown by pid.

WORK=$(mktemp -d /tmp/tandem-startup.XXXXXX)
UP_PID=""
UP_CHILDREN=""
cleanup() {
    local rc=$? p deadline
    if [[ -n $UP_PID ]]; then
        kill -TERM "$UP_PID" 2> /dev/null || true
        deadline=$((SECONDS + 15))
        while kill -0 "$UP_PID" 2> /dev/null && ((SECONDS < deadline)); do sleep 0.1; done
        kill -KILL "$UP_PID" 2> /dev/null || true
        wait "$UP_PID" 2> /dev/null || true
        # tandem up stops its controller and agents itself; anything left is stopped here.
        for p in $UP_CHILDREN; do kill -0 "$p" 2> /dev/null && kill -KILL "$p" 2> /dev/null || true; done
    fi
    if ((rc != 0)); then LOG "work directory kept: $WORK"; else rm -rf "$WORK"; fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$WORK/data" "$WORK/jobs"
"$TANDEM" up --agents 2 --port 0 --no-proxy --data "$WORK/data" > "$WORK/up.log" 2>&1 &
UP_PID=$!
for _ in $(seq 600); do
    [[ -s $WORK/data/env ]] && break
    kill -0 "$UP_PID" 2> /dev/null || break
    sleep 0.1
done
[[ -s $WORK/data/env ]] || { cat "$WORK/up.log" >&2; die "tandem up did not write $WORK/data/env"; }
# shellcheck disable=SC1091
source "$WORK/data/env"
export TANDEM_SERVER
[[ $TANDEM_SERVER == unix://* ]] || die "expected TANDEM_SERVER=unix://..., got $TANDEM_SERVER"
SOCK=${TANDEM_SERVER#unix://}
UP_CHILDREN=$(pgrep -P "$UP_PID" | tr '\n' ' ' || true)

# The links: one directory per binary under test.
BINS=("$TANDEM")
LABELS=("tandem")
if [[ -n $CLI ]]; then
    BINS+=("$CLI")
    LABELS+=("cli:$(basename "$CLI")")
fi
for i in "${!BINS[@]}"; do
    mkdir -p "$WORK/bin$i"
    for c in sbatch squeue; do ln -s "${BINS[i]}" "$WORK/bin$i/$c"; done
done

# Ready: both agents up and the queue answering (squeue -h exits 0).
for _ in $(seq 300); do
    n=$(cd "$WORK/jobs" && "$WORK/bin0/squeue" -h 2> /dev/null > /dev/null && echo ok || true)
    [[ $n == ok ]] && break
    sleep 0.1
done
[[ $n == ok ]] || { cat "$WORK/up.log" >&2; die "the controller does not answer squeue"; }
sleep 1 # let the agents register

# Sanity: `sbatch --bogus-option` fails without contacting the controller, for each binary.
HAVE_STRACE=0
if command -v strace > /dev/null && strace -f -qq -o /dev/null /bin/true 2> /dev/null; then HAVE_STRACE=1; fi
for i in "${!BINS[@]}"; do
    if (cd "$WORK/jobs" && "$WORK/bin$i/sbatch" --bogus-option > /dev/null 2> "$WORK/bogus.err"); then
        die "${LABELS[i]}: sbatch --bogus-option exited 0"
    fi
    [[ -s $WORK/bogus.err ]] || die "${LABELS[i]}: sbatch --bogus-option printed no error"
    if ((HAVE_STRACE)); then
        (cd "$WORK/jobs" && strace -f -qq -e trace=connect -o "$WORK/bogus.strace" "$WORK/bin$i/sbatch" --bogus-option > /dev/null 2>&1) || true
        if grep -qF "$SOCK" "$WORK/bogus.strace"; then die "${LABELS[i]}: sbatch --bogus-option connects to the controller"; fi
    fi
done

# ---------------------------------------------------------------------------------------------
# Measurement and report (python3).

cat > "$WORK/helper.py" << 'PY'
import json, os, re, subprocess, sys, time, statistics

cfg = json.load(open(sys.argv[1]))
work, sock, bins, labels = cfg["work"], cfg["sock"], cfg["bins"], cfg["labels"]
runs, warmup, strace_runs = cfg["runs"], cfg["warmup"], cfg["strace_runs"]
jobs = os.path.join(work, "jobs")
devnull = os.open(os.devnull, os.O_RDWR)

def median(xs):
    return statistics.median(xs) if xs else None

def spawn(argv):
    """One run: (rc, cpu_ms, wall_ms) with the child's own rusage from wait4."""
    t0 = time.perf_counter_ns()
    pid = os.posix_spawn(argv[0], argv, os.environ,
                         file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, devnull, 1),
                                       (os.POSIX_SPAWN_DUP2, devnull, 2)])
    _, status, ru = os.wait4(pid, 0)
    t1 = time.perf_counter_ns()
    return os.waitstatus_to_exitcode(status), (ru.ru_utime + ru.ru_stime) * 1e3, (t1 - t0) / 1e6

def measure(cases):
    """cases: [(key, column, argv, want_zero)]; interleaved rounds, order rotated each round."""
    out = {(k, c): {"cpu": [], "wall": [], "fail": 0} for k, c, _, _ in cases}
    for r in range(warmup + runs):
        order = cases[r % len(cases):] + cases[:r % len(cases)]
        for k, c, argv, want_zero in order:
            rc, cpu, wall = spawn(argv)
            ok = (rc == 0) == want_zero
            if r < warmup:
                continue
            if not ok:
                out[(k, c)]["fail"] += 1
            out[(k, c)]["cpu"].append(cpu)
            out[(k, c)]["wall"].append(wall)
    return out

def wait_queue_empty(squeue, limit=120):
    t = time.time()
    while time.time() - t < limit:
        p = subprocess.run([squeue, "-h"], capture_output=True, text=True)
        if p.returncode == 0 and not p.stdout.strip():
            return True
        time.sleep(0.5)
    return False

# strace parsing ---------------------------------------------------------------------------------
LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*)$")
CALL = re.compile(r"^(\w+)\((.*)\)\s+=\s+(-?\d+|\?)(.*)$")
UNFIN = re.compile(r"^(\w+)\((.*)\s+<unfinished \.\.\.>$")
RESUM = re.compile(r"^<\.\.\. (\w+) resumed>(.*)\)\s+=\s+(-?\d+|\?)(.*)$")

def syscalls(path):
    """[(t, pid, name, args, ret, tail)], unfinished/resumed pairs merged at the call's start time."""
    pending, calls = {}, []
    for line in open(path, errors="replace"):
        m = LINE.match(line.rstrip("\n"))
        if not m:
            continue
        pid, t, rest = int(m.group(1)), float(m.group(2)), m.group(3)
        if rest.startswith("+++") or rest.startswith("---"):
            continue
        u = UNFIN.match(rest)
        if u:
            pending[(pid, u.group(1))] = (t, u.group(2))
            continue
        r = RESUM.match(rest)
        if r:
            t0, a = pending.pop((pid, r.group(1)), (t, ""))
            calls.append((t0, pid, r.group(1), a + r.group(2), r.group(3), r.group(4)))
            continue
        c = CALL.match(rest)
        if c:
            calls.append((t, pid, c.group(1), c.group(2), c.group(3), c.group(4)))
        elif rest.startswith("exit_group("):  # `exit_group(0) = ?` is matched above; be lenient
            calls.append((t, pid, "exit_group", "", "?", ""))
    calls.sort(key=lambda x: x[0])
    return calls

def phases(path):
    """(start+parse, connect->write, write->reply, reply->exit) in ms, or None."""
    calls = syscalls(path)
    execs = [c for c in calls if c[2] == "execve" and c[4] == "0"]
    if not execs:
        return None
    t_exec = execs[0][0]
    fd = cpid = t_conn = t_write = t_read = t_exit = None
    for t, pid, name, args, ret, tail in calls:
        if t_conn is None:
            # The socket: the fd of the connect to the controller's path that succeeded (0, or
            # -1 EINPROGRESS on a non-blocking socket).
            if name == "connect" and sock in args and (ret == "0" or ret == "-1" and "EINPROGRESS" in tail):
                fd, cpid, t_conn = args.split(",", 1)[0].strip(), pid, t
            continue
        first = args.split(",", 1)[0].strip()
        if t_write is None:
            if name in ("write", "writev", "sendto", "sendmsg") and first == fd and ret.isdigit() and int(ret) > 0:
                t_write = t
        elif t_read is None:
            if name in ("read", "recvfrom", "recvmsg") and first == fd and ret.isdigit() and int(ret) > 0:
                t_read = t
        if name == "exit_group":
            t_exit = t
    if None in (t_conn, t_write, t_read, t_exit):
        return None
    ms = lambda a, b: (b - a) * 1e3
    return ms(t_exec, t_conn), ms(t_conn, t_write), ms(t_write, t_read), ms(t_read, t_exit)

def breakdown(argv, n, tag):
    got, fails = [], 0
    for i in range(n):
        out = os.path.join(work, f"{tag}-{i}.strace")
        subprocess.run(["strace", "-f", "-qq", "-ttt", "-s", "256", "-o", out, "-e",
                        "trace=execve,connect,write,writev,sendto,sendmsg,read,recvfrom,recvmsg,exit_group"] + argv,
                       stdin=devnull, stdout=devnull, stderr=devnull, cwd=jobs)
        p = phases(out)
        if p is None:
            fails += 1
        else:
            got.append(p)
        os.unlink(out)
    if not got:
        return {"runs": 0, "unparsed": fails}
    med = [median([g[k] for g in got]) for k in range(4)]
    total = median([sum(g) for g in got])
    s = sum(med)
    names = ["start_parse", "connect_to_write", "write_to_reply", "reply_to_exit"]
    return {"runs": len(got), "unparsed": fails, "total_ms": total,
            "phases": {nm: {"ms": v, "pct": 100 * v / s if s else None} for nm, v in zip(names, med)}}

# the run ---------------------------------------------------------------------------------------
os.chdir(jobs)
cols = list(range(len(bins)))
link = lambda c, cmd: os.path.join(work, f"bin{c}", cmd)
res = {"figures": {}, "breakdown": {}}

def record(out, key, label):
    for c in cols:
        k = (key, c) if (key, c) in out else (key, 0)
        d = out[k]
        res["figures"].setdefault(key, {"label": label})[labels[c]] = {
            "cpu_ms": median(d["cpu"]), "wall_ms": median(d["wall"]), "runs": len(d["cpu"]), "failed": d["fail"]}

print(f"startup: baselines, {runs} runs", file=sys.stderr)
cases = [("true", 0, ["/bin/true"], True)] + [("bogus", c, [link(c, "sbatch"), "--bogus-option"], False) for c in cols]
out = measure(cases)
record(out, "true", "/bin/true")
record(out, "bogus", "sbatch --bogus-option (start + parse, no connect)")

wait_queue_empty(link(0, "squeue"))
print(f"startup: squeue -h, {runs} runs", file=sys.stderr)
out = measure([("squeue", c, [link(c, "squeue"), "-h"], True) for c in cols])
record(out, "squeue", "squeue -h")
if cfg["strace"]:
    print(f"startup: squeue -h under strace, {strace_runs} runs", file=sys.stderr)
    for c in cols:
        res["breakdown"].setdefault("squeue", {})[labels[c]] = breakdown([link(c, "squeue"), "-h"], strace_runs, f"sq{c}")

print(f"startup: sbatch --wrap true, {runs} runs", file=sys.stderr)
out = measure([("sbatch", c, [link(c, "sbatch"), "--wrap", "true", "-o", "/dev/null"], True) for c in cols])
record(out, "sbatch", "sbatch --wrap true -o /dev/null")
if cfg["strace"]:
    print("startup: waiting for the jobs to finish", file=sys.stderr)
    res["queue_drained"] = wait_queue_empty(link(0, "squeue"))
    print(f"startup: sbatch under strace, {strace_runs} runs", file=sys.stderr)
    for c in cols:
        res["breakdown"].setdefault("sbatch", {})[labels[c]] = breakdown(
            [link(c, "sbatch"), "--wrap", "true", "-o", "/dev/null"], strace_runs, f"sb{c}")
json.dump(res, open(os.path.join(work, "results.json"), "w"))
PY

cat > "$WORK/report.py" << 'PY'
import json, sys
cfg, res = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
labels = cfg["labels"]
doc = {k: cfg[k] for k in ("commit", "runs", "strace_runs", "load_start", "load_end", "machine")}
doc["binaries"] = [{"label": l, "path": p, "size_bytes": s, "checkout_commit": k}
                   for l, p, s, k in zip(labels, cfg["bins"], cfg["sizes"], cfg["checkouts"])]
doc.update(res)
if cfg["json"]:
    print(json.dumps(doc, indent=2))
    sys.exit(0)

two = len(labels) == 2
def f3(v): return "n/a" if v is None else f"{v:.3f}"
def ratio(a, b): return "" if not two or not a or not b else f"{a / b:.2f}"
rows = []
def row(name, vals):
    rows.append([name] + [f3(v) if not isinstance(v, str) else v for v in vals] + ([ratio(*vals)] if two and not any(isinstance(v, str) for v in vals) else [""] if two else []))
for key in ("squeue", "sbatch", "bogus", "true"):
    fig = res["figures"][key]
    for m, unit in (("cpu_ms", "CPU ms"), ("wall_ms", "wall ms")):
        row(f"{fig['label']}: median {unit}", [fig[l][m] for l in labels])
fails = {k: {l: v[l]["failed"] for l in labels if v[l]["failed"]} for k, v in res["figures"].items()}
names = {"start_parse": "execve -> connect (start + parse)", "connect_to_write": "connect -> write request",
         "write_to_reply": "write -> first reply read (commit)", "reply_to_exit": "reply -> exit_group"}
for cmd in ("squeue", "sbatch"):
    b = res["breakdown"].get(cmd)
    if not b:
        continue
    for ph, nm in names.items():
        vals = []
        for l in labels:
            p = b[l].get("phases")
            vals.append("n/a" if not p else f"{p[ph]['ms']:.3f} ({p[ph]['pct']:.0f}%)")
        row(f"  strace {cmd}: {nm} ms", vals)
    row(f"  strace {cmd}: execve -> exit_group total ms", [b[l].get("total_ms") for l in labels])
rows.append(["binary size (bytes)"] + [str(s) for s in cfg["sizes"]] + ([ratio(*cfg["sizes"])] if two else []))
head = ["figure"] + labels + (["ratio tandem/cli"] if two else [])
w = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
print(f"Tandem start-up (bench/startup.sh at commit {cfg['commit']}), {cfg['machine']}")
for l, p, k in zip(labels, cfg["bins"], cfg["checkouts"]):
    print(f"  {l}: {p} (built in a checkout at {k})")
print(f"  runs: {cfg['runs']} per figure (medians), {cfg['strace_runs']} under strace; cluster: tandem up --agents 2 --no-proxy")
print(f"  load average (1/5/15 min): start {cfg['load_start']}, end {cfg['load_end']}")
print()
for r in [head] + rows:
    print("  ".join([r[0].ljust(w[0])] + [c.rjust(w[i + 1]) for i, c in enumerate(r[1:])]))
print()
if res["breakdown"]:
    print("strace slows every syscall, so the strace rows are shares of the time (%), not absolute costs.")
else:
    print("strace not installed: no phase breakdown.")
if any(fails.values()):
    print(f"runs with an unexpected exit status: {fails}")
if "queue_drained" in res and not res["queue_drained"]:
    print("the queue had not drained before the sbatch strace runs")
PY

write_cfg() {
    python3 - "$WORK/cfg.json" "$@" << 'PY'
import json, os, sys
out, kv = sys.argv[1], sys.argv[2:]
cfg = json.load(open(out)) if os.path.exists(out) else {}
for a in kv:
    k, v = a.split("=", 1)
    cfg[k] = json.loads(v)
json.dump(cfg, open(out, "w"))
PY
}
js() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
jsl() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "$@"; }

SIZES=() CHECKOUTS=()
for b in "${BINS[@]}"; do
    SIZES+=("$(stat -c %s "$b")")
    # The commit of the checkout the binary sits in (target/release/... inside a work tree).
    c=$(git -C "$(dirname "$b")" rev-parse --short HEAD 2> /dev/null || echo "?")
    if [[ $c != "?" ]] && ! git -C "$(dirname "$b")" diff --quiet HEAD 2> /dev/null; then c="$c+dirty"; fi
    CHECKOUTS+=("$c")
done
MACHINE="$(nproc) CPUs, $(uname -sr)"
write_cfg "work=$(js "$WORK")" "sock=$(js "$SOCK")" "bins=$(jsl "${BINS[@]}")" "labels=$(jsl "${LABELS[@]}")" \
    "runs=$RUNS" "warmup=$WARMUP" "strace_runs=$STRACE_RUNS" "strace=$( ((HAVE_STRACE)) && echo true || echo false)" \
    "commit=$(js "$COMMIT")" "load_start=$(js "$LOAD_START")" "machine=$(js "$MACHINE")" \
    "sizes=[$(IFS=,; echo "${SIZES[*]}")]" "checkouts=$(jsl "${CHECKOUTS[@]}")" "json=$( ((JSON)) && echo true || echo false)"
((HAVE_STRACE)) || LOG "strace not installed: no phase breakdown"

python3 "$WORK/helper.py" "$WORK/cfg.json"
write_cfg "load_end=$(js "$(cut -d' ' -f1-3 /proc/loadavg)")"
python3 "$WORK/report.py" "$WORK/cfg.json" "$WORK/results.json"
