"""What a whole call costs a Python user, beside PyTorch's SDPA (a measurement aid; docs/perf.md,
"A whole call from Python"). `detattn bench` times the launches of a call with its buffers made once;
a user's call (`detattn.attention_with_kvcache`, `detattn.attention`) also checks the tensors,
allocates the call's scratch, uploads the key lengths and frees them again. This times, for each
decode shape, with CUDA events on torch's current stream:

  gpu1    one call a sample: event, call, event (median of --iters samples, --warmup first)
  stream  --burst calls back to back between two events, per call: what a serving loop gets when
          nothing else waits (max of the host's and the GPU's time a call)
  host    the host's wall time to return from those --burst calls, per call (no synchronisation
          inside the burst)

for detattn (both paths, `nonfinite="propagate"`: asynchronous; "reject" waits for its scan's
verdict, so every call synchronises) and for SDPA's cuDNN and flash backends. Inputs are seeded,
never zeros, four sets rotated.

    python3 scripts/py_call_cost.py [--iters 30] [--burst 200] [--json OUT]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import detattn
import gpu_compare  # scripts/: its event timing, one protocol for every table

SHAPES = {  # name: (B, Hq, Hkv, Skv, D)
    "dec1": (1, 32, 8, 32768, 128),
    "decode_b32": (32, 32, 8, 8192, 128),
    "small": (1, 32, 8, 1024, 128),
}


def timed(call, n_sets, A):
    """(gpu1 median µs, stream µs a call, host µs a call). gpu1 is gpu_compare.py's protocol (its
    `timed`, one launch a sample); the bursts time the host's return and the stream together."""
    gpu1 = gpu_compare.timed(call, n_sets, argparse.Namespace(warmup=A.warmup, iters=A.iters, per_sample=1))
    s = torch.cuda.current_stream()
    streams, hosts = [], []
    for r in range(3):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record(s)
        t0 = time.perf_counter()
        for i in range(A.burst):
            call(i % n_sets)
        t1 = time.perf_counter()
        b.record(s)
        b.synchronize()
        streams.append(a.elapsed_time(b) * 1000.0 / A.burst)
        hosts.append((t1 - t0) * 1e6 / A.burst)
    return gpu1, statistics.median(streams), statistics.median(hosts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--burst", type=int, default=200)
    ap.add_argument("--json")
    A = ap.parse_args()
    g = torch.Generator(device="cuda").manual_seed(7)
    rows = []
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, detattn {detattn.__version__}")
    print(f"{'shape':<11} {'call':<34} {'gpu1 us':>9} {'stream us':>10} {'host us':>9}")
    for name, (B, Hq, Hkv, S, D) in SHAPES.items():
        sets = []
        for _ in range(4):
            q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16, generator=g)
            k = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=g)
            v = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=g)
            sets.append((q, k, v))
        calls = {}  # label: (call, the SDPA backend to hold while timing it, or None)
        for path in ("tensorcore", "exact"):
            for pol in ("propagate", "reject"):
                calls[f"detattn {path} {pol}"] = (
                    lambda i, path=path, pol=pol: detattn.attention_with_kvcache(
                        sets[i][0], sets[i][1], sets[i][2], cache_seqlens=S, path=path, nonfinite=pol), None)
        # SDPA on the same tensors as [B, H, S, D] views (no copy), GQA through enable_gqa.
        views = [(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)) for q, k, v in sets]
        for be, label in ((SDPBackend.CUDNN_ATTENTION, "sdpa cudnn"), (SDPBackend.FLASH_ATTENTION, "sdpa flash")):
            calls[label] = (lambda i: F.scaled_dot_product_attention(*views[i], enable_gqa=True), be)
        for label, (call, be) in calls.items():
            try:
                if be is None:
                    gpu1, stream, host = timed(call, len(sets), A)
                else:
                    with sdpa_kernel([be]):
                        gpu1, stream, host = timed(call, len(sets), A)
                print(f"{name:<11} {label:<34} {gpu1:9.1f} {stream:10.1f} {host:9.1f}")
                rows.append(dict(shape=name, call=label, gpu1_us=gpu1, stream_us=stream, host_us=host))
            except Exception as e:  # noqa: BLE001  a backend that refuses the shape
                msg = str(e).strip().splitlines()
                print(f"{name:<11} {label:<34} refused: {msg[0][:80] if msg else type(e).__name__}")
        del sets, views
        torch.cuda.empty_cache()
    if A.json:
        with open(A.json, "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
