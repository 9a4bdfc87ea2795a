"""Kernel breakdown by category: how many kernels of each kind ran in a window and for how long.

Categories come from `schema.kernel_category` (name patterns: gemm, attention, convolution, normalization,
optimizer, reduction, elementwise, communication, memcpy, memset, other). Durations are summed per kernel,
so concurrent kernels on different streams both count (HTA `get_gpu_kernel_breakdown` does the same).
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


def kernel_breakdown(rank: RankTrace, window: Window) -> tuple[KernelCategory, ...]:
    """Categories by descending summed time."""
    sel = window.index
    if sel.size == 0:
        return ()
    cats, codes = category_codes(rank)
    names, durs = rank.act_name[sel], rank.act_dur_s[sel]
    cat_of = codes[names]
    total = float(durs.sum()) or 1.0
    per_name = np.bincount(names, weights=durs, minlength=len(rank.names))
    rows = []
    for ci in distinct(cat_of):
        m = cat_of == ci
        in_cat = distinct(names[m])
        top = int(in_cat[np.argmax(per_name[in_cat])])
        rows.append(KernelCategory(category=cats[ci], num_kernels=int(m.sum()), total_s=float(durs[m].sum()),
                                   share_pct=100.0 * float(durs[m].sum()) / total,
                                   top_kernel=rank.names[top][:80]))
    return tuple(sorted(rows, key=lambda r: -r.total_s))
