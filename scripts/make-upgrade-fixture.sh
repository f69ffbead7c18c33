#!/usr/bin/env bash
# Makes tests/fixtures/upgrade-7314e88: a controller's data directory written by the build of
# commit 7314e88 (before the database recorded its schema), for the upgrade test
# (crates/tandem/tests/cluster.rs::a_data_directory_of_commit_7314e88_is_migrated_with_its_jobs_accounting_and_services).
# Run once, by hand, from the repository root:
#   git worktree add /tmp/u7314 7314e88 && (cd /tmp/u7314 && cargo build -p tandem)
#   bash scripts/make-upgrade-fixture.sh /tmp/u7314/target/debug/tandem
# It starts that build's `tandem up` (one agent, no proxy), runs jobs that complete, fail, are
# held and cancelled, an array, and a service scaled to 0, records what `sacct` and `tandem
# service list` print, stops the cluster, and packs the controller's directory (its database and
# keys: a test cluster's, nothing else) with those outputs.
set -euo pipefail
old=${1:?usage: scripts/make-upgrade-fixture.sh OLD_TANDEM_BINARY}
out=tests/fixtures/upgrade-7314e88
work=$(mktemp -d)
trap 'kill -INT "$up" 2>/dev/null; wait "$up" 2>/dev/null; rm -rf "$work"' EXIT
"$old" up --data "$work/data" --port 0 --agents 1 --no-proxy --no-hosts >"$work/up.log" 2>&1 &
up=$!
for _ in $(seq 300); do [ -f "$work/data/env" ] && break; sleep 0.1; done
# shellcheck disable=SC1091
source "$work/data/env"
t=("$old")
cd "$work"
for _ in $(seq 100); do "${t[@]}" nodes -h -o %t 2>/dev/null | grep -q idle && break; sleep 0.2; done
"${t[@]}" submit -Q -J done -o done.out --wrap 'echo hello'
"${t[@]}" submit -Q -J fails -o fails.out --wrap 'exit 3'
"${t[@]}" submit -Q -J held -H --wrap 'true'
"${t[@]}" submit -Q -J sweep --array=0-2 -o 'sweep-%a.out' --wrap 'echo $SLURM_ARRAY_TASK_ID'
cancelled=$("${t[@]}" submit --parsable -J cancelled --begin=now+3600 --wrap 'true')
"${t[@]}" cancel "$cancelled"
cat >web.toml <<'SPEC'
name = "web"
command = ["python3", "-m", "http.server", "--bind", "127.0.0.1", "$PORT"]
replicas = 1
[resources]
cpus = 1
memory = "64MiB"
[readiness]
http = "/"
SPEC
"${t[@]}" service apply -f web.toml
for _ in $(seq 300); do "${t[@]}" service list | grep -q '^web *1/1' && break; sleep 0.2; done
"${t[@]}" service scale web 0
for _ in $(seq 300); do
  [ -z "$("${t[@]}" queue -h -t running,completing)" ] && break
  sleep 0.2
done
mkdir -p "$OLDPWD/$out"
"${t[@]}" history -a -X -n -P -S 2026-01-01 -E now -o JobID,JobName,State,ExitCode >"$OLDPWD/$out/sacct.txt"
"${t[@]}" service list | awk '{print $1, $4, $5, $6}' >"$OLDPWD/$out/services.txt"
kill -INT "$up"
wait "$up" || true
cd "$OLDPWD"
tar -C "$work/data/controller" --exclude='*.sock' --exclude='*.lock' --exclude='*.log' -czf "$out/controller.tar.gz" .
echo "wrote $out: $(wc -l <"$out/sacct.txt") jobs, $(($(wc -l <"$out/services.txt") - 1)) service(s)"
