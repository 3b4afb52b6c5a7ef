#!/bin/bash
# Session 10, call 9 (2026-11-29): what each torch operation the Python wrapper makes a call costs
# the host (20 000 of each on a CUDA tensor; µs each).
set -u
R=${OUT:?}; O=/tmp/o; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv > $O/gpu.txt; date -u >> $O/gpu.txt
cat > /tmp/ops.py <<'PY'
import time, torch
x = torch.randn(1, 1024, 8, 128, device="cuda", dtype=torch.bfloat16)
s = torch.cuda.current_stream()
def t(name, f, n=20000):
    for _ in range(200): f()
    t0 = time.perf_counter()
    for _ in range(n): f()
    print(f"{name:48s} {(time.perf_counter() - t0) / n * 1e6:7.2f} us")
t("x.device", lambda: x.device)
t("x.dtype / str(x.dtype)", lambda: str(x.dtype))
t("x.shape", lambda: x.shape)
t("x.stride()", lambda: x.stride())
t("x.data_ptr()", lambda: x.data_ptr())
t("x.requires_grad and torch.is_grad_enabled()", lambda: x.requires_grad and torch.is_grad_enabled())
t("torch.cuda.current_stream(x.device)", lambda: torch.cuda.current_stream(x.device))
t("torch.cuda.current_stream()", lambda: torch.cuda.current_stream())
t("stream.cuda_stream", lambda: s.cuda_stream)
t("x.record_stream(s)", lambda: x.record_stream(s))
t("torch.cuda.current_device()", lambda: torch.cuda.current_device())
def dev():
    with torch.cuda.device(0):
        pass
t("with torch.cuda.device(0): pass", dev)
t("torch.empty((1,1,32,128), bf16, cuda)", lambda: torch.empty((1, 1, 32, 128), device="cuda", dtype=torch.bfloat16))
t("torch.empty(..., device=x.device)", lambda: torch.empty((1, 1, 32, 128), device=x.device, dtype=x.dtype))
PY
python3 /tmp/ops.py > $O/ops.txt 2>&1
cd /tmp && tar czf $R/logs.tar.gz o
cat $O/ops.txt
