#!/usr/bin/env python3
"""Build, check and disassemble the CUDA kernels with the pinned toolchain (docs/build.md).

    python3 kernels/build.py build               kernels/*.cu -> kernels/cubin/<stem>.<arch>.cubin + manifest.json
    python3 kernels/build.py check               rebuild in a temp dir, compare byte for byte (CI)
    python3 kernels/build.py sass [--check]      cuobjdump listings of the cubins -> audit/sass/
    python3 kernels/build.py nvcc13 [--out DIR]  same sources with nvcc 13.0, the second compiler (D7)
    python3 kernels/build.py selftest [--nvcc13] compile a small kernel (run by scripts/cuda-toolchain.sh)

Python 3 standard library only; NVRTC is called through ctypes. Files whose name starts with `_`
are not built. Reproducibility rests on three things: pinned wheels (scripts/cuda-toolchain.sh),
options that embed no path or time (no -G/-lineinfo), and include folders passed as paths relative
to the repo root, so the cubins, the manifest and the listings are the same bytes in any checkout.
"""

import argparse
import ctypes
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Everything below is relative to ROOT (main() chdirs there): relative paths are what make the
# options recorded in the manifest, and any __FILE__ the compiler sees, independent of the checkout.
KERNELS = Path("kernels")
CUBIN_DIR = KERNELS / "cubin"
MANIFEST = CUBIN_DIR / "manifest.json"
SASS_DIR = Path("audit/sass")
NV_A = Path(".venv-cuda/nvidia")  # Route A (link made by scripts/cuda-toolchain.sh)
NV_B = Path(".venv-nvcc13/nvidia")  # Route B
CUOBJDUMP = NV_A / "cu13/bin/cuobjdump"
NVCC13 = NV_B / "cu13/bin/nvcc"

ARCHS = ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]
NVCC13_ARCHS = ["sm_80", "sm_90"]
# IEEE float semantics spelled out (these are NVRTC's defaults except --fmad): no contraction of
# a*b+c into an FMA, no flush of subnormals, correctly rounded div/sqrt. Required by D6/D7.
FLOAT_OPTS = ["--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true"]
INCLUDES = [f"-I{KERNELS}", f"-I{NV_A}/cuda_runtime/include", f"-I{NV_A}/cuda_cccl/include"]


# The target a source is compiled for on an architecture: the architecture itself, except the
# TensorCore kernels on sm_90, compiled for sm_90a (Hopper's wgmma: the D = 64 and 128 prefill
# kernels, docs/tensorcore.md). An sm_90a cubin runs on exactly the devices the sm_90 file is
# picked for (compute capability 9.0: H100, H200); the file keeps its sm_90 name.
TARGETS = {("tensorcore", "sm_90"): "sm_90a"}


def target(arch, stem=None):
    return TARGETS.get((stem, arch), arch)


def nvrtc_options(arch, stem=None):
    return [f"-arch={target(arch, stem)}", *FLOAT_OPTS, "-std=c++17", *INCLUDES]


def nvcc13_options(arch, stem=None):
    # nvcc finds its own headers (cuda_fp16.h, cccl) through nvcc.profile next to it.
    return ["-cubin", f"-arch={target(arch, stem)}", "-O3", "-fmad=false", "-ftz=false", "-prec-div=true",
            "-prec-sqrt=true", "-std=c++17", f"-I{KERNELS}"]


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def sources():
    return sorted(p for p in KERNELS.glob("*.cu") if not p.name.startswith("_"))


def local_headers():
    """Project headers: NVRTC cannot tell which were included, so every one is hashed into the
    manifest, and a change to any of them marks the cubins stale."""
    found = [p for p in KERNELS.rglob("*") if p.suffix in (".h", ".cuh", ".hpp") and CUBIN_DIR not in p.parents]
    return {p.as_posix(): sha256(p.read_bytes()) for p in sorted(found)}


def ensure_toolchain(*flags):
    # Fast no-op when the venv matches the pins; installs (and self-tests) it otherwise.
    subprocess.run(["bash", "scripts/cuda-toolchain.sh", *flags], check=True, stdout=sys.stderr)


def dist_versions(nv_dir, names):
    """`name==version` of installed wheels, read from their .dist-info folder names."""
    out = []
    for name in names:
        hits = sorted(nv_dir.resolve().parent.glob(name.replace("-", "_") + "-*.dist-info"))
        if len(hits) != 1:
            sys.exit(f"build: expected one {name} in {nv_dir.parent}, found {len(hits)}")
        out.append(f"{name}=={hits[0].name[len(name) + 1:-len('.dist-info')]}")
    return out


# ---------------------------------------------------------------------------------------- NVRTC

class Nvrtc:
    """The few NVRTC calls we need, through ctypes."""

    def __init__(self):
        libdir = NV_A / "cuda_nvrtc/lib"
        # libnvrtc dlopens its builtins library by soname, and LD_LIBRARY_PATH would win over the
        # venv's copy. Loading it first by absolute path makes that dlopen reuse this one.
        builtins = [p for p in libdir.glob("libnvrtc-builtins.so.*") if ".alt." not in p.name]
        if len(builtins) != 1:
            sys.exit(f"build: expected one libnvrtc-builtins in {libdir}, found {builtins}")
        ctypes.CDLL(str(builtins[0].resolve()), mode=ctypes.RTLD_GLOBAL)
        self.lib = lib = ctypes.CDLL(str((libdir / "libnvrtc.so.12").resolve()))
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        self.version = f"{major.value}.{minor.value}"

    def _check(self, rc, what):
        if rc != 0:
            raise RuntimeError(f"{what}: {self.lib.nvrtcGetErrorString(rc).decode()}")

    def compile(self, src, name, options):
        """Compile one source to a cubin. Returns (cubin bytes or None, log text)."""
        lib, prog = self.lib, ctypes.c_void_p()
        self._check(lib.nvrtcCreateProgram(ctypes.byref(prog), src, name.encode(), 0, None, None),
                    "nvrtcCreateProgram")
        try:
            opts = [o.encode() for o in options]
            rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
            size = ctypes.c_size_t()
            self._check(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
            log = ctypes.create_string_buffer(size.value)
            self._check(lib.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
            log = log.value.decode(errors="replace")
            if rc != 0:
                return None, f"{lib.nvrtcGetErrorString(rc).decode()}\n{log}"
            self._check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
            cubin = ctypes.create_string_buffer(size.value)
            self._check(lib.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
            return cubin.raw, log
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


def write_sums(out_dir, entries):
    """SHA256SUMS beside the cubins (`<hex>  <file>`, as sha256sum writes it, sorted by file): the
    hashes the crate checks before it loads a cubin (src/cuda/cubins.rs). manifest.json says how
    each was built; this file is what the library reads."""
    lines = "".join(f"{e['sha256']}  {e['file']}\n" for e in sorted(entries, key=lambda e: e["file"]))
    (out_dir / "SHA256SUMS").write_text(lines)


def build_into(out_dir):
    """Compile every source for every arch into out_dir; return the manifest entries."""
    nvrtc = Nvrtc()
    toolchain = dist_versions(NV_A, ["nvidia-cuda-nvrtc-cu12", "nvidia-cuda-runtime-cu12", "nvidia-cuda-cccl-cu12"])
    headers = local_headers()
    jobs = [(src, arch) for src in sources() for arch in ARCHS]

    def one(job):
        src, arch = job
        # The program name is the repo-relative path: it is what __FILE__ says in the kernel.
        return nvrtc.compile(src.read_bytes(), src.as_posix(), nvrtc_options(arch, src.stem))

    # Separate NVRTC programs may be compiled concurrently; ctypes releases the GIL during calls.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(one, jobs))

    for (src, arch), (cubin, log) in zip(jobs, results):
        if log.strip():
            print(f"{'FAILED' if cubin is None else 'NVRTC log'} {src} {arch}:\n{log}", file=sys.stderr)
    if any(cubin is None for cubin, _ in results):
        sys.exit(1)  # before writing anything: a failed build leaves the committed files as they were

    entries = []
    for (src, arch), (cubin, _) in zip(jobs, results):
        file = f"{src.stem}.{arch}.cubin"
        (out_dir / file).write_bytes(cubin)
        entries.append({
            "file": file, "kernel_source": src.as_posix(), "source_sha256": sha256(src.read_bytes()),
            "headers": headers, "arch": arch, "sha256": sha256(cubin), "size": len(cubin),
            "compiler": "nvrtc", "compiler_version": nvrtc.version, "toolchain": toolchain,
            "options": nvrtc_options(arch, src.stem),
        })
    manifest = json.dumps(entries, indent=2, sort_keys=True) + "\n"
    (out_dir / "manifest.json").write_text(manifest)
    write_sums(out_dir, entries)
    return entries


def cmd_build(_args):
    ensure_toolchain()
    CUBIN_DIR.mkdir(parents=True, exist_ok=True)
    entries = build_into(CUBIN_DIR)
    keep = {e["file"] for e in entries}
    for old in CUBIN_DIR.glob("*.cubin"):  # cubins of deleted sources
        if old.name not in keep:
            print(f"removed stale {old}")
            old.unlink()
    for e in entries:
        print(f"{e['sha256']}  {CUBIN_DIR / e['file']}  ({e['size']} bytes)")
    print(f"built {len(entries)} cubins with NVRTC {entries[0]['compiler_version'] if entries else '-'}; "
          f"wrote {MANIFEST}")


def cmd_check(_args):
    if not sources() and not MANIFEST.exists() and not list(CUBIN_DIR.glob("*.cubin")):
        print("check: no kernels/*.cu and no committed cubins yet; nothing to compare")
        return
    ensure_toolchain()
    bad = 0
    # A source or header edited without a rebuild: say so plainly before the byte comparison.
    committed = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else []
    headers = local_headers()
    for e in committed:
        src = Path(e["kernel_source"])
        if not src.exists() or sha256(src.read_bytes()) != e["source_sha256"] or e.get("headers") != headers:
            print(f"STALE   {e['file']}: {src} or a header changed since it was built; run `python3 kernels/build.py build`")
            bad += 1
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        entries = build_into(tmp)
        fresh = {e["file"] for e in entries} | {"manifest.json", "SHA256SUMS"}
        for name in sorted(fresh):
            mine = CUBIN_DIR / name
            status = "OK" if mine.exists() and mine.read_bytes() == (tmp / name).read_bytes() else \
                "DIFFER" if mine.exists() else "MISSING"
            bad += status != "OK"
            print(f"{status:7} {mine}")
        for extra in sorted(CUBIN_DIR.glob("*.cubin")):
            if extra.name not in fresh:
                print(f"EXTRA   {extra} (no source builds it)")
                bad += 1
    print(f"check: {len(entries)} cubins rebuilt, {bad} problem(s)")
    sys.exit(1 if bad else 0)


# ---------------------------------------------------------------------------------------- SASS

def cuobjdump(flag, cubin):
    """One cuobjdump listing as deterministic text."""
    # Run in the cubin's folder on its bare name, so no path can appear in the listing; fixed locale;
    # nvdisasm (called by cuobjdump) is found next to it.
    env = {"PATH": f"{CUOBJDUMP.parent.resolve()}:/usr/bin:/bin", "LC_ALL": "C"}
    p = subprocess.run([str(CUOBJDUMP.resolve()), flag, cubin.name], cwd=cubin.parent,
                       env=env, capture_output=True, text=True)
    # nvdisasm always warns "Disassembling Std Elf to Old format ..."; anything else is worth seeing.
    noise = [l for l in p.stderr.splitlines() if l.strip() and "switching to Old format" not in l]
    if p.returncode != 0 or noise:
        print(f"cuobjdump {flag} {cubin}: rc {p.returncode}\n" + "\n".join(noise), file=sys.stderr)
        if p.returncode != 0:
            sys.exit(1)
    text = p.stdout.rstrip("\n") + "\n"
    for leak in (str(ROOT), str(cubin.parent.resolve()), tempfile.gettempdir() + "/"):
        if leak in text:
            sys.exit(f"cuobjdump {flag} {cubin}: listing contains the path {leak!r}")
    return text


def compact_sass(text):
    """The listing without the 64-bit encoding comments and the column padding. cuobjdump prints
    every instruction's two encoding words after it; they carry scheduling bits that no audit rule
    reads, and dropping them and the padding makes the listings ~5x smaller (the unrolled kernels
    gave 7-13 MB per cubin, over the size that can travel to the GPU machine) while every
    instruction, address, predicate and operand stays as cuobjdump wrote it."""
    text = re.sub(r"[ \t]*/\* 0x[0-9a-f]{16} \*/", "", text)
    text = re.sub(r"\n[ \t]*(?=\n)", "", text)
    return re.sub(r"(?<=\S) {2,}", " ", text)


def write_listings(out_dir):
    written = []
    for cubin in sorted(CUBIN_DIR.glob("*.cubin")):
        stem = cubin.name[:-len(".cubin")]  # exact.sm_90
        for suffix, flag in ((".sass", "-sass"), (".res.txt", "-res-usage")):
            text = cuobjdump(flag, cubin)
            (out_dir / (stem + suffix)).write_text(compact_sass(text) if flag == "-sass" else text)
            written.append(stem + suffix)
    return written


def cmd_sass(args):
    ensure_toolchain()
    if not args.check:
        SASS_DIR.mkdir(parents=True, exist_ok=True)
        written = write_listings(SASS_DIR)
        for old in sorted(SASS_DIR.glob("*")):
            if old.name.endswith((".sass", ".res.txt")) and old.name not in written:
                print(f"removed stale {old}")
                old.unlink()
        print(f"wrote {len(written)} listings to {SASS_DIR}/")
        return
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        written = write_listings(tmp)
        for name in written:
            mine, new = SASS_DIR / name, (tmp / name).read_text()
            if not mine.exists():
                print(f"MISSING {mine}")
            elif mine.read_text() != new:
                print(f"DIFFER  {mine}")
                diff = difflib.unified_diff(mine.read_text().splitlines(), new.splitlines(),
                                            str(mine), "regenerated", lineterm="")
                print("\n".join(list(diff)[:60]))
            else:
                print(f"OK      {mine}")
                continue
            bad += 1
        for extra in sorted(SASS_DIR.glob("*")):
            if extra.name.endswith((".sass", ".res.txt")) and extra.name not in written:
                print(f"EXTRA   {extra} (no cubin)")
                bad += 1
    print(f"sass --check: {len(written)} listings, {bad} problem(s)"
          + ("; run `python3 kernels/build.py sass` and review the diff" if bad else ""))
    sys.exit(1 if bad else 0)


# ---------------------------------------------------------------------------------------- nvcc 13

def nvcc13_version():
    out = subprocess.run([str(NVCC13), "--version"], capture_output=True, text=True, check=True).stdout
    return re.search(r"V(\d+\.\d+\.\d+)", out).group(1)


def nvcc13_compile(src, arch, out):
    """nvcc 13.0 straight to a cubin; returns (ok, log). Needs the system gcc for preprocessing."""
    if not shutil.which("gcc"):
        sys.exit("build: nvcc needs the system gcc/g++ (Debian: apt-get install g++)")
    p = subprocess.run([str(NVCC13), *nvcc13_options(arch, Path(src).stem), "-o", str(out), str(src)],
                       capture_output=True, text=True)
    return p.returncode == 0, p.stdout + p.stderr


def cmd_nvcc13(args):
    ensure_toolchain("--nvcc13")
    # --out is relative to where the command was typed; the default to the repo root.
    out_dir = Path(args.invoked_from, args.out) if args.out else Path(".carry/cubin-nvcc13")
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.cubin"):
        old.unlink()
    version, entries = nvcc13_version(), []
    for src in sources():
        for arch in NVCC13_ARCHS:
            file = f"{src.stem}.{arch}.cubin"
            ok, log = nvcc13_compile(src, arch, out_dir / file)
            if not ok:
                sys.exit(f"FAILED {src} {arch} (nvcc {version}):\n{log}")
            cubin = (out_dir / file).read_bytes()
            entries.append({"file": file, "kernel_source": src.as_posix(),
                            "source_sha256": sha256(src.read_bytes()), "arch": arch,
                            "sha256": sha256(cubin), "size": len(cubin), "compiler": "nvcc",
                            "compiler_version": version, "options": nvcc13_options(arch, src.stem)})
            print(f"{sha256(cubin)}  {out_dir / file}  ({len(cubin)} bytes)")
    (out_dir / "manifest.json").write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n")
    write_sums(out_dir, entries)
    print(f"built {len(entries)} cubins with nvcc {version} into {out_dir}/")


# ---------------------------------------------------------------------------------------- selftest

SELFTEST_SRC = b"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void k(float* o, const float* a, const __half* h, const __nv_bfloat16* b) {
    unsigned i = threadIdx.x;
    o[i] = __fmaf_rn(a[i], 2.0f, 1.0f) + __half2float(h[i]) + __bfloat162float(b[i]);
}
"""


def cmd_selftest(args):
    """Prove the installed route compiles a cubin (with the fp16/bf16 headers) reproducibly.
    Never installs anything: scripts/cuda-toolchain.sh calls this before writing its stamp."""
    if args.nvcc13:
        hashes = []
        for _ in range(2):  # two different temp folders: the cubin must not depend on the path
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp) / "selftest.cu"
                src.write_bytes(SELFTEST_SRC)
                ok, log = nvcc13_compile(src, "sm_90", Path(tmp) / "k.cubin")
                if not ok:
                    sys.exit(f"selftest: nvcc failed:\n{log}")
                hashes.append(sha256((Path(tmp) / "k.cubin").read_bytes()))
        if hashes[0] != hashes[1]:
            sys.exit(f"selftest: nvcc gave different cubins {hashes}")
        print(f"selftest: nvcc {nvcc13_version()} sm_90 cubin {hashes[0]} (identical from two folders)")
        return
    nvrtc = Nvrtc()
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ARCHS:
            a, log = nvrtc.compile(SELFTEST_SRC, "selftest.cu", nvrtc_options(arch))
            b, _ = nvrtc.compile(SELFTEST_SRC, "selftest.cu", nvrtc_options(arch))
            if a is None:
                sys.exit(f"selftest: NVRTC {arch} failed:\n{log}")
            if a != b:
                sys.exit(f"selftest: NVRTC {arch} gave two different cubins")
            print(f"selftest: NVRTC {nvrtc.version} {arch} cubin {sha256(a)} (identical twice)")
        cubin = Path(tmp) / "k.sm_90.cubin"
        cubin.write_bytes(a)
        sass = cuobjdump("-sass", cubin)
        if "FFMA" not in sass:
            sys.exit("selftest: cuobjdump listing has no FFMA:\n" + sass)
        print(f"selftest: cuobjdump -sass ok ({len(sass.splitlines())} lines)")


def main():
    invoked_from = Path.cwd()
    os.chdir(ROOT)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build", help="compile kernels/*.cu to kernels/cubin/ + manifest").set_defaults(fn=cmd_build)
    sub.add_parser("check", help="rebuild in a temp dir and compare with kernels/cubin/").set_defaults(fn=cmd_check)
    p = sub.add_parser("sass", help="write audit/sass/ listings (or --check them)")
    p.add_argument("--check", action="store_true")
    p.set_defaults(fn=cmd_sass)
    p = sub.add_parser("nvcc13", help="build with nvcc 13.0 for the compiler-independence test")
    p.add_argument("--out", help="output folder (default: .carry/cubin-nvcc13, git-ignored)")
    p.set_defaults(fn=cmd_nvcc13)
    p = sub.add_parser("selftest", help="compile a small kernel with the installed route")
    p.add_argument("--nvcc13", action="store_true")
    p.set_defaults(fn=cmd_selftest)
    args = ap.parse_args()
    args.invoked_from = invoked_from
    args.fn(args)


if __name__ == "__main__":
    main()
