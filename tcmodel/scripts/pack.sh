#!/bin/bash
# Build everything the GPU command of docs/tensorcore-cpu-model.md needs and pack it into the carry folder of the
# checkout the device tool sends (default /work/main/.carry-h14; it must be git-ignored there).
#   bash tcmodel/scripts/pack.sh [CARRY_DIR]
# Then, with the device tool: carry [".carry-h14"], command "bash .carry-h14/go.sh".
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CARRY=${1:-/work/main/.carry-h14}
cd "$ROOT"
python3 tcmodel/scripts/build_probe.py
python3 tcmodel/scripts/build_variants.py
cargo build --release --features test-override --target-dir target/override --bin detattn
(cd tcmodel && cargo build --release --bin tcharness)
S=$(mktemp -d)
cp target/override/release/detattn tcmodel/target/release/tcharness tcmodel/target/cubin/probe.sm_90a.cubin "$S/"
mkdir -p "$S/base"
cp kernels/cubin/tensorcore.sm_90.cubin kernels/cubin/SHA256SUMS "$S/base/"
for v in v1 v2 v3; do
  mkdir -p "$S/$v"
  cp tcmodel/target/variants/$v/{tensorcore.sm_90.cubin,exact.sm_90.cubin,SHA256SUMS,manifest.json} "$S/$v/"
done
mkdir -p "$CARRY"
tar -C "$S" -cJf "$CARRY/bundle.tar.xz" .
cp tcmodel/scripts/go.sh "$CARRY/go.sh"
rm -rf "$S"
git -C "$ROOT" rev-parse HEAD > "$CARRY/COMMIT"
ls -la "$CARRY"
du -sh "$CARRY"
