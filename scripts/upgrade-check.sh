#!/usr/bin/env bash
# The agent upgrade across commits (README, "Upgrades"): builds commit 7314e88 (or $1) in a
# worktree of its own (a debug build, some minutes), then runs
# faults.rs::an_agent_upgraded_under_running_jobs_adopts_them_and_none_is_requeued with the
# agent first started from that build and upgraded to this one under running jobs. CI runs the
# same test with this build on both sides (building another commit would cost CI minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-7314e88}
wt=${TMPDIR:-/tmp}/tandem-upgrade-$rev
[ -d "$wt" ] || git worktree add -f "$wt" "$rev" >/dev/null
[ -e "$wt/../shared" ] || ln -s "$PWD/../shared" "$wt/../shared" 2>/dev/null || true
(cd "$wt" && cargo build -q -p tandem --bin tandem)
# Agents before d3e991f stop their tasks at SIGTERM: that one is stopped with SIGKILL, to the
# agent alone (`systemctl kill --kill-whom=main --signal=SIGKILL tandem-agent`).
TANDEM_UPGRADE_STOP=kill TANDEM_UPGRADE_FROM="$wt/target/debug/tandem" cargo test -q -p tandem --test faults -- an_agent_upgraded_under_running_jobs --nocapture
