"""Timing discipline shared by the probes: warm-up, repeats, median; progress on stderr; provenance.

Every probe sample is the median of `repeats` timed runs after `warmup` untimed ones (the median resists the
occasional preemption of a shared machine better than the mean; nccl-tests uses a mean over back-to-back
iterations, which `collectives_probe` follows instead).
"""
from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable


def time_median_s(fn: Callable[[], object], *, repeats: int, warmup: int = 1,
                  sync: Callable[[], object] | None = None) -> tuple[float, list[float]]:
    """Median and all wall times (seconds) of `fn()` over `repeats` runs after `warmup` runs.

    `sync` (e.g. `torch.cuda.synchronize`) runs after each call before the clock stops.
    """
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


@dataclass
class Progress:
    """Writes `[probe] step i/n: what` lines to stderr (stdout stays clean for tables and JSON)."""

    probe: str
    total: int
    enabled: bool = True
    done: int = 0

    def step(self, what: str) -> None:
        self.done += 1
        if self.enabled:
            print(f"[{self.probe}] {self.done}/{self.total} {what}", file=sys.stderr, flush=True)


def cuda_graph_of(fn: Callable[[], object], calls: int) -> Callable[[], None] | None:
    """A zero-argument replay of `calls` back-to-back calls of fn captured in one CUDA graph (fn run once on a side
    stream first, as capture needs), or None when capture fails (the caller then times plain launches). Launched
    one by one from Python, a kernel shorter than the host's next launch measures the launch interval, not the GPU
    (18–24 µs per PyTorch call on the project's H200 machine: benchmarks/data/h200)."""
    import torch
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except (RuntimeError, AttributeError):
        torch.cuda.synchronize()
        return None

    def replay() -> None:
        graph.replay()
    return replay


def cuda_time_s(step: Callable[[], object], *, rounds: int, repeats: int, warmup: int = 3) -> float:
    """Median over `repeats` samples of the CUDA-event time of `rounds` back-to-back calls of `step`, per call."""
    import torch
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(rounds):
            step()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3 / rounds)
    return statistics.median(times)


def host_provenance() -> dict[str, object]:
    """Where and with what a probe ran: host, CPU, Python, NumPy (and its BLAS threads env), CPU count, and
    the 1-minute load average (other work on a shared machine is the usual cause of a noisy sample)."""
    import numpy as np
    from narrowpath.measure.machine import cpu_model_name
    return {
        "host": platform.node(),
        "cpu": cpu_model_name(),
        "num_cpus": os.cpu_count() or 1,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "env": {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                            "MKL_NUM_THREADS") if k in os.environ},
        "time_unix_s": time.time(),
        "load_avg_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
