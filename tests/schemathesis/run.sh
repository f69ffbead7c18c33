#!/usr/bin/env bash
# Schemathesis against a live cluster: checks every operation of the controller's OpenAPI
# document (/openapi.json) against what a running controller really answers.
#
#   tests/schemathesis/run.sh [PATH/TO/tandem]      (default: $TANDEM_BIN, else target/debug/tandem)
#
# It installs a pinned Schemathesis into a virtual environment (ST_VENV, default
# /tmp/tandem-st-venv; reused when the version matches), starts `tandem up` (a controller
# and one agent, no proxy) in a fresh directory, takes a user token over the Unix socket (as
# nobody when run as root: the jobs and services Schemathesis makes really run), runs
# Schemathesis over TCP with that token on every operation, then once more on the agents'
# registration and heartbeat with a node credential (a join token spent on node `st-node`;
# settings in schemathesis.toml beside this file), and stops the cluster. Exit status: 0 when neither run found a failure and the cluster
# lived through them.
#
# Knobs: ST_MAX_EXAMPLES (cases per operation and phase, default 25), ST_SEED (default 1; set
# it empty for a random run), ST_REPORT_DIR (JUnit and NDJSON reports), ST_CACERT (the CA
# bundle to check the controller's certificate against; default: the cluster's own CA when the
# controller serves TLS), ST_KEEP=1 (keep the cluster's directory and logs).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:-${TANDEM_BIN:-$root/target/debug/tandem}}
version=4.32.5
venv=${ST_VENV:-/tmp/tandem-st-venv}
examples=${ST_MAX_EXAMPLES:-25}
seed=${ST_SEED-1}
reports=${ST_REPORT_DIR:+$(mkdir -p "$ST_REPORT_DIR" && cd "$ST_REPORT_DIR" && pwd)}

[ -x "$bin" ] || { echo "run.sh: no tandem binary at $bin (cargo build -p tandem, or pass its path)" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")

started=$(date +%s)
if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -qF "version $version"; then
  echo "run.sh: installing schemathesis $version into $venv"
  if ! python3 -m venv "$venv" 2>/dev/null; then
    # Debian ships venv apart from python3.
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      apt-get install -y -qq python3-venv >/dev/null
    fi
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version"
fi

# A short path: the controller's socket path must stay under the kernel's 107 bytes.
work=$(mktemp -d /tmp/tandem-st.XXXXXX)
chmod 711 "$work"
data=$work/cluster
up_pid=
cleanup() {
  if [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null; then
    kill -TERM "$up_pid" 2>/dev/null || true
    wait "$up_pid" 2>/dev/null || true
  fi
  if [ "${ST_KEEP:-}" = 1 ]; then echo "run.sh: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

"$bin" up --data "$data" --agents 1 --port 0 --no-proxy >"$work/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 1 300); do
  [ -s "$data/controller/addr" ] && [ -s "$data/env" ] && break
  kill -0 "$up_pid" 2>/dev/null || { cat "$work/up.log" >&2; echo "run.sh: tandem up exited" >&2; exit 1; }
  sleep 0.1
done
[ -s "$data/env" ] || { cat "$work/up.log" >&2; echo "run.sh: the cluster did not start in 30 s" >&2; exit 1; }
addr=$(cat "$data/controller/addr")
sock=unix://$data/controller/tandem.sock
# The agent's node, so that node operations meet a real one too.
for _ in $(seq 1 100); do
  TANDEM_SERVER=$sock "$bin" nodes 2>/dev/null | grep -q node1 && break
  sleep 0.1
done
# Schemathesis submits jobs and services that the agent really runs, with generated working
# directories and output paths: as root, it acts as nobody, so they run as nobody too.
as_user=()
if [ "$(id -u)" = 0 ]; then
  as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
token=$(cd "$work" && "${as_user[@]}" env TANDEM_SERVER="$sock" "$bin" token | sed -n 's/^export TANDEM_TOKEN=//p')
[ -n "$token" ] || { echo "run.sh: tandem token printed no token" >&2; exit 1; }

# The one place TLS goes. A controller that says it listens on https is checked against its
# cluster CA (DATA/controller/ca.pem; its certificate names 127.0.0.1), or against ST_CACERT.
scheme=http
tls=()
if grep -q "listening on https://" "$data/controller.log" || [ -n "${ST_CACERT:-}" ]; then
  scheme=https
  tls=(--tls-verify "${ST_CACERT:-$data/controller/ca.pem}")
fi

args=(--max-examples "$examples" --no-color)
[ -n "$seed" ] && args+=(--seed "$seed")
echo "run.sh: controller on $scheme://$addr, schemathesis $version, $examples examples per operation"
st() {
  local name=$1
  shift
  local report=()
  [ -n "$reports" ] && report=(--report junit,ndjson --report-dir "$reports/$name")
  "$venv/bin/schemathesis" --config-file "$here/schemathesis.toml" run "$scheme://$addr/openapi.json" \
    -H "Authorization: Bearer $token" "${tls[@]}" "${args[@]}" "${report[@]}" "$@"
}
set +e
# From the scratch directory: Schemathesis and Hypothesis keep caches in the current one.
cd "$work"
echo "run.sh: every operation, as a user (the agents' and the proxy's refuse it: no credential)"
st users
rc=$?
# Then the agents' two operations with a node's credential, last (bodies that name another
# node are refused, 403). The credential: a join token, made by the controller's user, spent.
# (Not the proxy's long poll: with a `since` ahead of the view it holds each request 30 s.)
echo "run.sh: registration and heartbeats with a node's credential"
join=$(TANDEM_SERVER=$sock "$bin" token --join)
cred=$(curl -s --http1.1 ${tls:+--cacert "${ST_CACERT:-$data/controller/ca.pem}"} -X POST \
  -H "Authorization: Bearer $join" -H 'content-type: application/json' -d '{"name":"st-node"}' \
  "$scheme://$addr/v1/agent/join" | sed -n 's/.*"credential":"\([^"]*\)".*/\1/p')
[ -n "$cred" ] || { echo "run.sh: joining as st-node gave no credential" >&2; exit 1; }
# The document is a user's to read: fetched with the user's token, then given as a file.
curl -sf --http1.1 ${tls:+--cacert "${ST_CACERT:-$data/controller/ca.pem}"} -H "Authorization: Bearer $token" \
  "$scheme://$addr/openapi.json" >"$work/openapi.json"
"$venv/bin/schemathesis" --config-file "$here/schemathesis.toml" run "$work/openapi.json" --url "$scheme://$addr" \
  -H "Authorization: Bearer $cred" "${tls[@]}" "${args[@]}" \
  ${reports:+--report junit,ndjson --report-dir "$reports/agents"} --phases examples,coverage,fuzzing \
  --include-operation-id registerAgent --include-operation-id heartbeat
rc2=$?
[ "$rc" = 0 ] && rc=$rc2
set -e
# A controller that died under the run is a failure whatever Schemathesis said.
if ! kill -0 "$up_pid" 2>/dev/null; then
  echo "run.sh: the cluster exited during the run" >&2
  tail -n 40 "$data/controller.log" >&2 || true
  rc=1
fi
echo "run.sh: done in $(( $(date +%s) - started )) s (exit $rc)"
exit "$rc"
