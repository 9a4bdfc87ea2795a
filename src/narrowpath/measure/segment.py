"""Plateau detection: split a curve sampled at growing sizes into flat steps and locate each step's edge.

Used for the memory staircase (bandwidth vs working set → levels) and the locality cliff (time per FLOP vs
weight bytes). Method: optimal piecewise-constant segmentation of log(y) by dynamic programming, minimising
the squared error plus a penalty per segment (the 'optimal partitioning' of Jackson et al., IEEE SPL 2005,
which PELT speeds up; our n is tiny). Adjacent steps closer than `merge_ratio` are merged. A step's edge is
where the curve crosses the geometric mean of the two step heights (log-log interpolation between samples).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True, slots=True)
class Plateau:
    """One flat step of the curve."""

    first: int
    """Index of its first sample."""
    last: int
    """Index of its last sample (inclusive)."""
    level_y: float
    """Median y over the step."""


def _segments(log_y: Sequence[float], penalty: float, min_len: int) -> list[tuple[int, int]]:
    n = len(log_y)
    pre, pre2 = [0.0], [0.0]
    for v in log_y:
        pre.append(pre[-1] + v)
        pre2.append(pre2[-1] + v * v)

    def sse(i: int, j: int) -> float:  # samples i..j-1
        s, s2, m = pre[j] - pre[i], pre2[j] - pre2[i], j - i
        return s2 - s * s / m
    best = [0.0] + [math.inf] * n
    back = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(0, j - min_len + 1):
            if best[i] == math.inf:
                continue
            c = best[i] + sse(i, j) + penalty
            if c < best[j]:
                best[j], back[j] = c, i
    if best[n] == math.inf:
        return [(0, n - 1)]
    out, j = [], n
    while j > 0:
        out.append((back[j], j - 1))
        j = back[j]
    return out[::-1]


def find_plateaus(y: Sequence[float], *, penalty: float = 0.12, min_len: int = 2,
                  merge_ratio: float = 1.25, min_keep: int = 3, monotone: str | None = None) -> list[Plateau]:
    """Flat steps of positive `y` (in sample order); penalty is in squared natural-log units.

    An interior step shorter than `min_keep` samples whose height lies between its neighbours' is the slope
    of a transition, not a level: it is dropped (its samples belong to no plateau). With `monotone`
    ("decreasing" for bandwidth, "increasing" for time per FLOP), a step that goes the wrong way — a dip from
    a busy neighbour process, say — is merged into the step before it.
    """
    if not y:
        return []
    if any(v <= 0 or not math.isfinite(v) for v in y):
        raise ValueError(f"find_plateaus needs positive finite values, got {list(y)}")
    log_y = [math.log(v) for v in y]
    segs = _segments(log_y, penalty, min(min_len, len(y)))
    plateaus = [Plateau(a, b, statistics.median(y[a:b + 1])) for a, b in segs]
    merged = [plateaus[0]]
    for p in plateaus[1:]:
        q = merged[-1]
        if max(p.level_y, q.level_y) / min(p.level_y, q.level_y) < merge_ratio:
            merged[-1] = Plateau(q.first, p.last, statistics.median(y[q.first:p.last + 1]))
        else:
            merged.append(p)
    if monotone:
        sign = -1.0 if monotone == "decreasing" else 1.0
        i = 1
        while i < len(merged):
            q, p = merged[i - 1], merged[i]
            if sign * math.log(p.level_y / q.level_y) < math.log(merge_ratio):
                merged[i - 1] = Plateau(q.first, p.last, statistics.median(y[q.first:p.last + 1]))
                del merged[i]
                i = max(1, i - 1)
            else:
                i += 1
    changed = True
    while changed and len(merged) > 2:
        changed = False
        for i in range(1, len(merged) - 1):
            a, p, b = merged[i - 1], merged[i], merged[i + 1]
            between = min(a.level_y, b.level_y) < p.level_y < max(a.level_y, b.level_y)
            if between and p.last - p.first + 1 < min_keep:
                del merged[i]
                changed = True
                break
    return merged


NOISY_SPREAD = 0.2
"""RMS relative spread of a step's samples about its level above which the level is flagged as noisy (a busy
neighbour, a partly cached first step): the level is a median of scattered samples, not a flat plateau."""


def rms_rel_spread(y: Sequence[float], level: float) -> float:
    """RMS of y / level - 1 over a step's samples (0 for none): how flat the step the level stands for is."""
    return math.sqrt(sum((v / level - 1) ** 2 for v in y) / len(y)) if y else 0.0


def edge_x(x: Sequence[float], y: Sequence[float], left: Plateau, right: Plateau) -> float:
    """x where y crosses the geometric mean of the two step heights, log-log interpolated."""
    mid = math.sqrt(left.level_y * right.level_y)
    falling = right.level_y < left.level_y
    lo = (left.first + left.last) // 2
    hi = (right.first + right.last + 1) // 2
    for k in range(max(lo, 1), hi + 1):
        a, b = y[k - 1], y[k]
        crossed = (b <= mid <= a) if falling else (a <= mid <= b)
        if crossed and a != b:
            t = (math.log(mid) - math.log(a)) / (math.log(b) - math.log(a))
            return math.exp(math.log(x[k - 1]) + t * (math.log(x[k]) - math.log(x[k - 1])))
    return math.sqrt(x[left.last] * x[right.first])
