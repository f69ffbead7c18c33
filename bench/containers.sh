#!/usr/bin/env bash
# Issue 29, must-show 5: from `srun` to the first line of its task's output, for a bare process,
# a container from an image the node has (cached), and one from an image it must pull first
# (uncached: the node's cache emptied before each run), as tandem-alice on a local `tandem up`
# (one agent) with Debian's docker-registry on loopback serving an image made here (busybox-
# static and umoci, as the CI test does; LAYER_MB of random bytes added to its layer, so the
# pull moves a realistic amount of data). Median and spread of RUNS runs, and each container
# figure as a ratio to the bare one from the same run.
# Usage: bash bench/containers.sh [TANDEM_BINARY] [RUNS] [LAYER_MB]   (default: target/release/
# tandem if built, else target/debug/tandem; 9 runs; 64 MiB)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-}
if [ -z "$bin" ]; then bin=target/release/tandem; [ -x "$bin" ] || bin=target/debug/tandem; fi
bin=$(readlink -f "$bin")
runs=${2:-9}
mb=${3:-64}
[ "$(id -u)" = 0 ] || { echo "run as root (it switches to tandem-alice)" >&2; exit 1; }
for t in runc umoci skopeo docker-registry newuidmap; do command -v $t >/dev/null || { echo "$t is not installed (see .ci/run)" >&2; exit 1; }; done
dir=$(mktemp -d /tmp/tandem-ctrbench.XXXXXX)
chmod 755 "$dir"
# The image.
umoci init --layout "$dir/layout" >/dev/null
umoci new --image "$dir/layout:1" >/dev/null
umoci unpack --image "$dir/layout:1" "$dir/bundle" >/dev/null
mkdir -p "$dir/bundle/rootfs/bin" "$dir/bundle/rootfs/etc" "$dir/bundle/rootfs/opt"
cp /bin/busybox "$dir/bundle/rootfs/bin/busybox"
for a in sh echo cat; do ln -s busybox "$dir/bundle/rootfs/bin/$a"; done
echo 'PRETTY_NAME="bench"' > "$dir/bundle/rootfs/etc/os-release"
head -c "$((mb << 20))" /dev/urandom > "$dir/bundle/rootfs/opt/payload"
umoci repack --image "$dir/layout:1" "$dir/bundle" >/dev/null
umoci config --image "$dir/layout:1" --config.env PATH=/bin >/dev/null
rm -rf "$dir/bundle"
# The registry.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$dir/registry.yml" <<EOF
version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: $dir/storage
http:
  addr: 127.0.0.1:$port
EOF
docker-registry serve "$dir/registry.yml" >"$dir/registry.log" 2>&1 &
reg=$!
until (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; do sleep 0.1; done
skopeo copy -q --dest-tls-verify=false "oci:$dir/layout:1" "docker://127.0.0.1:$port/bench/img:1"
# The cluster.
mkdir -m 0711 "$dir/data"
"$bin" shims "$dir/bin" >/dev/null
TANDEM_INSECURE_REGISTRIES=127.0.0.1:$port "$bin" up --agents 1 --port 0 --no-proxy --no-hosts --data "$dir/data" >"$dir/up.log" 2>&1 &
up=$!
trap 'st=$?; kill $up $reg 2>/dev/null; wait $up $reg 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$dir"; exit $st' EXIT
until [ -e "$dir/data/env" ]; do sleep 0.1; done
export TANDEM_SERVER=unix://$dir/data/controller/tandem.sock PATH=$dir/bin:$PATH
until sinfo -h -N 2>/dev/null | grep -q idle; do sleep 0.2; done
work=$dir/work
mkdir -m 0777 "$work"
as() { (cd "$work" && setpriv --reuid tandem-alice --regid tandem-alice --clear-groups env PATH="$PATH" TANDEM_SERVER="$TANDEM_SERVER" "$@"); }
now_ms() { date +%s%3N; }
# Milliseconds from srun's start to the first line of its output (the rest is read to the end,
# so that srun ends as it normally does).
first_line() {
  local t0
  t0=$(now_ms)
  as "$@" 2>"$dir/last.err" | { read -r _; now_ms > "$dir/t1"; cat >/dev/null; }
  echo $(($(cat "$dir/t1") - t0))
}
img=--container-image=127.0.0.1:$port#bench/img:1
as srun -N1 true >/dev/null   # warm the node's first launch
: > "$dir/bare"; : > "$dir/cached"; : > "$dir/uncached"
for _ in $(seq "$runs"); do
  first_line srun -N1 echo bare >> "$dir/bare"
  rm -rf "$dir/data/node1/images/rootfs/"* "$dir/data/node1/images/blobs/sha256/"*
  first_line srun -N1 "$img" echo uncached >> "$dir/uncached"
  first_line srun -N1 "$img" echo cached >> "$dir/cached"
done
stat() { sort -n "$1" | awk '{a[NR]=$1} END {printf "%d ms (min %d, max %d)", a[int((NR+1)/2)], a[1], a[NR]}'; }
med() { sort -n "$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
b=$(med "$dir/bare")
echo "srun to first output, $runs runs each, image layer $mb MiB + busybox, one agent ($(basename "$bin") $("$bin" --version 2>/dev/null | head -1))"
printf '%-28s %s\n' "bare process" "$(stat "$dir/bare")"
printf '%-28s %s  %.2fx bare\n' "container, cached image" "$(stat "$dir/cached")" "$(echo "$(med "$dir/cached") $b" | awk '{print $1 / $2}')"
printf '%-28s %s  %.2fx bare\n' "container, uncached image" "$(stat "$dir/uncached")" "$(echo "$(med "$dir/uncached") $b" | awk '{print $1 / $2}')"
