"""Collective inventory of a window: per kind and group size, the count, message sizes and bandwidths.

Bandwidth follows nccl-tests (doc/PERFORMANCE.md): algbw = message_bytes / time; busbw = algbw × factor,
factor = 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter and all_to_all, 1 otherwise
(broadcast, reduce, send/recv). message_bytes is the larger of the in and out sizes (nccl-tests "size":
the full buffer for all_gather and reduce_scatter). The time is the communication kernel's duration, which
includes any wait for late peers, so a straggler lowers the observed busbw.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from narrowpath.trace import schema
from narrowpath.trace.intervals import distinct
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


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveSamples(Sequence):
    """The collectives of a window as columns (one row per communication activity, in start order); iterating
    or indexing gives `CollectiveSample`s, made on demand (a rank may hold hundreds of thousands)."""

    kind: np.ndarray
    """Index into schema.COLLECTIVE_KINDS ("unknown" when the trace does not say)."""
    group_size: np.ndarray
    start_s: np.ndarray
    dur_s: np.ndarray
    message_bytes: np.ndarray
    algbw_bytes_per_s: np.ndarray
    busbw_bytes_per_s: np.ndarray

    def __len__(self) -> int:
        return int(self.kind.size)

    def __getitem__(self, i: int) -> CollectiveSample:  # type: ignore[override]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return CollectiveSample(kind=schema.COLLECTIVE_KINDS[self.kind[i]], group_size=int(self.group_size[i]),
                                start_s=float(self.start_s[i]), dur_s=float(self.dur_s[i]),
                                message_bytes=float(self.message_bytes[i]),
                                algbw_bytes_per_s=float(self.algbw_bytes_per_s[i]),
                                busbw_bytes_per_s=float(self.busbw_bytes_per_s[i]))


_UNKNOWN = schema.COLLECTIVE_KINDS.index("unknown")


def collective_samples(rank: RankTrace, window: Window) -> CollectiveSamples:
    idx = window.index[rank.act_class[window.index] == schema.CLASS_COMM]
    kind = np.where(rank.act_coll[idx] >= 0, rank.act_coll[idx], _UNKNOWN).astype(np.int8)
    n = rank.act_group_size[idx].astype(np.int64)
    dur, size = rank.act_dur_s[idx], rank.act_message_bytes[idx]
    ok = (dur > 0) & np.isfinite(size)
    algbw = np.full(idx.size, np.nan)
    algbw[ok] = size[ok] / dur[ok]
    factor = np.ones(idx.size)
    pairs = kind.astype(np.int64) * (1 << 32) + n
    for pair in distinct(pairs):  # the few (kind, group size) pairs
        k, g = divmod(int(pair), 1 << 32)
        factor[pairs == pair] = busbw_factor(schema.COLLECTIVE_KINDS[k], g)
    return CollectiveSamples(kind=kind, group_size=n, start_s=rank.act_start_s[idx], dur_s=dur, message_bytes=size,
                             algbw_bytes_per_s=algbw, busbw_bytes_per_s=algbw * factor)


def _finite(fn, values: np.ndarray) -> float:
    vals = values[np.isfinite(values)]
    return float(fn(vals)) if vals.size else float("nan")


def _sequential_sum(values: np.ndarray) -> float:
    """Left-to-right sum (as Python's `sum`; numpy's `sum` adds pairwise, which rounds differently)."""
    return float(np.cumsum(values)[-1]) if values.size else 0.0


def collective_inventory(samples: CollectiveSamples) -> tuple[CollectiveGroup, ...]:
    """Group samples by (kind, group size), largest total time first (ties: first seen first)."""
    if not len(samples):
        return ()
    pairs = samples.kind.astype(np.int64) * (1 << 32) + samples.group_size
    order = np.argsort(pairs, kind="stable")
    cut = np.flatnonzero(np.diff(pairs[order])) + 1
    groups = sorted(np.split(order, cut), key=lambda g: g[0])  # in order of first appearance
    rows = []
    for g in groups:
        sizes = samples.message_bytes[g]
        rows.append(CollectiveGroup(
            kind=schema.COLLECTIVE_KINDS[samples.kind[g[0]]], group_size=int(samples.group_size[g[0]]),
            count=int(g.size), total_s=_sequential_sum(samples.dur_s[g]), min_message_bytes=_finite(np.min, sizes),
            max_message_bytes=_finite(np.max, sizes),
            total_bytes=_finite(_sequential_sum, sizes), median_busbw_bytes_per_s=_finite(np.median,
                                                                                            samples.busbw_bytes_per_s[g]),
            max_busbw_bytes_per_s=_finite(np.max, samples.busbw_bytes_per_s[g]),
            median_algbw_bytes_per_s=_finite(np.median, samples.algbw_bytes_per_s[g])))
    return tuple(sorted(rows, key=lambda r: -r.total_s))
