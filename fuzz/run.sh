#!/usr/bin/env bash
# Fuzzes every target in fuzz/fuzz_targets for SECONDS_PER_TARGET seconds (default 60), one after
# the other, and prints per target: executions, corpus size and findings (crash, oom, timeout
# and leak files under fuzz/artifacts/TARGET/). Exits non-zero when a target found something.
#
#   fuzz/run.sh [SECONDS_PER_TARGET]
#
# Needs a C++ compiler (libFuzzer is C++) and cargo fuzz's nightly toolchain, or else stable with
# RUSTC_BOOTSTRAP=1; installs cargo-fuzz with `cargo install cargo-fuzz --locked` when missing.
# Under CI (CI set and not "false") the fuzzing of all targets together is capped at FUZZ_CI_BUDGET seconds
# (default 300). The corpus grows in fuzz/target/corpus/TARGET (not tracked), seeded from
# fuzz/corpus/TARGET and fuzz/regressions/TARGET. A finding: copy its file into
# fuzz/regressions/TARGET/ (the workspace's `cargo test` replays that directory), then fix it.
# Replay one by hand: cargo +nightly fuzz run -s none TARGET fuzz/artifacts/TARGET/crash-...
set -euo pipefail
cd "$(dirname "$0")"

secs=${1:-60}
if ! [[ $secs =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
  echo "usage: fuzz/run.sh [SECONDS_PER_TARGET] (a whole number of seconds, at least 1)" >&2
  exit 2
fi
# Sanitizer: none by default (the fuzzed crates forbid unsafe; ASan would halve the speed).
sanitizer=${FUZZ_SANITIZER:-none}
# A unit slower than this (seconds) is a finding (a hang); more memory than this (MiB) too.
unit_timeout=${FUZZ_TIMEOUT:-10}
rss_limit=${FUZZ_RSS_LIMIT_MB:-2048}

# cargo fuzz wants nightly; where there is none (a machine with one stable toolchain, as CI's),
# stable with RUSTC_BOOTSTRAP=1 builds the same targets (cargo fuzz's -Z flags; sanitizer none).
if cargo +nightly --version >/dev/null 2>&1; then
  tc=(+nightly)
else
  tc=()
  export RUSTC_BOOTSTRAP=1
  echo "fuzz/run.sh: no nightly toolchain; using $(cargo --version) with RUSTC_BOOTSTRAP=1"
fi
if ! command -v c++ >/dev/null 2>&1 && ! command -v clang++ >/dev/null 2>&1 && ! command -v g++ >/dev/null 2>&1; then
  echo "fuzz/run.sh: no C++ compiler (libFuzzer is C++); install g++ or clang" >&2
  exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi
cargo fuzz --version

mapfile -t targets < <(cargo "${tc[@]}" fuzz list)
if [ "${#targets[@]}" -eq 0 ]; then
  echo "fuzz/run.sh: no fuzz targets" >&2
  exit 1
fi
if [ -n "${CI:-}" ] && [ "${CI}" != "false" ]; then
  budget=${FUZZ_CI_BUDGET:-300}
  cap=$((budget / ${#targets[@]}))
  if [ "$secs" -gt "$cap" ]; then
    echo "fuzz/run.sh: CI: $secs s per target would exceed $budget s in all; fuzzing $cap s each"
    secs=$cap
  fi
fi

echo "== building ${#targets[@]} targets (sanitizer: $sanitizer)"
cargo "${tc[@]}" fuzz build -s "$sanitizer"

logs=target/fuzz-logs
mkdir -p "$logs"
summary=()
found=0
for t in "${targets[@]}"; do
  work=target/corpus/$t
  mkdir -p "$work" "artifacts/$t" corpus/"$t" regressions/"$t"
  before=$(find "artifacts/$t" -type f | sort)
  echo "== $t: $secs s"
  rc=0
  cargo "${tc[@]}" fuzz run -s "$sanitizer" "$t" "$work" "corpus/$t" "regressions/$t" -- \
    -max_total_time="$secs" -timeout="$unit_timeout" -rss_limit_mb="$rss_limit" -malloc_limit_mb="$rss_limit" \
    -print_final_stats=1 >"$logs/$t.log" 2>&1 || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$logs/$t.log" | grep -o '[0-9]*$' | tail -1 || true)
  corpus=$(find "$work" -type f | wc -l)
  new=$(comm -13 <(echo "$before") <(find "artifacts/$t" -type f \( -name 'crash-*' -o -name 'oom-*' -o -name 'timeout-*' -o -name 'leak-*' \) | sort) | sed '/^$/d' || true)
  n=$(printf '%s' "$new" | grep -c . || true)
  if [ "$rc" -ne 0 ] && [ "$n" -eq 0 ]; then
    # libFuzzer failed without leaving an input (a build or start-up error, or a crash outside
    # any input): count it, and show why.
    n=1
    new="(exit status $rc, no input file; see fuzz/$logs/$t.log)"
    tail -20 "$logs/$t.log" >&2
  fi
  summary+=("$(printf '%-14s %12s %8s %4s' "$t" "${execs:-?}" "$corpus" "$n")")
  if [ "$n" -gt 0 ]; then
    found=1
    echo "$t: findings:"
    printf '%s\n' "$new" | sed 's/^/  fuzz\//'
    grep -m1 -A8 -E 'panicked at|ERROR: libFuzzer|SUMMARY' "$logs/$t.log" | sed 's/^/  | /' || true
  fi
done

echo
printf '%-14s %12s %8s %4s\n' target executions corpus findings
printf '%s\n' "${summary[@]}"
echo "(logs: fuzz/$logs/)"
if [ "$found" -ne 0 ]; then
  echo "fuzz/run.sh: findings: copy each input into fuzz/regressions/TARGET/ and fix it" >&2
  exit 1
fi
