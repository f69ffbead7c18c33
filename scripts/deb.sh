#!/usr/bin/env bash
# Builds the Debian package from binaries already built (cargo-deb's `--no-build`: no second
# build): `bash scripts/deb.sh` packages target/release (after `cargo build --release -p
# tandem`); `bash scripts/deb.sh --debug` packages the test build in target/debug (what CI's
# package test installs). Prints the .deb's path. Needs cargo-deb (`cargo install cargo-deb
# --locked --version 3.8.0`; found on PATH or in target/tools/bin, where .ci/run installs it).
# The manual pages (`tandem manpages`) and completions (`tandem completion`) are generated
# into target/deb-extra from the binary being packaged, so they describe it exactly.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=release dir=release
case "${1:-}" in
--debug) profile=dev dir=debug ;;
"" | --release) ;;
*)
  echo "usage: scripts/deb.sh [--release|--debug]" >&2
  exit 2
  ;;
esac
target=${CARGO_TARGET_DIR:-target}
bin=$target/$dir/tandem
for b in "$bin" "$target/$dir/tandem-slurm"; do
  if [ ! -x "$b" ]; then
    echo "scripts/deb.sh: $b is missing: build it first (cargo build $([ $dir = release ] && echo --release) -p tandem)" >&2
    exit 1
  fi
done
cargo_deb=$(command -v cargo-deb || true)
[ -n "$cargo_deb" ] || cargo_deb=$target/tools/bin/cargo-deb
if [ ! -x "$cargo_deb" ]; then
  echo "scripts/deb.sh: cargo-deb is missing: cargo install cargo-deb --locked --version 3.8.0 --root $target/tools" >&2
  exit 1
fi
extra=target/deb-extra
rm -rf "$extra"
mkdir -p "$extra/completions"
"$bin" manpages "$extra/man" --slurm "$extra/slurm-man"
# Pages outside /usr/share/man are not compressed by cargo-deb; Debian's policy wants them so.
gzip -9n "$extra"/slurm-man/man1/*.1
"$bin" completion bash >"$extra/completions/tandem"
"$bin" completion zsh >"$extra/completions/_tandem"
"$bin" completion fish >"$extra/completions/tandem.fish"
mkdir -p "$target/debian"
out=$("$cargo_deb" -p tandem --no-build --profile "$profile" --fast --quiet -o "$target/debian")
echo "$out" | tail -n 1
