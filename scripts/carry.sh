#!/usr/bin/env bash
# Build what the GPU machine runs (it has no cargo) and put it in .carry/ (git-ignored), the folder
# named in the device tool's `carry`: the release CLI and the release test binaries.
#   scripts/carry.sh                 every test binary (about 50 MB: more than one call carries
#                                    beside the tree, whose limit is 64 MiB in all)
#   scripts/carry.sh cuda_exact ...  only the named test binaries
set -euo pipefail
WANT=" $* "
cd "$(dirname "$0")/.."
rm -rf .carry/bin .carry/tests
mkdir -p .carry/bin .carry/tests
cargo build --release --bins
cp target/release/detattn target/release/detattn-dudect .carry/bin/
# `cargo test --no-run` prints the path of every test executable it built.
cargo test --release --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])
' | while read -r name exe; do
  if [ "$WANT" = "  " ] || [[ "$WANT" == *" $name "* ]]; then cp "$exe" ".carry/tests/$name"; fi
done
ls -la .carry/bin .carry/tests
du -sh .carry
