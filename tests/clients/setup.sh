#!/usr/bin/env bash
# Installs the pinned Slurm clients and kubernetes-validate (requirements.txt) into a virtual
# environment for the client tests (crates/tandem/tests/clients.rs) and the manifests' test
# (crates/tandem/tests/manifests.rs), which find it at target/clients-venv (or
# $TANDEM_CLIENTS_VENV). Reused when it already has them.
#
#   tests/clients/setup.sh [VENV]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=${1:-${TANDEM_CLIENTS_VENV:-$root/target/clients-venv}}
if [ -x "$venv/bin/python" ] && "$venv/bin/pip" freeze 2>/dev/null | sort | diff -q - <(grep -v '^#' "$here/requirements.txt" | sort) >/dev/null; then
  echo "setup.sh: $venv already has the clients"
  exit 0
fi
if ! python3 -m venv "$venv" 2>/dev/null; then
  # Debian ships venv apart from python3.
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$venv"
  else
    echo "setup.sh: python3 -m venv failed; install python3-venv" >&2
    exit 1
  fi
fi
"$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt"
echo "setup.sh: installed $(grep -v '^#' "$here/requirements.txt" | tr '\n' ' ')into $venv"
