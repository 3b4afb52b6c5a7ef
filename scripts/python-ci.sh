#!/usr/bin/env bash
# What CI runs for the Python package (no GPU): build the wheel from this repository, install it
# into a fresh venv (python/.venv-ci), and run the pytest suite on the CPU with NumPy inputs. The
# tests compare digests with the Rust CLI, built here first (cargo reuses the Rust steps' build).
# Everything it writes is under python/ (git-ignored) and target/; pip caches nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=python/.venv-ci
rm -rf "$VENV"
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

# The extension crate's formatting and lints (python/ is a workspace of its own: the root steps
# do not see it).
cargo fmt --check --manifest-path python/Cargo.toml
cargo clippy --release --locked --manifest-path python/Cargo.toml -- -D warnings
scripts/python-setup.sh "$VENV"
"$VENV/bin/python" -m pip install -q -r python/requirements-test.txt
cargo build --release --bin detattn
export DETATTN_CLI=$PWD/target/release/detattn
# pytest's script (not `python -m pytest`, which would put python/ and its source tree detattn/,
# without the extension, first on sys.path): the tests import the installed wheel.
# `-p no:cacheprovider` keeps pytest from writing a cache.
"$VENV/bin/pytest" -q -p no:cacheprovider python/tests
# The self-test through the package, as the README runs it: it must pass (no GPU here: the CPU).
(cd / && "$ROOT/$VENV/bin/python" -c 'import detattn, sys; r = detattn.selftest("cpu"); print(r); sys.exit(0 if r else 1)')
