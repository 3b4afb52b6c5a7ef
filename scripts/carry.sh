#!/usr/bin/env bash
# Build what the GPU machine runs (it has no cargo) and pack it into .carry/ (git-ignored), the
# folder named in the device tool's `carry`: the release CLIs and the release test binaries, as
# one xz archive (.carry/bundle.tar.xz, about a tenth of the 60 MB they take unpacked: each holds
# the embedded cubins, and the device tool carries 64 MiB with the tree). On the GPU machine,
# scripts/gpu-session.sh unpacks it into .carry/bin and .carry/tests first.
#   scripts/carry.sh                 every test binary
#   scripts/carry.sh cuda_exact ...  only the named test binaries
set -euo pipefail
WANT=" $* "
cd "$(dirname "$0")/.."
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/tests" .carry
cargo build --release --bins
cp target/release/detattn target/release/detattn-dudect "$STAGE/bin/"
# `cargo test --no-run` prints the path of every test executable it built.
cargo test --release --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])
' | while read -r name exe; do
  if [ "$WANT" = "  " ] || [[ "$WANT" == *" $name "* ]]; then cp "$exe" "$STAGE/tests/$name"; fi
done
rm -rf .carry/bin .carry/tests
tar -C "$STAGE" -cJf .carry/bundle.tar.xz bin tests
tar -tvJf .carry/bundle.tar.xz
du -sh .carry/bundle.tar.xz
