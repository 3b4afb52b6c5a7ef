#!/usr/bin/env bash
# Install the pinned CUDA toolchain from PyPI into a venv at the repo root. No GPU and no system CUDA
# needed (docs/build.md records why these routes). See docs/build.md.
#
#   scripts/cuda-toolchain.sh           Route A -> .venv-cuda/   NVRTC 12.9 + headers, cuobjdump/nvdisasm 13.2
#   scripts/cuda-toolchain.sh --nvcc13  Route B -> .venv-nvcc13/ full nvcc 13.0: the second compiler (D7)
#
# Idempotent: the venv holds a stamp with the pin list it was built from; if it matches, nothing is
# done. If the pins change, the venv is rebuilt from scratch, so no stale package can survive.
# kernels/build.py runs this before every build, so it must stay a fast no-op.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

# Each wheel pinned by version AND by SHA-256 (x86_64 manylinux wheels): pip refuses anything else.
# Installed with --no-deps: these wheels declare loose dependencies (the nvcc wheel alone would pull
# the newest 13.x parts), and every package we need is listed here explicitly instead.
PINS_A='nvidia-cuda-nvrtc-cu12==12.9.86 --hash=sha256:210cf05005a447e29214e9ce50851e83fc5f4358df8b453155d5e1918094dcb4
nvidia-cuda-runtime-cu12==12.9.79 --hash=sha256:25bba2dfb01d48a9b59ca474a1ac43c6ebf7011f1b0b8cc44f54eb6ac48a96c3
nvidia-cuda-cccl-cu12==12.9.27 --hash=sha256:37869e17ce2e1ecec6eddf1927cca0f8c34e64fd848d40453df559091e2d7117
nvidia-cuda-cuobjdump==13.2.86 --hash=sha256:d332c2ffe78e703ca0a3894be927f83124244e2acf0d792b8c12b4362d44d837
nvidia-cuda-nvdisasm==13.2.86 --hash=sha256:53606e719ecae07a2335f95902d5a1393a0cc1c317499ee7ffcf628a44385f2c'

PINS_B='nvidia-cuda-nvcc==13.0.88 --hash=sha256:56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03
nvidia-cuda-crt==13.0.88 --hash=sha256:2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4
nvidia-cuda-runtime==13.0.96 --hash=sha256:7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548
nvidia-nvvm==13.0.88 --hash=sha256:c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0
nvidia-cuda-cccl==13.0.85 --hash=sha256:e0da7ad981f3a8aff08241b5bfc1af868742a63e2762f53a5171c492ef242649'

# install VENV PINS SELFTEST_ARGS...
install() {
  local venv=$1 pins=$2; shift 2
  local stamp=$venv/.detattn-pins
  if [ -x "$venv/bin/python" ] && [ -e "$venv/nvidia" ] && printf '%s\n' "$pins" | cmp -s - "$stamp"; then
    echo "cuda-toolchain: $venv is up to date (pins match $stamp)"
    return 0
  fi
  echo "cuda-toolchain: installing into $venv (fresh venv) with $("$PYTHON" --version 2>&1):"
  printf '%s\n' "$pins" | sed 's/ --hash.*//; s/^/  /'
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv" || { echo "cuda-toolchain: '$PYTHON -m venv' failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
  local req
  req=$venv/.detattn-requirements.txt   # pip -r needs a file; kept for reference
  printf '%s\n' "$pins" >"$req"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    --no-deps --only-binary=:all: --require-hashes -r "$req"

  # Verify: every pin installed at exactly its version, and no other nvidia-* package present.
  "$venv/bin/python" - "$req" <<'PY'
import sys, importlib.metadata as md
want = dict(l.split()[0].split("==") for l in open(sys.argv[1]) if l.strip())
have = {d.metadata["Name"].lower(): d.version for d in md.distributions()
        if d.metadata["Name"].lower().startswith("nvidia")}
if have != want:
    sys.exit(f"cuda-toolchain: installed {sorted(have.items())} != pinned {sorted(want.items())}")
print("cuda-toolchain: versions verified:", ", ".join(f"{k}=={v}" for k, v in sorted(have.items())))
PY

  # A fixed, Python-version-independent path to the packages: kernels/build.py passes include
  # folders as relative paths through this link (.venv-cuda/nvidia/...), so nothing in the
  # compiler options or the cubins depends on where the checkout lives or on lib/python3.X.
  local purelib
  purelib=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  ln -sfn "${purelib#"$PWD/$venv/"}/nvidia" "$venv/nvidia"

  # Prove the route compiles a cubin here before declaring it installed.
  "$PYTHON" kernels/build.py selftest "$@"
  printf '%s\n' "$pins" >"$stamp"
  echo "cuda-toolchain: $venv ready"
}

case "${1:-}" in
  "") install .venv-cuda "$PINS_A" ;;
  --nvcc13) install .venv-nvcc13 "$PINS_B" --nvcc13 ;;
  *) echo "usage: $0 [--nvcc13]" >&2; exit 2 ;;
esac
