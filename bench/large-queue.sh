#!/usr/bin/env bash
# Issue 27, item 3: one user's huge queue and everyone else's commands. As root, with the users
# tandem-alice (the queue's owner) and tandem-mallory (another user), against a local `tandem up`:
# ARRAYS sbatch --array=0-999 of alice's (pending: --begin a day away), then
#   - mallory's `squeue --me` (her own jobs: none of alice's) and alice's `squeue` (collapsed)
#     and `squeue -r` (every task): median wall time of RUNS runs, and the reply bytes each
#     transfers (the controller's tandem_response_bytes_total, before and after one run);
#   - `scancel -u tandem-alice` of them all: wall time;
#   - the controller's resident memory idle, with the queue, after the listings (which build
#     every task's row) and after the cancel.
# Usage: bash bench/large-queue.sh [TANDEM_BINARY] [ARRAYS] [RUNS]   (default: target/release/
# tandem if built, else target/debug/tandem; 150 arrays, i.e. 150,000 tasks; 5 runs)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
if [ -z "$bin" ]; then bin=target/release/tandem; [ -x "$bin" ] || bin=target/debug/tandem; fi
bin=$(readlink -f "$bin")
arrays=${2:-150}
runs=${3:-5}
[ "$(id -u)" = 0 ] || { echo "run as root (it switches to tandem-alice and tandem-mallory)" >&2; exit 1; }
for u in tandem-alice tandem-mallory; do id -u "$u" >/dev/null || { echo "no user $u (useradd $u)" >&2; exit 1; }; done
dir=$(mktemp -d /tmp/tandem-largeq.XXXXXX)
chmod 755 "$dir"
mkdir -m 0711 "$dir/data"
"$bin" shims "$dir/bin" >/dev/null
"$bin" up --agents 1 --port 0 --no-proxy --no-hosts --data "$dir/data" >"$dir/up.log" 2>&1 &
up=$!
trap 'kill $up 2>/dev/null; wait $up 2>/dev/null; rm -rf "$dir"' EXIT
until [ -e "$dir/data/env" ]; do sleep 0.1; done
export TANDEM_SERVER=unix://$dir/data/controller/tandem.sock PATH=$dir/bin:$PATH
until sinfo -h -N 2>/dev/null | grep -q idle; do sleep 0.2; done
ctl=$(pgrep -f "server .*$dir/data" | head -1)
rss() { awk '/VmRSS/ {print $2}' "/proc/$ctl/status"; }
as() { local u=$1; shift; setpriv --reuid "$u" --regid "$u" --clear-groups env PATH="$PATH" TANDEM_SERVER="$TANDEM_SERVER" "$@"; }
metric() { curl -s --unix-socket "$dir/data/controller/tandem.sock" http://x/metrics | awk -v k="$1" '$1 == k {print $2}'; }
now_ms() { date +%s%3N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
idle=$(rss)
t0=$(now_ms)
for _ in $(seq "$arrays"); do as tandem-alice sbatch -Q -o /dev/null --begin=now+1day --array=0-999 --wrap true >/dev/null; done
t1=$(now_ms)
sleep 2
queued=$(rss)
tasks=$(metric tandem_queue_length)
records=$(metric tandem_job_records)
timed() { # user, command...: median ms of $runs runs, then the reply bytes of one run
  local u=$1; shift
  local ms=()
  for _ in $(seq "$runs"); do local a; a=$(now_ms); as "$u" "$@" >/dev/null; ms+=($(( $(now_ms) - a ))); done
  local b0 b1; b0=$(metric tandem_response_bytes_total); as "$u" "$@" >/dev/null; b1=$(metric tandem_response_bytes_total)
  echo "$(printf '%s\n' "${ms[@]}" | median) $(( ${b1%.*} - ${b0%.*} ))"
}
read -r m_ms m_b < <(timed tandem-mallory squeue --me)
read -r a_ms a_b < <(timed tandem-alice squeue)
read -r r_ms r_b < <(timed tandem-alice squeue -r)
listed=$(rss)
c0=$(now_ms)
as tandem-alice scancel -u tandem-alice
c1=$(now_ms)
sleep 2
after=$(rss)
left=$(squeue -h -r -u tandem-alice -t PD -o %i | wc -l)
echo "binary: $bin"
echo "queue: $tasks pending tasks of tandem-alice in $arrays arrays, submitted in $(( t1 - t0 )) ms; $records job records in memory"
printf '%-44s %10s %14s\n' "command" "median ms" "reply bytes"
printf '%-44s %10s %14s\n' "tandem-mallory: squeue --me" "$m_ms" "$m_b"
printf '%-44s %10s %14s\n' "tandem-alice: squeue (tasks collapsed)" "$a_ms" "$a_b"
printf '%-44s %10s %14s\n' "tandem-alice: squeue -r (every task)" "$r_ms" "$r_b"
echo "scancel -u tandem-alice: $(( c1 - c0 )) ms; pending tasks left: $left"
echo "controller RSS: idle $(( idle / 1024 )) MiB, with the queue $(( queued / 1024 )) MiB (+$(( (queued - idle) / 1024 )) MiB), after the listings $(( listed / 1024 )) MiB, after the cancel $(( after / 1024 )) MiB"
