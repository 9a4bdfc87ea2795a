"""Collective inventory of a window: per kind and group size, the count, message sizes and bandwidths.

Bandwidth follows nccl-tests (doc/PERFORMANCE.md): algbw = message_bytes / time; busbw = algbw × factor,
factor = 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter and all_to_all, 1 otherwise
(broadcast, reduce, send/recv). message_bytes is the larger of the in and out sizes (nccl-tests "size":
the full buffer for all_gather and reduce_scatter). The time is the communication kernel's duration, which
includes any wait for late peers, so a straggler lowers the observed busbw.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from narrowpath.trace import schema
from narrowpath.trace.model import RankTrace
from narrowpath.trace.windows import Window


def busbw_factor(kind: str, group_size: int) -> float:
    """nccl-tests bus-bandwidth factor for a collective over `group_size` ranks (1.0 when the size is unknown);
    the factors themselves are the cost model's (`cost.collectives.bus_factor`)."""
    if group_size <= 0:
        return 1.0
    if group_size == 1 and kind not in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        return 1.0  # a point-to-point or broadcast "group" of one: busbw = algbw
    from narrowpath.cost.collectives import bus_factor  # on first use: the cost stage is slow to import
    return bus_factor(kind, group_size)


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveSample:
    """One observed collective (for plots and stragglers)."""

    kind: str
    group_size: int
    start_s: float
    dur_s: float
    message_bytes: float
    """NaN when the trace holds no size for it."""
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveGroup:
    """All collectives of one kind and group size in a window."""

    kind: str
    group_size: int
    """0 when the trace does not say."""
    count: int
    total_s: float
    min_message_bytes: float
    max_message_bytes: float
    total_bytes: float
    median_busbw_bytes_per_s: float
    """NaN without sizes."""
    max_busbw_bytes_per_s: float
    median_algbw_bytes_per_s: float


def collective_samples(rank: RankTrace, window: Window) -> tuple[CollectiveSample, ...]:
    idx = window.index[rank.act_class[window.index] == schema.CLASS_COMM]
    out = []
    for i in idx:
        kind = schema.COLLECTIVE_KINDS[rank.act_coll[i]] if rank.act_coll[i] >= 0 else "unknown"
        n, dur, size = int(rank.act_group_size[i]), float(rank.act_dur_s[i]), float(rank.act_message_bytes[i])
        algbw = size / dur if dur > 0 and np.isfinite(size) else np.nan
        out.append(CollectiveSample(kind=kind, group_size=n, start_s=float(rank.act_start_s[i]), dur_s=dur,
                                    message_bytes=size, algbw_bytes_per_s=algbw,
                                    busbw_bytes_per_s=algbw * busbw_factor(kind, n)))
    return tuple(out)


def _nan(fn, values: list[float]) -> float:
    vals = [v for v in values if np.isfinite(v)]
    return float(fn(vals)) if vals else float("nan")


def collective_inventory(samples: tuple[CollectiveSample, ...]) -> tuple[CollectiveGroup, ...]:
    """Group samples by (kind, group size), largest total time first."""
    groups: dict[tuple[str, int], list[CollectiveSample]] = {}
    for s in samples:
        groups.setdefault((s.kind, s.group_size), []).append(s)
    rows = []
    for (kind, n), items in groups.items():
        sizes = [s.message_bytes for s in items]
        busbw = [s.busbw_bytes_per_s for s in items]
        rows.append(CollectiveGroup(
            kind=kind, group_size=n, count=len(items), total_s=sum(s.dur_s for s in items),
            min_message_bytes=_nan(min, sizes), max_message_bytes=_nan(max, sizes),
            total_bytes=_nan(sum, sizes), median_busbw_bytes_per_s=_nan(np.median, busbw),
            max_busbw_bytes_per_s=_nan(max, busbw),
            median_algbw_bytes_per_s=_nan(np.median, [s.algbw_bytes_per_s for s in items])))
    return tuple(sorted(rows, key=lambda r: -r.total_s))
