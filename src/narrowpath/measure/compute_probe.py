"""Compute probe: attained matrix-multiply FLOP/s versus size, per backend and dtype, and the efficiency curve.

Square GEMMs C = A·B of n×n, FLOPs = 2n³ (the multiply-add count; Golub & Van Loan §1.1). Backends:
NumPy (its BLAS, all threads it uses), PyTorch CPU, and PyTorch CUDA when a GPU is present — FP32, TF32, BF16,
FP16 and, on a GPU with FP8 tensor cores, E4M3 FP8 with per-tensor scales (`torch._scaled_mm`, BF16 out) — timed
with CUDA events around replays of a CUDA graph of back-to-back GEMMs. Each size: warm-up, `repeats` timed runs,
median. Efficiency = attained / peak, the peak coming from `--device` (a catalog device) or, on a CPU, from
`machine.cpu_peak_flop_per_s` (an estimate whose reason travels with the result).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from narrowpath.measure.machine import cpu_model_name, cpu_peak_flop_per_s, cuda_available
from narrowpath.measure.timing import Progress, cuda_graph_of, cuda_time_s, host_provenance, time_median_s

QUICK_SIZES = (64, 128, 256, 512, 1024)
FULL_SIZES = (64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072)
CUDA_SIZES = (256, 512, 1024, 2048, 4096, 8192, 16384)
_NP_DTYPES = {"fp32": np.float32, "fp64": np.float64}


def _plan(quick: bool, cuda: bool, sizes: tuple[int, ...] | None = None) -> list[tuple[str, str, tuple[int, ...]]]:
    """(backend, dtype, sizes) to run."""
    sizes = sizes or (QUICK_SIZES if quick else FULL_SIZES)
    plan = [("numpy", "fp32", sizes), ("numpy", "fp64", sizes[:-2] if quick else sizes[:-1])]
    try:
        import torch  # noqa: F401
    except ImportError:
        return plan
    plan += [("torch-cpu", "fp32", sizes), ("torch-cpu", "bf16", sizes)]
    if cuda:
        csz = CUDA_SIZES[:4] if quick else CUDA_SIZES
        plan += [("torch-cuda", dt, csz) for dt in ("fp32", "tf32", "bf16", "fp16")]
        if _fp8_tensor_cores():
            plan.append(("torch-cuda", "fp8", csz))
    return plan


def _fp8_tensor_cores() -> bool:
    """Whether GPU 0 has FP8 tensor cores (compute capability 8.9 and up: Ada, Hopper, Blackwell) and PyTorch
    exposes the scaled FP8 GEMM."""
    import torch
    return torch.cuda.get_device_capability(0) >= (8, 9) and hasattr(torch, "_scaled_mm")


def _timer(backend: str, dtype: str, n: int, seed: int):
    """A zero-argument GEMM closure and its sync function for one (backend, dtype, size)."""
    rng = np.random.default_rng(seed)
    if backend == "numpy":
        a = rng.standard_normal((n, n)).astype(_NP_DTYPES[dtype])
        b = rng.standard_normal((n, n)).astype(_NP_DTYPES[dtype])
        out = np.empty((n, n), dtype=a.dtype)
        return (lambda: np.matmul(a, b, out=out)), None
    import torch
    dev = "cuda" if backend == "torch-cuda" else "cpu"
    if dtype == "fp8":  # E4M3 operands with per-tensor scales, BF16 out: the GEMM of FP8 training (cuBLASLt)
        g = torch.Generator(device="cpu").manual_seed(seed)
        a = torch.randn(n, n, generator=g).to(device=dev, dtype=torch.float8_e4m3fn)
        b = torch.randn(n, n, generator=g).to(device=dev, dtype=torch.float8_e4m3fn)  # used as bᵀ: column-major
        one = torch.ones((), device=dev, dtype=torch.float32)
        return (lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)), None
    tdt = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    g = torch.Generator(device="cpu").manual_seed(seed)
    a = torch.randn(n, n, generator=g).to(device=dev, dtype=tdt)
    b = torch.randn(n, n, generator=g).to(device=dev, dtype=tdt)
    out = torch.empty(n, n, device=dev, dtype=tdt)
    return (lambda: torch.matmul(a, b, out=out)), (torch.cuda.synchronize if dev == "cuda" else None)


def _cpu_time_s(fn, sync, repeats: int, target_s: float) -> float:
    """Median per-call time; each timed sample runs enough back-to-back calls to last about `target_s`."""
    t_one, _ = time_median_s(fn, repeats=1, warmup=2, sync=sync)
    calls = max(1, int(target_s / max(t_one, 1e-7)))

    def batch():
        for _ in range(calls):
            fn()
    t, _ = time_median_s(batch, repeats=repeats, warmup=0, sync=sync)
    return t / calls


GRAPH_ITERS = 64
"""GEMMs per captured CUDA graph (`_cuda_time_s`)."""


def _cuda_time_s(fn, repeats: int, iters: int) -> tuple[float, str]:
    """(median over `repeats` of (CUDA-event time of `iters` back-to-back GEMMs) / iters, how they ran): replayed
    from a CUDA graph of up to GRAPH_ITERS (`graph`; timing.cuda_graph_of: on the H200 machine every size from 256
    to 2,048 took 18–24 µs launched one by one, the kernels 3–23 µs from a graph: benchmarks/data/h200), or
    launched one by one when capture fails (`launches`: a small GEMM then measures the host's launch interval,
    which `calibrate` leaves out of the ramp)."""
    per = min(iters, GRAPH_ITERS)
    replay = cuda_graph_of(fn, per)
    if replay is None:
        return cuda_time_s(fn, rounds=iters, repeats=repeats), "launches"
    return cuda_time_s(replay, rounds=max(1, iters // per), repeats=repeats) / per, "graph"


def _device_name(backend: str) -> str:
    if backend == "torch-cuda":
        import torch
        return torch.cuda.get_device_name(0)
    return cpu_model_name()


def probe_compute(*, quick: bool = False, repeats: int | None = None, peaks: dict[str, float] | None = None,
                  progress: bool = True, seed: int = 0, cuda: bool | None = None,
                  sizes: tuple[int, ...] | None = None) -> dict[str, Any]:
    """GEMM samples per backend/dtype/size, best rate per dtype, and efficiency against the peaks (JSON-ready)."""
    repeats = repeats or (3 if quick else 5)
    if cuda is None:
        cuda = cuda_available()
    plan = _plan(quick, cuda, sizes)
    prog = Progress("compute", sum(len(s) for _, _, s in plan), progress)
    samples = []
    last_backend = None
    for backend, dtype, sizes in plan:
        if last_backend and backend != last_backend:
            time.sleep(0.3)  # let the previous library's spinning worker threads go idle (2-core machines)
        last_backend = backend
        if backend == "torch-cuda":
            import torch
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        for n in sizes:
            fn, sync = _timer(backend, dtype, n, seed)
            flop = 2.0 * n ** 3
            if backend == "torch-cuda":
                t, timing = _cuda_time_s(fn, repeats, iters=max(1, int(2e12 // flop)))
            else:
                t, timing = _cpu_time_s(fn, sync, repeats, target_s=0.01 if quick else 0.03), "host"
            samples.append({"backend": backend, "device": _device_name(backend), "dtype": dtype, "m": n, "n": n,
                            "k": n, "flop": flop, "time_s": t, "flops_per_s": flop / t, "repeats": repeats,
                            "timing": timing})
            prog.step(f"{backend} {dtype} n={n}: {flop / t / 1e9:.1f} GFLOP/s")
    best: dict[str, float] = {}
    by_backend: dict[str, dict[str, float]] = {}
    for s in samples:
        best[s["dtype"]] = max(best.get(s["dtype"], 0.0), s["flops_per_s"])
        row = by_backend.setdefault(s["backend"], {})
        row[s["dtype"]] = max(row.get(s["dtype"], 0.0), s["flops_per_s"])
    peak_table = _peaks(best, peaks or {}, cuda)
    for s in samples:
        p = peak_table.get(s["dtype"], {}).get("peak_flops_per_s", 0.0)
        s["efficiency"] = s["flops_per_s"] / p if p > 0 else None
    return {"probe": "compute", "device": _device_name("torch-cuda" if cuda else "numpy"), "repeats": repeats,
            "quick": quick, "provenance": host_provenance(), "best_flops_per_s": best,
            "best_flops_per_s_by_backend": by_backend, "peaks": peak_table,
            "samples": samples}


def _peaks(best: dict[str, float], given: dict[str, float], cuda: bool) -> dict[str, dict[str, Any]]:
    out = {}
    for dt in best:
        if dt in given:
            out[dt] = {"peak_flops_per_s": given[dt], "reason": "given (--device or --peak)"}
        elif not cuda:
            p, why = cpu_peak_flop_per_s(dt)
            out[dt] = {"peak_flops_per_s": p, "reason": why}
        elif given:
            out[dt] = {"peak_flops_per_s": 0.0, "reason": f"the given peaks (--device or --peak) have no {dt} rate"}
        else:
            out[dt] = {"peak_flops_per_s": 0.0, "reason": "no peak given for this GPU: pass --device"}
    return out
