"""GPU memory probe: device-memory bandwidth versus working-set size, and the levels it reveals (L2, HBM).

The host probe (`memory_probe`) measures the CPU's caches and DRAM; on a machine with a GPU the model's
element-wise kernels run against the GPU's memory, so `probe memory` measures that (PyTorch CUDA tensors,
float32), with the same kernels and byte counting as the host probe (STREAM: what the kernel reads plus writes):
    read   sum of one array (a reduction)          W bytes
    write  fill one array                          W
    copy   dst.copy_(src)                          W (2 arrays)
    add    c = a + b (STREAM Add; the level kernel) W (3 arrays)
Each sample replays a CUDA graph of back-to-back kernels moving `GRAPH_BYTES` per replay (one kernel per graph
from 512 MiB up, which alone lasts over 100 µs), so neither the launch nor the graph's start shows: a 1 MiB
kernel takes ~1 µs, far below a launch from Python (18–24 µs on the project's H200 machine). Even inside a graph
each kernel has a fixed cost (`fixed_s`, measured on a 4 KiB add: 0.96 µs on the H200), which at small working
sets is most of the time — the raw curve there rises with size (0.8 TB/s at 1 MiB, 5.7 TB/s at 32 MiB on the
H200) — so a sample's bandwidth is its bytes over its
time less that fixed cost (the model prices a kernel's fixed cost apart, `Calibration.kernel_overhead_s`), and the
levels are read only from samples whose time is at least `MIN_TIME_OVER_FIXED` × the fixed cost. A working set
that fits the L2 cache is served from it on the repeats (the L2 plateau); beyond, from HBM. `calibrate` reads the
farthest plateau against the device's HBM bandwidth (`Calibration.vector_bw_efficiency`).
"""
from __future__ import annotations

import math
import statistics
from typing import Any

from narrowpath.errors import NarrowpathError
from narrowpath.measure.memory_probe import _ARRAYS, KERNELS, LEVEL_KERNEL, working_set_sizes  # the host probe's
from narrowpath.measure.segment import edge_x, find_plateaus, rms_rel_spread
from narrowpath.measure.timing import Progress, cuda_graph_of, cuda_time_s, host_provenance

_ITEM = 4  # float32
GRAPH_BYTES = 512 * 2**20
"""Bytes moved per graph replay (kernels per graph = this / working set, at least 1, at most `MAX_GRAPH_KERNELS`)."""
MAX_GRAPH_KERNELS = 512
HBM_BEYOND_L2 = 4.0
"""The sweep must reach this many times the reported L2 to have an HBM plateau."""
MIN_TIME_OVER_FIXED = 4.0
"""Samples shorter than this many fixed costs stay out of the level detection (the fixed cost dominates them)."""


def default_max_bytes(free_bytes: float, quick: bool) -> float:
    """Largest working set: 1 GiB (quick) or 4 GiB, at most a quarter of the free device memory — far beyond any
    GPU's L2 (50–126 MB on Hopper and Blackwell)."""
    return min((1 if quick else 4) * 2**30, free_bytes / 4)


def _kernel(name: str, arrays: list):
    import torch
    if name == "read":
        return lambda: torch.sum(arrays[0])
    if name == "write":
        return lambda: arrays[0].fill_(0.5)
    if name == "copy":
        return lambda: arrays[0].copy_(arrays[1])
    return lambda: torch.add(arrays[1], arrays[2], out=arrays[0])


def _graph_time_s(fn, kernels: int, repeats: int) -> float:
    """Median seconds per kernel over `repeats` replays of a captured graph of `kernels` calls of fn (plain launches
    when capture fails)."""
    replay = cuda_graph_of(fn, kernels)
    if replay is None:
        return cuda_time_s(fn, rounds=kernels, repeats=repeats)
    return cuda_time_s(replay, rounds=1, repeats=repeats, warmup=1) / kernels


def probe_gpu_memory(*, quick: bool = False, max_bytes: float | None = None, min_bytes: float = 1 * 2**20,
                     repeats: int | None = None, progress: bool = True) -> dict[str, Any]:
    """Bandwidth samples of every kernel and working set on CUDA device 0, and the levels (JSON-ready)."""
    import torch
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    free, total = torch.cuda.mem_get_info(index)
    max_bytes = float(max_bytes or default_max_bytes(free, quick))
    repeats = repeats or (3 if quick else 5)
    sizes = working_set_sizes(min_bytes=min_bytes, max_bytes=max_bytes, points_per_octave=2 if quick else 3)
    prog = Progress("memory", len(sizes), progress)
    tiny = [torch.ones(1024, device="cuda", dtype=torch.float32) for _ in range(3)]
    fixed = _graph_time_s(_kernel("add", tiny), MAX_GRAPH_KERNELS, repeats)
    del tiny
    samples = []
    for ws in sizes:
        for name in KERNELS:
            k = _ARRAYS[name]
            n = max(1024, ws // (_ITEM * k))
            arrays = [torch.ones(n, device="cuda", dtype=torch.float32) for _ in range(k)]
            kernels = max(1, min(MAX_GRAPH_KERNELS, GRAPH_BYTES // (n * _ITEM * k)))
            t = _graph_time_s(_kernel(name, arrays), kernels, repeats)
            moved = n * _ITEM * k
            samples.append({"kernel": name, "working_set_bytes": moved,
                            "bandwidth_bytes_per_s": moved / max(t - fixed, 1e-3 * t), "time_s": t,
                            "raw_bandwidth_bytes_per_s": moved / t, "repeats": repeats,
                            "kernels_per_graph": kernels})
            del arrays
        prog.step(f"working set {ws / 2**20:.1f} MiB: {_bw(samples, LEVEL_KERNEL)[-1] / 1e9:.0f} GB/s "
                  f"({LEVEL_KERNEL})")
    torch.cuda.empty_cache()
    return {"probe": "memory", "backend": "torch-cuda", "device": torch.cuda.get_device_name(index),
            "dtype": "float32", "kernels": list(KERNELS), "level_kernel": LEVEL_KERNEL, "repeats": repeats,
            "quick": quick, "max_working_set_bytes": max(s["working_set_bytes"] for s in samples),
            "l2_cache_bytes": getattr(props, "L2_cache_size", 0), "memory_bytes": total,
            "fixed_s": fixed, "provenance": host_provenance(),
            "levels": detect_gpu_levels(samples, total, getattr(props, "L2_cache_size", 0), fixed),
            "samples": samples}


def _bw(samples: list[dict], kernel: str) -> list[float]:
    return [s["bandwidth_bytes_per_s"] for s in samples if s["kernel"] == kernel]


def detect_gpu_levels(samples: list[dict[str, Any]], memory_bytes: float, l2_bytes: float,
                      fixed_s: float = 0.0) -> list[dict[str, Any]]:
    """Levels nearest to farthest from the level kernel's plateaus over the samples that last at least
    MIN_TIME_OVER_FIXED × `fixed_s`: the farthest is HBM (capacity: the device's memory), the one before it L2 when
    the device reports an L2 within 8x of the boundary, else C1, C2, ... A sweep that never goes beyond
    `HBM_BEYOND_L2` × the reported L2 has no HBM plateau to read: refused in one line (its farthest plateau would
    be the L2's, and `calibrate` would read ~1.5x the HBM's bandwidth as HBM)."""
    rows = sorted((s for s in samples if s["kernel"] == LEVEL_KERNEL
                   and s.get("time_s", math.inf) >= MIN_TIME_OVER_FIXED * fixed_s),
                  key=lambda s: s["working_set_bytes"])
    largest = max((s["working_set_bytes"] for s in samples), default=0)
    if not rows or (l2_bytes > 0 and largest < HBM_BEYOND_L2 * l2_bytes):
        raise NarrowpathError(f"probe memory: the sweep stops at {largest / 2**20:.0f} MiB, within "
                              f"{HBM_BEYOND_L2:g}x the device's {l2_bytes / 2**20:.0f} MiB L2: no HBM level to read; "
                              f"raise --max-bytes to {HBM_BEYOND_L2 * 2 * l2_bytes / 2**20:.0f} MiB or more"
                              if rows else "probe memory: no sample lasts long enough to read a level (all within "
                              f"{MIN_TIME_OVER_FIXED:g}x the kernels' fixed cost); raise --max-bytes")
    sizes = [s["working_set_bytes"] for s in rows]
    y = [s["bandwidth_bytes_per_s"] for s in rows]
    plateaus = find_plateaus(y, monotone="decreasing")
    edges = [edge_x(sizes, y, p, q) for p, q in zip(plateaus, plateaus[1:])]
    levels = []
    for i, p in enumerate(plateaus):
        last = i == len(plateaus) - 1
        if last:
            name, cap = "HBM", float(memory_bytes)
        else:
            near_l2 = l2_bytes > 0 and i == len(plateaus) - 2 and 1 / 8 <= edges[i] / l2_bytes <= 8
            name, cap = ("L2" if near_l2 else f"C{i + 1}"), edges[i]
        level = {"name": name, "capacity_bytes": cap, "bandwidth_bytes_per_s": p.level_y,
                 "first_working_set_bytes": sizes[p.first], "last_working_set_bytes": sizes[p.last],
                 "rms_rel_spread": rms_rel_spread(y[p.first:p.last + 1], p.level_y)}
        for kernel in KERNELS:
            ks = {s["working_set_bytes"]: s["bandwidth_bytes_per_s"] for s in samples if s["kernel"] == kernel}
            vals = [ks[w] for w in sizes[p.first:p.last + 1] if w in ks]
            if vals:
                level[f"{kernel}_bandwidth_bytes_per_s"] = statistics.median(vals)
        levels.append(level)
    return levels
