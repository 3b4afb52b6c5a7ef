#!/usr/bin/env bash
# Run detattn's cargo-fuzz targets for a bounded time on the STABLE toolchain.
#
#   scripts/fuzz.sh TARGET|all SECONDS [JOBS_LOG_DIR]
#
# TARGET is api, cpu_exact or digest (fuzz/fuzz_targets/); `all` runs the three one after the
# other. Each runs for SECONDS (libFuzzer's -max_total_time) starting from the committed seed
# corpus fuzz/corpus/TARGET/ (read only) plus a working corpus fuzz/work/TARGET/ (ignored by git,
# kept between runs). A crash, a panic or a timeout (one input over 10 s) exits non-zero and leaves
# the input in fuzz/artifacts/TARGET/.
#
# Stable toolchain: cargo-fuzz's default AddressSanitizer needs `-Zsanitizer`, a nightly flag, so
# we build with `--sanitizer none`. The coverage instrumentation cargo-fuzz adds
# (`-Cpasses=sancov-module`, `-Cllvm-args=-sanitizer-coverage-*`) is made of stable flags, and
# cargo-fuzz still turns debug assertions and overflow checks on. What is lost is ASan's check of
# memory errors in `unsafe` code; detattn's only `unsafe` on the CPU path is the call of a
# `#[target_feature]` function after feature detection, which reads no memory of its own.
set -euo pipefail

CARGO_FUZZ_VERSION=0.13.2
cd "$(dirname "$0")/.."

usage() { echo "usage: $0 api|cpu_exact|digest|all SECONDS" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
target=$1
secs=$2
[[ $secs =~ ^[0-9]+$ ]] || usage
case $target in
  api|cpu_exact|digest) targets=("$target") ;;
  all) targets=(api cpu_exact digest) ;;
  *) usage ;;
esac

if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  echo "fuzz.sh: installing cargo-fuzz $CARGO_FUZZ_VERSION" >&2
  cargo install --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi

# One build for all targets (the first takes a few minutes: it instruments every dependency).
cargo fuzz build --sanitizer none --fuzz-dir fuzz

status=0
for t in "${targets[@]}"; do
  mkdir -p "fuzz/work/$t" "fuzz/corpus/$t"
  echo "fuzz.sh: $t for ${secs}s" >&2
  # The first corpus directory receives new inputs; the committed seeds stay untouched.
  if ! cargo fuzz run --sanitizer none --fuzz-dir fuzz "$t" "fuzz/work/$t" "fuzz/corpus/$t" -- \
      -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1; then
    echo "fuzz.sh: $t FAILED (input saved under fuzz/artifacts/$t/)" >&2
    status=1
  fi
done
exit $status
