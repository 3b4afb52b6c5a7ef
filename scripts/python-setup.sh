#!/usr/bin/env bash
# Build the detattn Python package from this repository and install it into a virtual environment.
#   scripts/python-setup.sh [VENV]        (default: python/.venv; git-ignored)
# Needs Rust (as for the crate) and CPython >= 3.9 with venv (python3, or $PYTHON). No CUDA
# toolkit: the wheel embeds the verified cubins of kernels/cubin and loads the CUDA driver at run
# time, if there is one. Pinned tools (python/requirements-build.txt); pip caches nothing.
# Afterwards: VENV/bin/python -c "import detattn; print(detattn.selftest())"
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-python/.venv}
PYTHON=${PYTHON:-python3}
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q -r python/requirements-build.txt
# One abi3 wheel (CPython >= 3.9) into python/dist, built in python/target (both git-ignored).
rm -rf python/dist
# (The per-crate lines are dropped from the log; a failing build still fails the script: pipefail.)
(cd python && "../$VENV/bin/maturin" build --release --locked -o dist 2>&1 \
    | sed -E '/^ +(Compiling|Downloaded|Downloading) /d')
WHEEL=$(ls python/dist/detattn-*-abi3-*.whl)
"$VENV/bin/python" -m pip install -q --force-reinstall --no-deps "$WHEEL"
# The wheel's import check, away from the source tree (whose detattn/ has no extension in it).
ROOT=$PWD
(cd / && "$ROOT/$VENV/bin/python" -c 'import detattn; print("installed detattn", detattn.__version__, "from", detattn.__file__)')
echo "wheel: $WHEEL ($(du -h "$WHEEL" | cut -f1))"
