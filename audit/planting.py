"""What the planted-leak scripts share (plant_gpu_leak.py for the Exact kernels, plant_tc_leak.py
for the TensorCore ones): put data-dependent shortcuts into a copy of a shipped kernel source,
compile it exactly as the shipped build does, and write a folder the crate's test-only override
reads (`DETATTN_TEST_CUBIN_DIR`). Under the override *every* cubin comes from that folder and a
missing one is an error (src/cuda/cubins.rs), so the other shipped cubins of the architecture are
copied beside the leaky one, unchanged; the manifest covers them all. Nothing here is shipped."""
import hashlib
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "kernels"))
import build  # noqa: E402  (kernels/build.py: the pinned NVRTC and its options)


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def build_leaky(tool, stem, plants, out, arch):
    """Plant every (shipped text, leaky text) of `plants` into kernels/<stem>.cu (each must occur;
    every occurrence is replaced), compile for `arch` with the shipped program name and options
    (so only the planted lines differ), and write into `out`: <stem>.<arch>.cubin with its compact
    listing (.sass) and resource usage (.res.txt) for the SASS audit, copies of the other shipped
    cubins of `arch`, and manifest.json. Must run with the repository root as the working
    directory. Returns the leaky cubin's SHA-256."""
    src = Path(f"kernels/{stem}.cu").read_text()
    for old, new in plants:
        n = src.count(old)
        if n == 0:
            sys.exit(f"{tool}: the text is not in kernels/{stem}.cu:\n  {old}\n(the kernel changed: update PLANTS)")
        src = src.replace(old, new)
        line = next(x for x in new.splitlines() if "PLANTED" in x)
        print(f"{tool}: planted at {n} place(s): {line.split('//')[0].strip()[:80]}")
    build.ensure_toolchain()
    cubin, log = build.Nvrtc().compile(src.encode(), f"kernels/{stem}.cu", build.nvrtc_options(arch, stem))
    if cubin is None:
        sys.exit(f"{tool}: NVRTC failed:\n{log}")
    out.mkdir(parents=True, exist_ok=True)
    leaky = f"{stem}.{arch}.cubin"
    (out / leaky).write_bytes(cubin)
    manifest = [{"file": leaky, "arch": arch, "sha256": sha256(cubin), "size": len(cubin),
                 "note": "PLANTED LEAK, never shipped"}]
    for shipped in sorted(build.CUBIN_DIR.glob(f"*.{arch}.cubin")):
        if shipped.name == leaky:
            continue
        shutil.copyfile(shipped, out / shipped.name)
        data = shipped.read_bytes()
        manifest.append({"file": shipped.name, "arch": arch, "sha256": sha256(data), "size": len(data),
                         "note": f"copy of the shipped {shipped.as_posix()}"})
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    build.write_sums(out, manifest)
    (out / f"{stem}.{arch}.sass").write_text(build.compact_sass(build.cuobjdump("-sass", out / leaky)))
    (out / f"{stem}.{arch}.res.txt").write_text(build.cuobjdump("-res-usage", out / leaky))
    return sha256(cubin)
