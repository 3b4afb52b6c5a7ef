"""``detattn.selftest()``: every golden problem on every available backend and path, through this
package, against the golden digests compiled into the library. The logic mirrors
``src/bin/detattn/selftest.rs`` (``detattn selftest``): the ``exact`` path on the CPU and on every
supported GPU against ``golden/exact.txt``; the ``tensorcore`` path on every GPU against the file
recorded for its architecture, and where none is recorded its runs are reported NOT CHECKED (not
passed); a GPU that should open but does not is a failure; no GPU at all is a note.

What it adds to the CLI's check: the inputs come from this package's own generator
(:mod:`detattn.inputs`, written from the documented contract) and go through the package's own
entry point, so a pass also vouches for the generator, the descriptors and the digest binding.
On a GPU the inputs are torch CUDA tensors (the device entry point, on the current stream) when
a CUDA-enabled torch is installed; otherwise the library's own host route is used, and the
report says which.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from . import _native
from ._arrays import host_raw, wrap
from ._core import _call, _run, attention_varlen, attention_with_kvcache
from .inputs import generate, paginate


class SelftestReport:
    """The outcome. Truthy iff every checked case matched and nothing failed; ``str()`` is the
    printed report (failing cases, every engine's summary, and the PASSED/FAILED line)."""

    def __init__(self, ok, header, reports, notes, failures, gpus_checked, n_cases):
        self.ok = ok
        self.header = header
        self.reports = reports  # [{"backend", "description", "route", "cases": [{case, status, ...}]}]
        self.notes = notes
        self.failures = failures
        self.gpus_checked = gpus_checked
        self.n_cases = n_cases

    def __bool__(self):
        return self.ok

    def __str__(self):
        lines = list(self.header)
        for r in self.reports:
            for c in r["cases"]:
                if c["status"] in ("mismatch", "error"):
                    lines.append(f"  {r['backend']}: {c['case']} {c['status'].upper()}: {c.get('detail', '')}")
        lines.append("summary")
        w = max((len(r["backend"]) for r in self.reports), default=0)
        for r in self.reports:
            n_ok = sum(c["status"] == "ok" for c in r["cases"])
            unchecked = sum(c["status"] == "unchecked" for c in r["cases"])
            extra = f", {unchecked} NOT CHECKED (no digests recorded for this architecture)" if unchecked else ""
            lines.append(f"  {r['backend']:<{w}}  {n_ok}/{len(r['cases'])} OK{extra}  ({r['description']}; {r['route']})")
        gpus = f"{self.gpus_checked} GPU(s) checked" if self.gpus_checked else "no GPU checked, only the CPU"
        if self.ok:
            lines.append(
                f"selftest PASSED: {self.n_cases} golden problems on {len(self.reports)} engine(s); {gpus}"
            )
        else:
            bad = sum(c["status"] in ("mismatch", "error") for r in self.reports for c in r["cases"])
            lines.append(
                f"selftest FAILED: {bad} case run(s) did not match, {len(self.failures)} other failure(s); {gpus}"
            )
        return "\n".join(lines)

    __repr__ = __str__


def _golden_files():
    """(file, parsed dict or None, error or None) for every compiled-in golden file."""
    return _call(_native.golden_files)


def _expected(files, path, arch):
    for _, f, _ in files:
        if f is not None and f["path"] == path and (f["architecture"] == "any" or f["architecture"] == arch):
            return f
    return None


def _consistency(files, cases):
    """Every golden file parses and covers exactly the cases of its path."""
    out = []
    for file, f, err in files:
        if f is None:
            out.append(f"golden/{file} does not parse: {err}")
            continue
        runs_on = [c["name"] for c in cases if f["path"] == "exact" or c["tensorcore"]]
        names = [n for n, _ in f["digests"]]
        for n in names:
            if n not in runs_on:
                out.append(f"golden/{file} has a digest for {n}, which is not a golden case of the {f['path']} path")
        for n in runs_on:
            if n not in names:
                out.append(f"golden/{file} has no digest for {n}")
    return out


def _run_case(case, path, device, torch):
    """Digest of one golden case through the package on ``device`` (``"cpu"``: NumPy arrays;
    ``"cuda:N"``: torch CUDA tensors), its inputs from this package's generator."""
    x = generate(
        case["dims"],
        case["dtype"],
        case["seed"],
        amp=case["amp"],
        mask=case["mask"],
        blank_rows_every=case["blank_rows_every"],
    )
    tag = case["dtype"]
    if device == "cpu":

        def put(a):
            return host_raw(np.ascontiguousarray(a), tag)

        mask = x["mask"]
    else:

        def put(a):
            # bf16 travels as its bit patterns (NumPy has no bfloat16) and is viewed back on torch.
            t = torch.from_numpy(a.view(np.int16) if tag == "bf16" else a)
            t = t.view(torch.bfloat16) if tag == "bf16" else t
            return wrap(t.to(device), "tensor")

        mask = None if x["mask"] is None else torch.from_numpy(x["mask"]).to(device)
    q, k, v = (put(x[n]) for n in ("q", "k", "v"))
    cu = [[0, *np.cumsum(lens).tolist()] for lens in case["seqlens"]] if case["seqlens"] else None
    opts = dict(causal=case["causal"], causal_align=case["align"], scale=case["scale"], path=path)
    opts["return_lse"] = case["lse"]
    if case["page_size"]:
        # K and V in a paged cache in shuffled pages (the crate's `paginate`, so the pages are the
        # CLI's), through attention_with_kvcache: the block table as the caller's device holds it.
        b, skv = case["dims"][0], case["dims"][4]
        kp, vp, table = paginate(
            x["k"], x["v"], case["page_size"], case["seed"], kv_lens=case["kv_lens"], cu_seqlens_k=cu and cu[1]
        )
        opts["block_table"] = table if device == "cpu" else torch.from_numpy(table).to(device)
        opts["cache_seqlens"] = case["seqlens"][1] if cu else case["kv_lens"] or [skv] * b
        if cu:
            out = attention_with_kvcache(_packed(q), put(kp), put(vp), cu_seqlens_q=cu[0], **opts)
        else:
            out = attention_with_kvcache(_bshd(q), put(kp), put(vp), attn_mask=mask, **opts)
            if not case["lse"]:
                out = out.permute(0, 2, 1, 3) if device != "cpu" else out.transpose(0, 2, 1, 3)
    elif cu:
        # A packed batch: the [1, H, total, D] inputs seen as [total, H, D] (no copy), through
        # attention_varlen.
        out = attention_varlen(*(_packed(a) for a in (q, k, v)), cu[0], cu[1], **opts)
    else:
        out = _run(
            q,
            k,
            v,
            case["causal"],
            case["align"],
            case["scale"],
            mask,
            case["kv_lens"],
            "bhsd",
            path,
            "reject",
            None,
            case["lse"],
        )
    if cu:
        # The [total, Hq, D] output seen as [1, Hq, total, D] for the digest.
        if not case["lse"]:
            out = out[None].permute(0, 2, 1, 3) if device != "cpu" else out[None].transpose(0, 2, 1, 3)
        else:
            out = (None, out[1][None])
    b, hq, _, sq, _, d = case["dims"]
    if case["lse"]:
        # The case's digest is of the log-sum-exp, as the f32 tensor [B, Hq, Sq, 1].
        out, tag, d = out[1], "f32", 1
        out = out.reshape(b, hq, sq, 1)
    if device != "cpu":
        out = out.contiguous().cpu()
        if tag == "bf16":
            out = out.view(torch.int16).numpy()
        else:
            out = out.numpy()
    o = host_raw(out, tag)
    return _call(_native.digest, path, tag, [b, hq, sq, d], (o.ptr, o.extent(), *o.strides[:3]))


def _packed(a):
    """A contiguous ``[1, H, S, D]`` array's descriptor seen as ``[S, H, D]`` (the same memory)."""
    _, h, s, d = a.shape
    _, sh, ss, sd = a.strides
    return a.view((s, h, d), (ss, sh, sd))


def _bshd(a):
    """A ``[B, H, S, D]`` array's descriptor seen as ``[B, S, H, D]`` (the same memory)."""
    b, h, s, d = a.shape
    sb, sh, ss, sd = a.strides
    return a.view((b, s, h, d), (sb, ss, sh, sd))


def _torch_for_gpus():
    """torch, if it is installed with CUDA (the GPU route through device tensors); else None."""
    try:
        import torch  # noqa: PLC0415 (optional)
    except ImportError:
        return None
    try:
        return torch if torch.cuda.is_available() else None
    except Exception:  # a broken CUDA setup in torch: the native route still checks the GPU
        return None


def selftest(backend="all", *, verbose=False, file=None) -> SelftestReport:
    """Check every golden problem on the CPU and every supported GPU (``backend="all"``), the CPU
    only (``"cpu"``), every GPU (``"cuda"``) or one (``"cuda:N"``), through this package, against
    the recorded digests. Returns a :class:`SelftestReport` (truthy iff it passed; print it).
    ``verbose`` prints one line per case as it runs (to ``file``, default stderr)."""
    out = file or sys.stderr
    cases = _call(_native.golden_cases)
    files = _golden_files()
    failures = _consistency(files, cases)
    notes = []
    targets = []  # (label, path, device, description, arch, route)
    gpus_checked = 0
    if backend not in ("all", "cpu", "cuda") and not backend.startswith("cuda:"):
        raise ValueError(f"unknown backend {backend!r}: expected all, cpu, cuda or cuda:N")
    if backend in ("all", "cpu"):
        desc, _ = _call(_native.open_engine, "cpu", "exact")
        route = "NumPy arrays through detattn.attention (varlen: attention_varlen; paged: attention_with_kvcache)"
        targets.append(("cpu", "exact", "cpu", desc, "any", route))
    if backend != "cpu":
        probe = _call(_native.probe)
        want = None if backend in ("all", "cuda") else int(backend.split(":")[1])
        why = None
        if probe["driver"] is None:
            why = f"no CUDA driver: {probe['driver_error']}"
        elif not probe["devices"]:
            why = "the CUDA driver reports no GPU"
        if why:
            if backend == "all":
                notes.append(f"no GPU checked ({why}); only the CPU was checked")
            else:
                raise RuntimeError(f"no GPU to check: {why}")
        elif want is not None and not any(g["ordinal"] == want for g in probe["devices"]):
            raise RuntimeError(f"there is no GPU cuda:{want} ({len(probe['devices'])} found)")
        torch = _torch_for_gpus() if not why else None
        for g in [] if why else probe["devices"]:
            n = g["ordinal"]
            if want is not None and n != want:
                continue
            label = f"cuda:{n}"
            if not g["supported"]:
                msg = (
                    f"{label} {g['name']} is {g['arch']}, which has no embedded kernel (detattn ships "
                    f"{', '.join(probe['archs'])}): not checked"
                )
                if want is not None:
                    raise RuntimeError(msg)
                notes.append(msg)
                continue
            opened = False
            for path in ("exact", "tensorcore"):
                try:
                    desc, arch = _call(_native.open_engine, label, path)
                except (RuntimeError, ValueError) as e:
                    failures.append(f"{label} {g['name']}: the {path} path could not be opened: {e}")
                    continue
                opened = True
                use_torch = torch is not None and n < torch.cuda.device_count()
                route = (
                    "torch CUDA tensors through detattn.attention (varlen: attention_varlen; paged: "
                    "attention_with_kvcache), on the current stream"
                    if use_torch
                    else "the library's host route (no CUDA-enabled torch installed)"
                )
                lbl = label if path == "exact" else f"{label} tc"
                targets.append((lbl, path, f"cuda:{n}" if use_torch else None, desc, arch, route))
            gpus_checked += int(opened)
    header = [
        f"detattn {_native.VERSION} selftest (Python package): {len(cases)} golden problems "
        f"(numerics contract v{_native.CONTRACT_VERSION}); the exact path on every backend, the "
        "tensorcore path on every GPU (the problems it takes)"
    ]
    reports = []
    torch = _torch_for_gpus() if any(t[2] not in ("cpu", None) for t in targets) else None
    for label, path, device, desc, arch, route in targets:
        golden = _expected(files, path, "any" if path == "exact" else arch)
        if golden is None:
            against = (
                f"NOT CHECKED: no {path} digests are recorded for {arch} (its bits are per "
                "architecture); the digests computed are reported"
            )
        else:
            against = f"golden/{golden['path']}.{golden['architecture']}.txt ({golden['contract']})".replace(
                ".any.txt", ".txt"
            )
        header.append(f"  {label:<9} {desc}  against {against}")
        digests = dict(golden["digests"]) if golden else {}
        results = []
        # Varlen batches run through attention_varlen, paged caches through attention_with_kvcache.
        mine = [c for c in cases if path == "exact" or c["tensorcore"]]
        for i, c in enumerate(mine):
            t0 = time.perf_counter()
            try:
                if device is None:
                    got = _call(_native.golden_native, c["name"], label.split()[0], path)
                else:
                    got = _run_case(c, path, device, torch)
                if golden is None:
                    r = {"case": c["name"], "status": "unchecked", "got": got}
                elif c["name"] not in digests:
                    r = {
                        "case": c["name"],
                        "status": "error",
                        "detail": f"no golden digest recorded for this case (got {got})",
                    }
                elif digests[c["name"]] == got:
                    r = {"case": c["name"], "status": "ok"}
                else:
                    r = {
                        "case": c["name"],
                        "status": "mismatch",
                        "detail": f"expected {digests[c['name']]}, got {got}",
                    }
            except Exception as e:  # noqa: BLE001 (an error in one case is that case's result)
                r = {"case": c["name"], "status": "error", "detail": f"{type(e).__name__}: {e}"}
            r["seconds"] = time.perf_counter() - t0
            results.append(r)
            if verbose:
                print(
                    f"[{i + 1:>2}/{len(mine)}] {label:<9} {c['name']:<36} {r['seconds'] * 1e3:8.1f} ms  "
                    f"{r['status'].upper()}",
                    file=out,
                )
        reports.append({"backend": label, "description": desc, "route": route, "cases": results})
    for n in notes:
        header.append(f"  note: {n}")
    for f in failures:
        header.append(f"  FAILURE: {f}")
    bad = any(c["status"] in ("mismatch", "error") for r in reports for c in r["cases"])
    ok = not bad and not failures and bool(reports)
    return SelftestReport(ok, header, reports, notes, failures, gpus_checked, len(cases))
