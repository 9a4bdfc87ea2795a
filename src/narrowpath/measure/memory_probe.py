"""Memory probe: bandwidth versus working-set size (read, write, copy, add), and the levels it reveals.

Kernels (NumPy float64, one thread; bytes counted as STREAM does — what the program reads plus writes, not
the write-allocate traffic the hardware adds; McCalpin, STREAM, 1995):
    read   max-reduce of one array             W bytes moved per pass
    write  fill one array with a constant      W
    copy   dst = +src (a ufunc loop, so ordinary stores: `np.copyto` switches to non-temporal stores
           above glibc's threshold, which makes the curve jump back up at large sizes)
    add    a = b + c (STREAM Add)              the level kernel: its plateaus give the levels' bandwidth,
           because element-wise training kernels read two operands and write one.
A small working set is swept many times in one NumPy call through a zero-stride 2-D view (the rows alias the
same buffer), so per-call overhead does not hide cache bandwidth. Arrays are staggered in the address space
to avoid 4 KiB aliasing between the operands.
The sweep starts at 64 KiB: below about 2,048 elements per operand NumPy's binary ufunc loop runs several
times slower on this zero-stride layout (measured: 31 vs 125 GB/s at 16 vs 24 KiB per operand), which would
read as a slow "L1". So L1 is not resolved; the first level reported is the one holding 64 KiB.
"""
from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from narrowpath.measure.machine import os_caches, physical_memory_bytes, cpu_model_name
from narrowpath.measure.segment import Plateau, edge_x, find_plateaus, rms_rel_spread
from narrowpath.measure.timing import Progress, host_provenance, time_median_s

KERNELS = ("read", "write", "copy", "add")
LEVEL_KERNEL = "add"
_ARRAYS = {"read": 1, "write": 1, "copy": 2, "add": 3}
_ITEM = 8  # float64
_LINE = 64
_STAGGER_BYTES = 9 * _LINE  # operand j starts j·576 B past a 4 KiB boundary: aligned, no 4 KiB aliasing


def working_set_sizes(*, min_bytes: float, max_bytes: float, points_per_octave: int) -> list[int]:
    """Geometric sizes from min to max, rounded to multiples of 3 cache lines × 8 bytes."""
    octaves = math.log2(max_bytes / min_bytes)
    num = int(round(octaves * points_per_octave)) + 1
    sizes = {int(round(min_bytes * 2 ** (i / points_per_octave) / 1536)) * 1536 for i in range(num)}
    return sorted(s for s in sizes if s > 0)


def default_max_bytes(quick: bool) -> float:
    """Several times the last-level cache, capped at 1 GiB, at least 512 MiB (full); 256 MiB (quick);
    never more than 1/8 of RAM. The cap keeps `probe all` within 2 minutes where the OS reports a huge LLC
    (a VM told 480 MiB of L3 it does not get: the measured boundary there is ~100 MiB)."""
    caches = os_caches()
    llc = caches[-1].capacity_bytes if caches else 32 * 2**20
    want = 256 * 2**20 if quick else max(min(4 * llc, 1024 * 2**20), 512 * 2**20)
    ram = physical_memory_bytes()
    return min(want, ram / 8) if ram else want


def _pool(max_ws_bytes: int) -> np.ndarray:
    """A touched float64 buffer large enough for every kernel's operands at the largest working set."""
    raw = np.ones(max_ws_bytes // _ITEM + 4 * (4096 + _STAGGER_BYTES) // _ITEM + _LINE)
    skip = (-raw.ctypes.data % 4096) // _ITEM
    return raw[skip:]


def _views(pool: np.ndarray, kernel: str, ws_bytes: int, reps: int) -> list[np.ndarray]:
    """Operands of `kernel`, each 64 B aligned and staggered; rows of the 2-D views alias one buffer."""
    k = _ARRAYS[kernel]
    n = max(8, ws_bytes // (_ITEM * k) // 8 * 8)
    pitch = -(-n * _ITEM // 4096) * 4096
    out = []
    for j in range(k):
        start = (j * (pitch + _STAGGER_BYTES)) // _ITEM
        out.append(as_strided(pool[start:start + n], (reps, n), (0, _ITEM), writeable=(j == 0)))
    return out


def _run(kernel: str, views: list[np.ndarray]):
    if kernel == "read":
        return lambda: np.maximum.reduce(views[0], axis=1)
    if kernel == "write":
        return lambda: np.copyto(views[0], 0.5)
    if kernel == "copy":
        return lambda: np.positive(views[1], out=views[0])
    return lambda: np.add(views[1], views[2], out=views[0])


MAX_EXTENDED_BYTES = 2 * 2**30
"""Largest working set a sweep that found no DRAM step extends to (never beyond 1/8 of RAM)."""


def probe_memory(*, quick: bool = False, max_bytes: float | None = None, min_bytes: float = 64 * 1024,
                 repeats: int | None = None, progress: bool = True) -> dict[str, Any]:
    """Bandwidth samples for every kernel and size, the detected levels and the OS cache sizes (JSON-ready).

    Without `max_bytes`, a sweep whose curve shows no step to DRAM (one level: the cache reaches past the sweep, as a
    guest's stacked L3 can) goes on by octaves up to MAX_EXTENDED_BYTES, so DRAM is not reported at cache bandwidth."""
    given_max = max_bytes is not None
    max_bytes = float(max_bytes or default_max_bytes(quick))
    repeats = repeats or (3 if quick else 5)
    per_octave = 2 if quick else 3
    sizes = working_set_sizes(min_bytes=min_bytes, max_bytes=max_bytes, points_per_octave=per_octave)
    sweep_bytes = 24e6 if quick else 64e6
    prog = Progress("memory", len(sizes), progress)
    samples: list[dict[str, Any]] = []
    _sweep(sizes, samples, repeats, sweep_bytes, prog)
    ram = physical_memory_bytes()
    limit = min(MAX_EXTENDED_BYTES, ram / 8) if ram else MAX_EXTENDED_BYTES
    levels = detect_levels(samples)
    while not given_max and len(levels) < 2 and sizes[-1] * 2 <= limit:
        more = [int(sizes[-1] * 2 ** ((i + 1) / per_octave)) // 1536 * 1536 for i in range(per_octave)]
        _sweep(more, samples, repeats, sweep_bytes, Progress("memory (extended)", len(more), progress))
        sizes += more
        levels = detect_levels(samples)
    caches = os_caches()
    return {
        "probe": "memory", "device": cpu_model_name(), "dtype": "float64", "threads": 1,
        "kernels": list(KERNELS), "level_kernel": LEVEL_KERNEL, "repeats": repeats, "quick": quick,
        "max_working_set_bytes": sizes[-1], "provenance": host_provenance(),
        "levels": levels,
        "os_caches": [{"name": c.name, "capacity_bytes": c.capacity_bytes, "source": c.source} for c in caches],
        "comparison": compare_with_os(levels, caches),
        "samples": samples,
    }


def _sweep(sizes: list[int], samples: list[dict[str, Any]], repeats: int, sweep_bytes: float, prog: Progress) -> None:
    """Time every kernel at every working set of `sizes` and append the samples."""
    pool = _pool(sizes[-1])
    for ws in sizes:
        reps = max(1, int(round(sweep_bytes / ws)))
        for kernel in KERNELS:
            views = _views(pool, kernel, ws, reps)
            moved = views[0].shape[1] * _ITEM * _ARRAYS[kernel] * reps
            big = ws > 64 * 2**20  # one pass is already long: fewer repeats keep the full probe near 20 s
            t, _ = time_median_s(_run(kernel, views), repeats=min(repeats, 3) if big else repeats, warmup=1)
            samples.append({"kernel": kernel, "working_set_bytes": ws, "bandwidth_bytes_per_s": moved / t,
                            "time_s": t, "repeats": min(repeats, 3) if big else repeats,
                            "sweeps_per_call": reps})
        prog.step(f"working set {ws / 2**20:.3f} MiB: {_bw(samples, ws, LEVEL_KERNEL) / 1e9:.1f} GB/s ({LEVEL_KERNEL})")


def _bw(samples: list[dict], ws: int, kernel: str) -> float:
    return next(s["bandwidth_bytes_per_s"] for s in samples if s["working_set_bytes"] == ws and s["kernel"] == kernel)


def detect_levels(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Levels nearest to farthest from the level kernel's plateaus; the farthest is named DRAM."""
    sizes = sorted({s["working_set_bytes"] for s in samples})
    y = [_bw(samples, ws, LEVEL_KERNEL) for ws in sizes]
    plateaus = find_plateaus(y, monotone="decreasing")
    caches = os_caches()
    plateaus = merge_dram_steps(sizes, y, plateaus, caches[-1].capacity_bytes if caches else None)
    edges = [edge_x(sizes, y, p, q) for p, q in zip(plateaus, plateaus[1:])]
    names = match_os_caches(edges, [c for c in caches if c.capacity_bytes >= sizes[0]])
    levels = []
    for i, p in enumerate(plateaus):
        last = i == len(plateaus) - 1
        cap = physical_memory_bytes() if last else edges[i]
        name = "DRAM" if last else names[i] or f"C{i + 1}"
        level = {"name": name, "capacity_bytes": cap, "bandwidth_bytes_per_s": p.level_y,
                 "first_working_set_bytes": sizes[p.first], "last_working_set_bytes": sizes[p.last],
                 "rms_rel_spread": rms_rel_spread(y[p.first:p.last + 1], p.level_y)}
        for kernel in KERNELS:
            level[f"{kernel}_bandwidth_bytes_per_s"] = statistics.median(
                _bw(samples, ws, kernel) for ws in sizes[p.first:p.last + 1])
        levels.append(level)
    return levels


DIP_RATIO = 1.6
"""Largest drop of a neighbour's dip beyond DRAM's first step; a cache-to-DRAM edge of the level kernel drops more
(2.4x on the development machine's EPYC, 4x and more on most hosts). Kept low: taking a dip for a level only adds a
level, taking a cache edge for a dip loses one."""


def merge_dram_steps(sizes: list[int], y: list[float], plateaus: list[Plateau],
                     llc_bytes: float | None) -> list[Plateau]:
    """Steps beyond DRAM's first one are DRAM under a busy neighbour, not levels: merged into it. The merged level is
    the median over all its samples (as `find_plateaus` does for any merge): a neighbour's dip over a minority of the
    sizes leaves it at the undisturbed bandwidth, and a first step still partly cached (a working set near the last
    cache's size) does not set it — keeping that step's own level once read a VM's DRAM as 23.2 GB/s where the
    samples at 128-256 MiB gave 13.0-14.5. Never into the first step: the sweep starts in a cache, so that one is a cache
    level and the step after it is at least DRAM's first.

    The last step is merged into the one before while it starts beyond 2x the largest OS cache and either the one
    before starts beyond half of that cache (where no cache level begins: a cache's step starts where the smaller
    cache ends) or the drop between them is less than DIP_RATIO. So the first step past the OS figure is kept when it
    is a cache edge — a guest can reach more cache than its OS reports (an EPYC with stacked L3 told 32 MiB keeps its
    cache level up to ~96 MiB; merging that edge once left a single "DRAM" level at cache bandwidth, and two tests
    failed on such a CI machine) — and a neighbour's dip is merged even where the OS reports a far larger cache than
    the guest gets (a VM told the host's 256 MiB).
    """
    if not llc_bytes:
        return plateaus
    out = list(plateaus)
    merged = False
    while len(out) > 2 and sizes[out[-1].first] > 2 * llc_bytes and (
            sizes[out[-2].first] > llc_bytes / 2 or out[-2].level_y < DIP_RATIO * out[-1].level_y):
        q, p = out[-2], out[-1]
        out[-2:] = [Plateau(q.first, p.last, q.level_y)]
        merged = True
    if merged:
        d = out[-1]
        out[-1] = Plateau(d.first, d.last, statistics.median(y[d.first:d.last + 1]))
    return out


_MATCH_RATIO = 8.0


def match_os_caches(edges: list[float], caches) -> list[str | None]:
    """The OS cache name of each detected boundary, or None for a step with no OS counterpart.

    Order-preserving one-to-one matching (nearer boundaries to smaller caches), only pairs within 8x: the most
    matches, then the least total |log(detected / OS)|. So a second step inside one cache (a bandwidth dip as
    the working set nears the cache size) stays unnamed instead of taking the next cache's name. Pass only
    caches the sweep can resolve (capacity >= its smallest working set).
    """
    n, m = len(edges), len(caches)
    # best[i][j]: (matches, -cost, names) using edges[i:] and caches[j:]
    best = [[(0, 0.0, [None] * (n - i)) for _ in range(m + 1)] for i in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            skip_e = best[i + 1][j]
            cands = [(skip_e[0], skip_e[1], [None] + skip_e[2]), best[i][j + 1]]
            d = abs(math.log(edges[i] / caches[j].capacity_bytes))
            if d <= math.log(_MATCH_RATIO):
                nxt = best[i + 1][j + 1]
                cands.append((nxt[0] + 1, nxt[1] - d, [caches[j].name] + nxt[2]))
            best[i][j] = max(cands, key=lambda c: (c[0], c[1]))
    return best[0][0][2] if n else []


def compare_with_os(levels: list[dict], caches) -> list[dict[str, Any]]:
    """Each detected boundary named after an OS cache beside that cache's size (ratio detected / OS).

    Inside a VM the OS reports what the hypervisor passes through — often the whole host socket's L3 — while
    the guest's cores reach a die-local slice shared with other tenants; the row then says so (`note`).
    """
    from narrowpath.measure.machine import under_hypervisor
    by_name = {c.name: c for c in caches}
    rows = []
    for lv in levels[:-1]:
        c = by_name.get(lv["name"])
        if c is None:
            continue
        ratio = lv["capacity_bytes"] / c.capacity_bytes
        row = {"level": lv["name"], "detected_capacity_bytes": lv["capacity_bytes"], "os_cache": c.name,
               "os_capacity_bytes": c.capacity_bytes, "ratio": ratio}
        if ratio < 0.5 and under_hypervisor():
            row["note"] = ("virtual machine: the OS figure is what the hypervisor reports (likely the host "
                           "socket's cache); the guest attains the smaller share measured here")
        rows.append(row)
    return rows
