#!/usr/bin/env bash
# Build what the GPU machine runs (it has no cargo) and pack it into .carry/ (git-ignored), the
# folder named in the device tool's `carry`, as one xz archive (.carry/bundle.tar.xz).
#
#   bin/            detattn, detattn-dudect: DEFAULT builds (they ignore DETATTN_TEST_CUBIN_DIR)
#   bin-override/   the same with the test-only feature `test-override` (planted leaks, D7)
#   tests/          the GPU test binaries (default build; tests/override.rs checks that a default
#                   build ignores the variable)
#   tests-override/ cuda_exact and cuda_tensorcore built with `test-override` (D7 runs the first on
#                   the nvcc 13.0 cubins; planted faults run the second)
#
#   cubin-*/        copies of the planted and nvcc 13 cubin folders, if built (below)
#
# Every binary embeds the same 12 cubins (~13 MB): one xz stream with a dictionary larger than
# the archive stores them once. scripts/gpu-session.sh unpacks it on the GPU machine; the device
# tool's carry is [".carry/bundle.tar.xz"].
#   scripts/carry.sh                 every GPU test binary
#   scripts/carry.sh cuda_exact ...  only the named test binaries
set -euo pipefail
WANT=" $* "
cd "$(dirname "$0")/.."
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/bin-override" "$STAGE/tests" "$STAGE/tests-override" .carry
GPU_TESTS="cuda_exact cuda_tensorcore cuda_layouts cuda_reliability cuda_kvcache override"

# `cargo test --no-run` prints the path of every test executable it built.
test_exes() {
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])
'
}

cargo build --release --bins
cp target/release/detattn target/release/detattn-dudect "$STAGE/bin/"
cargo test --release --no-run --message-format=json 2>/dev/null | test_exes | while read -r name exe; do
  case " $GPU_TESTS " in *" $name "*) ;; *) continue ;; esac
  if [ "$WANT" = "  " ] || [[ "$WANT" == *" $name "* ]]; then cp "$exe" "$STAGE/tests/$name"; fi
done

O="--features test-override --target-dir target/override"
cargo build --release --bins $O
cp target/override/release/detattn target/override/release/detattn-dudect "$STAGE/bin-override/"
cargo test --release --no-run --message-format=json $O --test cuda_exact --test cuda_tensorcore 2>/dev/null | test_exes \
  | while read -r name exe; do cp "$exe" "$STAGE/tests-override/$name"; done

# The planted and second-compiler cubin folders (.carry/cubin-*, made by audit/plant_*.py and
# `kernels/build.py nvcc13`) travel inside the archive too: each holds copies of shipped cubins
# that the binaries embed already, which the dictionary stores once (the device tool takes at most
# 64 MiB with the working tree). Carry only .carry/bundle.tar.xz.
EXTRA=()
for dir in .carry/cubin-*; do
  [ -d "$dir" ] || continue
  rm -rf "$STAGE/$(basename "$dir")"
  mkdir -p "$STAGE/$(basename "$dir")"
  cp "$dir"/*.cubin "$dir"/SHA256SUMS "$dir"/manifest.json "$STAGE/$(basename "$dir")/" 2>/dev/null
  EXTRA+=("$(basename "$dir")")
done
rm -rf .carry/bin .carry/bin-override .carry/tests .carry/tests-override
tar -C "$STAGE" -cf - bin bin-override tests tests-override "${EXTRA[@]}" \
  | xz -T1 --lzma2=preset=9,dict=256MiB > .carry/bundle.tar.xz
tar -tvJf .carry/bundle.tar.xz
du -sh .carry/bundle.tar.xz
