#!/usr/bin/env bash
# Tandem's own image (README, "Tandem's own image"): an OCI image layout holding the `tandem`
# binary, built from scratch and reproducibly (two builds of one commit, in any directories,
# give one digest).
#
#   scripts/image.sh [--build] [--out DIR] [--tag TAG] [--push DEST] [BINARY]
#
# BINARY (default target/release/tandem) goes in as /tandem/bin/tandem, with /usr/bin/tandem a
# link to it (the entrypoint; the agent's DaemonSet, which mounts the host's /usr, runs the
# first), beside exactly the shared libraries `ldd` names (at the paths it names them by, the
# loader included), minimal /etc/passwd, /etc/group and /etc/nsswitch.conf (root, and the user
# `tandem`, 65532, which the proxy runs as), the build host's CA bundle
# (/etc/ssl/certs/ca-certificates.crt: registries' certificates, for the agent) and /tmp.
#
# Reproducible: the layer is GNU tar's (sorted names, every mtime SOURCE_DATE_EPOCH, owner
# 0:0, no atime/ctime) through `gzip -n`, and the config, manifest and index are written here
# with sorted keys, `created` being SOURCE_DATE_EPOCH (default: the commit's time, `git log -1
# --format=%ct`). Nothing of the build directory, the clock or the user goes in. The image is
# as reproducible as its inputs: the binary, and the libraries and CA bundle of the build host.
# Its label org.opencontainers.image.revision is this checkout's HEAD: give a binary built from
# that commit (or --build).
#
# --build   build BINARY first: `cargo build --release --locked -p tandem` into
#           target/image-build, with RUSTFLAGS=--remap-path-prefix=$ROOT=/build (and the cargo
#           home's to /cargo), which the workspace does not set by itself: without it the binary
#           holds the checkout's path (line tables, panic locations), so two clones in different
#           directories give two binaries.
# --out     the layout's directory (default target/image; replaced)
# --tag     its tag (default: the binary's version, `tandem --version`)
# --push    then copy it with skopeo to DEST (docker://REGISTRY/tandem:TAG, or REGISTRY/tandem:TAG),
#           digests kept; SKOPEO_FLAGS adds flags (e.g. --dest-tls-verify=false, --dest-creds=U:P)
#
# Prints the manifest's digest (sha256:...) on stdout, the rest on stderr. Needs GNU tar, gzip,
# sha256sum, jq and ldd; skopeo for --push. The check that the image runs (the controller
# answers /healthz under runc) and that two clones give one digest: scripts/image-check.sh.
set -euo pipefail
export LC_ALL=C
root=$(cd "$(dirname "$0")/.." && pwd)
build=0 out=$root/target/image tag= push= bin=
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=1 ;;
    --out) out=$2; shift ;;
    --tag) tag=$2; shift ;;
    --push) push=$2; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "image.sh: unknown option $1 (--help)" >&2; exit 2 ;;
    *) bin=$1 ;;
  esac
  shift
done
say() { echo "image.sh: $*" >&2; }
for t in tar gzip sha256sum jq ldd od; do
  command -v "$t" >/dev/null || { say "$t is missing"; exit 1; }
done
tar --version | head -1 | grep -q 'GNU tar' || { say "GNU tar is needed (--sort=name)"; exit 1; }
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(git -C "$root" log -1 --format=%ct)
fi
export SOURCE_DATE_EPOCH
revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)

if [ "$build" = 1 ]; then
  [ -z "$bin" ] || { say "--build builds its own binary: give no BINARY"; exit 2; }
  cargo_home=${CARGO_HOME:-$HOME/.cargo}
  say "building with --remap-path-prefix (target/image-build)"
  (cd "$root" && CARGO_TARGET_DIR=$root/target/image-build \
    RUSTFLAGS="${RUSTFLAGS:-} --remap-path-prefix=$root=/build --remap-path-prefix=$cargo_home=/cargo" \
    cargo build --release --locked -p tandem --bin tandem >&2)
  bin=$root/target/image-build/release/tandem
fi
bin=${bin:-$root/target/release/tandem}
[ -x "$bin" ] || { say "no binary at $bin (cargo build --release -p tandem, or --build)"; exit 1; }
version=$("$bin" --version | awk '{print $2}')
[ -n "$version" ] || { say "$bin --version printed no version"; exit 1; }
tag=${tag:-$version}
# The architecture, from the ELF header's e_machine.
case $(od -An -j18 -N2 -tu2 "$bin" | tr -d ' ') in
  62) arch=amd64 ;;
  183) arch=arm64 ;;
  *) say "$bin: not an x86-64 or aarch64 ELF binary"; exit 1 ;;
esac
ca=/etc/ssl/certs/ca-certificates.crt
[ -f "$ca" ] || { say "$ca is missing (apt-get install ca-certificates)"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
mkdir -p "$rootfs"/{tandem/bin,usr/bin,etc/ssl/certs,tmp}
install -m 0755 "$bin" "$rootfs/tandem/bin/tandem"
ln -s /tandem/bin/tandem "$rootfs/usr/bin/tandem"
# The libraries, at the paths ldd names (linux-vdso has none); a static binary has none.
libs=$(ldd "$bin" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u) || true
if [ -z "$libs" ] && ! ldd "$bin" 2>&1 | grep -q 'not a dynamic executable\|statically linked'; then
  say "ldd found no libraries for $bin"
  exit 1
fi
for l in $libs; do
  mkdir -p "$rootfs$(dirname "$l")"
  install -m 0755 "$(readlink -f "$l")" "$rootfs$l"
done
printf 'root:x:0:0:root:/root:/sbin/nologin\ntandem:x:65532:65532:tandem:/var/lib/tandem:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\ntandem:x:65532:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
install -m 0644 "$ca" "$rootfs$ca"
chmod 0644 "$rootfs"/etc/{passwd,group,nsswitch.conf}
find "$rootfs" -type d -exec chmod 0755 {} +
chmod 1777 "$rootfs/tmp"

blobs=$work/layout/blobs/sha256
mkdir -p "$blobs"
# A blob: stdin into blobs/sha256/DIGEST; prints "DIGEST SIZE".
blob() {
  cat >"$work/blob"
  local d s
  d=$(sha256sum "$work/blob" | cut -d' ' -f1)
  s=$(stat -c %s "$work/blob")
  mv "$work/blob" "$blobs/$d"
  echo "sha256:$d $s"
}
(cd "$rootfs" && find . -mindepth 1 -maxdepth 1 -printf '%P\n' | sort) >"$work/top"
tar --create --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
  --no-acls --no-xattrs --no-selinux -C "$rootfs" -f "$work/layer.tar" -T "$work/top"
diff_id=sha256:$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
read -r layer layer_size < <(gzip -n <"$work/layer.tar" | blob)

created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
# Sorted keys, no newline: the same bytes from any jq.
json() { jq -c -S -j -n "$@"; }
read -r config config_size < <(json --arg created "$created" --arg arch "$arch" --arg diff "$diff_id" \
  --arg version "$version" --arg revision "$revision" '{
    created: $created, architecture: $arch, os: "linux",
    config: {
      Entrypoint: ["/usr/bin/tandem"],
      Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
      WorkingDir: "/",
      Labels: {
        "org.opencontainers.image.title": "tandem",
        "org.opencontainers.image.description": "Tandem: the controller (tandem server), the agent (tandem agent) and the inference proxy (tandem proxy)",
        "org.opencontainers.image.version": $version,
        "org.opencontainers.image.revision": $revision,
        "org.opencontainers.image.created": $created,
        "org.opencontainers.image.licenses": "Apache-2.0"
      }
    },
    rootfs: {type: "layers", diff_ids: [$diff]},
    history: [{created: $created, created_by: "scripts/image.sh"}]
  }' | blob)
read -r manifest manifest_size < <(json --arg config "$config" --argjson config_size "$config_size" \
  --arg layer "$layer" --argjson layer_size "$layer_size" '{
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $config, size: $config_size},
    layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: $layer, size: $layer_size}]
  }' | blob)
json --arg manifest "$manifest" --argjson size "$manifest_size" --arg tag "$tag" '{
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.index.v1+json",
    manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $manifest, size: $size,
      annotations: {"org.opencontainers.image.ref.name": $tag}}]
  }' >"$work/layout/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"

rm -rf "$out"
mkdir -p "$(dirname "$out")"
mv "$work/layout" "$out"
say "oci:$out:$tag ($arch, $(echo "$libs" | wc -w) libraries, layer $layer_size bytes, SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH, revision $revision)"
if [ -n "$push" ]; then
  command -v skopeo >/dev/null || { say "skopeo is missing (apt-get install skopeo)"; exit 1; }
  case $push in docker://*) ;; *) push=docker://$push ;; esac
  # shellcheck disable=SC2086 # SKOPEO_FLAGS is a list of flags
  skopeo copy --preserve-digests ${SKOPEO_FLAGS:-} "oci:$out:$tag" "$push" >&2
  say "pushed to $push"
fi
echo "$manifest"
