#!/usr/bin/env bash
# The check of Tandem's own image (scripts/image.sh; README, "Tandem's own image"), run by hand,
# not in CI (it needs root, runc and a release binary). It fails, never skips, when a piece is
# missing.
#
#   scripts/image-check.sh [--build] [BINARY]
#
# 1. Reproducible: clones this repository's HEAD twice, into two directories of different
#    paths, and builds the image in each with the clone's scripts/image.sh (SOURCE_DATE_EPOCH
#    from the commit); the two manifest digests must be one. The binary: BINARY (default
#    target/release/tandem) copied into each clone, or with --build each clone's own release
#    build (`image.sh --build`, with --remap-path-prefix; two release builds: slow).
# 2. The controller from the image under runc, as deploy/kubernetes/tandem.yaml's StatefulSet
#    runs it: root without capabilities, read-only root, its data directory a mount, the
#    cluster CA made beforehand by `tandem server` (as the README says) and mounted read-only
#    at DATA/ca.pem and DATA/ca.key as the Secret is. GET /healthz over TLS, verified with that
#    CA under the name clients check (controller.tandem), must answer ok; then a join token
#    and a proxy credential are issued in the container over the Unix socket (`kubectl exec`).
# 3. The agent as the DaemonSet runs it: root with every capability, the host's PID
#    namespace, network and /sys/fs/cgroup, the host's /usr, /etc, /tmp ... over the image's,
#    its binary at /tandem/bin/tandem. It joins with that token, and a batch job of the
#    ordinary user tandem-alice (.ci/run creates her) must run as her, in the host's PID
#    namespace (its /proc/1 is the host's), in a job cgroup of the agent's memory hierarchy
#    where the host has cgroup v1's, and leave its output file, hers, in her directory.
# 4. The proxy as its Deployment runs it (user 65532, no capabilities, its credential
#    group-readable as fsGroup makes it): /_tandem/healthz must answer ok.
#
# Needs: root, git, runc, umoci, curl, jq, setpriv, the user tandem-alice, and what image.sh needs.
set -euo pipefail
export LC_ALL=C
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=0 bin=
for a in "$@"; do
  case $a in
    --build) build=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "image-check.sh: unknown option $a" >&2; exit 2 ;;
    *) bin=$(realpath "$a") ;;
  esac
done
say() { echo "image-check.sh: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (runc as the cluster's runtime runs it)"
for t in git runc umoci curl jq setpriv timeout; do
  command -v "$t" >/dev/null || fail "$t is missing (apt-get install git runc umoci curl jq util-linux coreutils)"
done
id -u tandem-alice >/dev/null 2>&1 || fail "no user tandem-alice (useradd --no-create-home tandem-alice, as .ci/run does)"
bin=${bin:-$root/target/release/tandem}
[ "$build" = 1 ] || [ -x "$bin" ] || fail "no binary at $bin (cargo build --release -p tandem, or --build)"

tmp=$(mktemp -d /tmp/tandem-image-check.XXXXXX)
state=$tmp/runc
ctrs=()
cleanup() {
  for c in "${ctrs[@]}"; do
    runc --root "$state" kill "$c" KILL 2>/dev/null || true
  done
  sleep 0.5
  for c in "${ctrs[@]}"; do
    runc --root "$state" delete -f "$c" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

# 1. Two clones, two directories, one digest.
# One commit for both, whatever is committed meanwhile.
rev=$(git -C "$root" rev-parse HEAD)
digests=()
for clone in "$tmp/a/tandem" "$tmp/b/elsewhere/tandem-2"; do
  git clone -q --no-checkout "$root" "$clone"
  git -C "$clone" checkout -q "$rev"
  if ! cmp -s "$here/image.sh" "$clone/scripts/image.sh"; then
    say "note: this checkout's scripts/image.sh differs from HEAD's (uncommitted); the clones use this checkout's"
    cp "$here/image.sh" "$clone/scripts/image.sh"
  fi
  if [ "$build" = 1 ]; then
    d=$(bash "$clone/scripts/image.sh" --build)
  else
    mkdir -p "$clone/target/release"
    cp "$bin" "$clone/target/release/tandem"
    d=$(bash "$clone/scripts/image.sh")
  fi
  say "$clone: $d"
  digests+=("$d")
done
[ "${digests[0]}" = "${digests[1]}" ] || fail "two builds of one commit gave two digests: ${digests[*]}"
layout=$tmp/a/tandem/target/image
tag=$(jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]' "$layout/index.json")
say "reproducible: both clones of $rev gave ${digests[0]} (oci:$layout:$tag)"

# A bundle of the image whose config.json is the unpacked one through the jq program $2
# (with the jq arguments after it).
bundle() {
  local b=$tmp/$1 prog=$2
  shift 2
  umoci unpack --rootless --image "$layout:$tag" "$b" >/dev/null
  jq "$@" "$prog" "$b/config.json" >"$b/config.new"
  mv "$b/config.new" "$b/config.json"
}
# Starts bundle $1 as container $1 (its output in $tmp/$1.log).
start() {
  (cd "$tmp/$1" && runc --root "$state" run -d "$1" >"$tmp/$1.log" 2>&1) || {
    cat "$tmp/$1.log" >&2
    fail "runc could not start the $1"
  }
  ctrs+=("$1")
}
running() {
  runc --root "$state" state "$1" 2>/dev/null | jq -e '.status == "running"' >/dev/null || {
    cat "$tmp/$1.log" >&2
    fail "the $1 stopped"
  }
}
# What every container here shares: the image's PATH, no terminal, and for the confined ones
# no capabilities and no new privileges (the manifest's securityContext).
common='.process.env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] + $env
  | .process.terminal = false
  | del(.linux.uidMappings, .linux.gidMappings)'
confined='.process.capabilities = {bounding: [], effective: [], permitted: [], inheritable: [], ambient: []}
  | .process.noNewPrivileges = true
  | .root.readonly = true
  | .linux.namespaces = [{type: "pid"}, {type: "ipc"}, {type: "uts"}, {type: "mount"}]
  | .mounts = ([.mounts[] | select(.destination != "/sys")]
      + [{destination: "/sys", type: "bind", source: "/sys", options: ["rbind", "nosuid", "noexec", "nodev", "ro"]},
         {destination: "/tmp", type: "tmpfs", source: "tmpfs", options: ["nosuid", "nodev", "mode=1777"]}])'

# 2. The controller. Its CA first, as the README makes it: a controller's first start.
bundle controller "$common | $confined"' | .process.args = $args | .process.user = {uid: 0, gid: 0}
  | .mounts += [{destination: "/var/lib/tandem", type: "bind", source: $data, options: ["rbind", "rw"]},
      {destination: "/var/lib/tandem/ca.pem", type: "bind", source: ($ca + "/ca.pem"), options: ["bind", "ro"]},
      {destination: "/var/lib/tandem/ca.key", type: "bind", source: ($ca + "/ca.key"), options: ["bind", "ro"]}]' \
  --arg data "$tmp/data" --arg ca "$tmp/ca-secret" --argjson env '["TANDEM_SERVER=unix:///var/lib/tandem/tandem.sock"]' \
  --argjson args '["/usr/bin/tandem", "server", "--listen", "127.0.0.1:0", "--data", "/var/lib/tandem"]'
client=$tmp/controller/rootfs/tandem/bin/tandem
timeout -s INT 5 "$client" server --data "$tmp/ca" --listen 127.0.0.1:0 >/dev/null 2>&1 || true
[ -s "$tmp/ca/ca.pem" ] && [ -s "$tmp/ca/ca.key" ] || fail "tandem server --data DIR made no CA in 5 s"
mkdir -m 0700 "$tmp/ca-secret" "$tmp/data"
install -m 0400 "$tmp/ca/ca.pem" "$tmp/ca/ca.key" "$tmp/ca-secret/"
start controller
say "controller started from the image: runc container, pid $(runc --root "$state" state controller | jq .pid)"
data=$tmp/data
for _ in $(seq 1 150); do
  [ -s "$data/addr" ] && break
  running controller
  sleep 0.2
done
[ -s "$data/addr" ] || { cat "$tmp/controller.log" >&2; fail "the controller wrote no address file in 30 s"; }
port=$(sed 's/.*://' "$data/addr")
say "controller: $(grep -m1 listening "$tmp/controller.log")"
for _ in $(seq 1 50); do
  curl -fsS --cacert "$tmp/ca/ca.pem" "https://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.2
done
ok=$(curl -fsS --cacert "$tmp/ca/ca.pem" --resolve "controller.tandem:$port:127.0.0.1" "https://controller.tandem:$port/healthz") \
  || fail "GET https://controller.tandem:$port/healthz failed"
[ "$ok" = ok ] || fail "/healthz answered ${ok@Q}, not ok"
say "curl --cacert ca.pem https://controller.tandem:$port/healthz: $ok"
token=$(runc --root "$state" exec controller /usr/bin/tandem token --join) || fail "tandem token --join in the container failed"
[ -n "$token" ] || fail "tandem token --join printed nothing"
cred=$(runc --root "$state" exec controller /usr/bin/tandem token --proxy edge1) || fail "tandem token --proxy in the container failed"
[ -n "$cred" ] || fail "tandem token --proxy printed nothing"
say "runc exec controller tandem token --join / --proxy edge1: a join token, a proxy credential"

# 3. An agent from the image, as the DaemonSet runs it, and a job of an ordinary user on it.
chmod 0711 "$tmp"
node=image-check-node
mkdir -m 0700 "$tmp/join" "$tmp/agent-data"
printf '%s\n' "$token" >"$tmp/join/$node"
# Every capability this shell has (privileged: true gives all the runtime has).
names=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE NET_BIND_SERVICE
  NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN
  SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE
  MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF CHECKPOINT_RESTORE)
bnd=$((16#$(awk '/^CapBnd/ {print $2}' /proc/self/status)))
caps=$(for i in "${!names[@]}"; do if (((bnd >> i) & 1)); then echo "CAP_${names[$i]}"; fi; done | jq -R . | jq -cs .)
# The host's directories the DaemonSet mounts (those this host has).
host_dirs=$(for d in /usr /bin /sbin /lib /lib64 /etc /home /opt /tmp /var/tmp; do [ -d "$d" ] && echo "$d"; done | jq -R . | jq -cs .)
bundle agent "$common"' | .process.args = $args | .process.user = {uid: 0, gid: 0}
  | .process.capabilities = {bounding: $caps, effective: $caps, permitted: $caps, inheritable: [], ambient: []}
  | .process.noNewPrivileges = false
  | .linux.namespaces = [{type: "ipc"}, {type: "mount"}]
  | del(.hostname, .linux.seccomp, .linux.maskedPaths, .linux.readonlyPaths)
  | .linux.resources.devices = [{allow: true, access: "rwm"}]
  | .mounts = ([.mounts[] | select(.destination | IN("/proc", "/dev/shm", "/dev/mqueue"))]
      + [{destination: "/dev", type: "bind", source: "/dev", options: ["rbind"]},
         {destination: "/sys", type: "bind", source: "/sys", options: ["rbind"]},
         {destination: "/sys/fs/cgroup", type: "bind", source: "/sys/fs/cgroup", options: ["rbind", "rw"]}]
      + [$dirs[] | {destination: ., type: "bind", source: ., options: (["rbind"] + (if IN("/home", "/tmp", "/var/tmp") then ["rw"] else ["ro"] end))}]
      + [{destination: "/var/lib/tandem-agent", type: "bind", source: $adata, options: ["rbind", "rw"]},
         {destination: "/tandem/ca/ca.pem", type: "bind", source: $ca, options: ["bind", "ro"]},
         {destination: "/tandem/join", type: "bind", source: $join, options: ["rbind", "ro"]}])' \
  --arg adata "$tmp/agent-data" --arg ca "$tmp/ca/ca.pem" --arg join "$tmp/join" --argjson env '[]' \
  --argjson caps "$caps" --argjson dirs "$host_dirs" \
  --argjson args "$(jq -cn --arg s "https://127.0.0.1:$port" --arg n "$node" '["/tandem/bin/tandem", "agent", "--server", $s,
    "--ca", "/tandem/ca/ca.pem", "--name", $n, "--join-token-file", ("/tandem/join/" + $n), "--data", "/var/lib/tandem-agent",
    "--cpus", "1", "--memory", "1G"]')"
start agent
apid=$(runc --root "$state" state agent | jq .pid)
[ -e "/proc/$apid" ] && [ "$(readlink "/proc/$apid/ns/pid")" = "$(readlink /proc/self/ns/pid)" ] \
  || fail "the agent (pid $apid) is not in the host's PID namespace"
say "agent started from the image: runc container, pid $apid, in the host's PID namespace"
export TANDEM_SERVER=unix://$data/tandem.sock
for _ in $(seq 1 150); do
  "$client" nodes -h -N -o '%N %t' 2>/dev/null | grep -q "^$node idle" && break
  running agent
  sleep 0.2
done
"$client" nodes -h -N -o '%N %t' | grep -q "^$node idle" || { cat "$tmp/agent.log" >&2; fail "node $node did not join"; }
say "node $node joined: $("$client" nodes -h -N -o '%N %t cpus=%c mem=%m')"
work=$tmp/work
mkdir "$work"
chown tandem-alice: "$work"
job=$(cd "$work" && setpriv --reuid tandem-alice --regid tandem-alice --init-groups "$client" submit --parsable -o out.txt \
  --wrap 'echo "user=$(id -un) pid1=$(cat /proc/1/comm) cgroup=$(grep -m1 :memory: /proc/self/cgroup | cut -d: -f3)"') \
  || fail "tandem-alice's sbatch failed"
for _ in $(seq 1 150); do
  [ -s "$work/out.txt" ] && break
  sleep 0.2
done
[ -s "$work/out.txt" ] || { cat "$tmp/agent.log" >&2; fail "job $job left no output in 30 s"; }
line=$(cat "$work/out.txt")
say "job $job of tandem-alice: $line"
case $line in "user=tandem-alice pid1=$(cat /proc/1/comm) "*) ;; *) fail "job $job did not run as tandem-alice in the host's PID namespace" ;; esac
if grep -q ':memory:/.' /proc/self/cgroup; then
  case $line in *"/tandem-$node-"*/job_*) ;; *) fail "job $job is not in a job cgroup of the agent's memory hierarchy" ;; esac
fi
[ "$(stat -c %U "$work/out.txt")" = tandem-alice ] || fail "the output file is not tandem-alice's"

# 4. The proxy, as its Deployment runs it.
mkdir -m 0755 "$tmp/proxy-secret"
printf '%s\n' "$cred" >"$tmp/proxy-secret/credential"
chown 0:65532 "$tmp/proxy-secret/credential"
chmod 0440 "$tmp/proxy-secret/credential"
pport=$((20000 + RANDOM % 20000))
bundle proxy "$common | $confined"' | .process.args = $args | .process.user = {uid: 65532, gid: 65532}
  | .mounts += [{destination: "/tandem/ca/ca.pem", type: "bind", source: $ca, options: ["bind", "ro"]},
      {destination: "/tandem/proxy", type: "bind", source: $secret, options: ["rbind", "ro"]}]
  | .linux.namespaces = [.linux.namespaces[] | select(.type != "network")]' \
  --arg ca "$tmp/ca/ca.pem" --arg secret "$tmp/proxy-secret" --argjson env '[]' \
  --argjson args "$(jq -cn --arg l "127.0.0.1:$pport" --arg s "https://127.0.0.1:$port" '["/usr/bin/tandem", "proxy", "--listen", $l,
    "--server", $s, "--ca", "/tandem/ca/ca.pem", "--credential-file", "/tandem/proxy/credential"]')"
start proxy
for _ in $(seq 1 50); do
  curl -fsS "http://127.0.0.1:$pport/_tandem/healthz" >/dev/null 2>&1 && break
  running proxy
  sleep 0.2
done
ok=$(curl -fsS "http://127.0.0.1:$pport/_tandem/healthz") || { cat "$tmp/proxy.log" >&2; fail "the proxy's /_tandem/healthz failed"; }
[ "$ok" = ok ] || fail "the proxy's /_tandem/healthz answered ${ok@Q}, not ok"
sleep 1
running proxy
say "proxy (uid 65532) from the image: curl http://127.0.0.1:$pport/_tandem/healthz: $ok"
say "passed"
