"""Kernel breakdown by category: how many kernels of each kind ran in a window and for how long.

Categories come from `schema.kernel_category` (name patterns: gemm, attention, convolution, normalization,
optimizer, reduction, elementwise, communication, memcpy, memset, other). Durations are summed per kernel,
so concurrent kernels on different streams both count (HTA `get_gpu_kernel_breakdown` does the same).

In a CPU-only trace the activities are host operators, nested on their thread (`aten::linear` holds
`aten::addmm`, which holds `aten::copy_`; `DistributedDataParallel.forward` holds them all): each counts its
self time — its duration less that of the operators directly inside it on the same thread, the exclusive time of
PyTorch's profiler tables — so a thread's time is counted once, and an operator inside another of its own
category is not counted again (summed whole, `aten::linear` plus its `aten::addmm` read 3.29 ms of "gemm" where
the ops covered 2.30 ms, and the share was taken of the summed 41.6 ms, not the covered 29.1 ms).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from narrowpath.trace import schema
from narrowpath.trace.intervals import distinct
from narrowpath.trace.model import RankTrace
from narrowpath.trace.windows import Window


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelCategory:
    """One row of the kernel breakdown."""

    category: str
    num_kernels: int
    total_s: float
    """Sum of kernel durations."""
    share_pct: float
    """Share of the window's summed kernel time."""
    top_kernel: str
    """Name of the kernel with the largest summed time in the category (truncated to 80 characters)."""


def category_codes(rank: RankTrace) -> tuple[tuple[str, ...], np.ndarray]:
    """(category names, category index of each interned name)."""
    cats = tuple(dict.fromkeys(c for c, _ in schema.KERNEL_CATEGORIES)) + ("other",)
    index = {c: i for i, c in enumerate(cats)}
    codes = np.array([index[schema.kernel_category(n)] for n in rank.names] or [0], dtype=np.int16)
    return cats, codes


def self_times(start_s: np.ndarray, dur_s: np.ndarray, thread: np.ndarray, category: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """(self time, counted) of nested host operators: self time = duration less the part of it the operators
    directly inside it on the same thread take (clipped at 0 where a trace nests badly); counted = not inside an
    operator of the same category (an `aten::addmm` inside `aten::linear` is one GEMM). Inside = starting in it
    and, at equal starts, the shorter one (PyTorch profiler's exclusive time)."""
    end_arr = start_s + dur_s
    order = np.lexsort((-end_arr, start_s, thread)).tolist()
    own, counted = dur_s.astype(np.float64).tolist(), [True] * start_s.size
    start, end, tid, cat = start_s.tolist(), end_arr.tolist(), thread.tolist(), category.tolist()
    stack: list[int] = []  # the operators enclosing the current one, innermost last (Python lists: ~1 µs an op)
    for i in order:
        while stack and (tid[stack[-1]] != tid[i] or end[stack[-1]] <= start[i]):
            stack.pop()
        if stack:
            parent = stack[-1]
            own[parent] -= min(end[i], end[parent]) - start[i]
            counted[i] = all(cat[j] != cat[i] for j in stack)
        stack.append(i)
    return np.maximum(np.array(own, dtype=np.float64), 0.0), np.array(counted, dtype=bool)


def kernel_breakdown(rank: RankTrace, window: Window) -> tuple[KernelCategory, ...]:
    """Categories by descending summed time (host operators: self time, see the module docstring)."""
    sel = window.index
    if sel.size == 0:
        return ()
    cats, codes = category_codes(rank)
    names, durs = rank.act_name[sel], rank.act_dur_s[sel]
    cat_of = codes[names]
    counted = np.ones(sel.size, dtype=bool)
    if rank.host_mode:
        durs, counted = self_times(rank.act_start_s[sel], durs, rank.act_lane[sel], cat_of)
    total = float(durs.sum()) or 1.0
    per_name = np.bincount(names, weights=durs, minlength=len(rank.names))
    rows = []
    for ci in distinct(cat_of):
        m = cat_of == ci
        in_cat = distinct(names[m])
        top = int(in_cat[np.argmax(per_name[in_cat])])
        rows.append(KernelCategory(category=cats[ci], num_kernels=int((m & counted).sum()),
                                   total_s=float(durs[m].sum()),
                                   share_pct=100.0 * float(durs[m].sum()) / total,
                                   top_kernel=rank.names[top][:80]))
    return tuple(sorted(rows, key=lambda r: -r.total_s))
