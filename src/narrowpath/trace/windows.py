"""Which activities an analysis looks at: the whole trace (HTA's window) or one ProfilerStep.

Whole trace, as HTA `Trace._filter_irrelevant_gpu_kernels` (hta/common/trace.py, v0.5.0): with two or more
ProfilerStep markers, keep GPU activities whose launching CPU event starts before the last ProfilerStep starts
(the last, often incomplete, step is dropped, and so are activities whose launch is not in the trace); with
fewer markers keep everything. A step, as HTA `add_iteration`: activities whose launch starts inside the
ProfilerStep's CPU span (host-mode activities: whose own start does).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from narrowpath.trace.model import RankTrace


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """A selection of a rank's activities. `step` is the ProfilerStep number, or None for the whole trace."""

    step: int | None
    index: np.ndarray
    """Indices of the selected activities, ascending (so in start order)."""
    start_s: float
    """CPU start of the step (whole trace: first selected activity start)."""
    end_s: float
    """CPU end of the step (whole trace: last selected activity end)."""


def whole_trace(rank: RankTrace) -> Window:
    """HTA's analysis window (see module docstring)."""
    if rank.step_start_s.size >= 2:
        last_start = rank.step_start_s.max()
        mask = np.isfinite(rank.act_launch_s) & (rank.act_launch_s < last_start)
        return _window(rank, None, np.flatnonzero(mask))
    return _window(rank, None, np.arange(rank.num_activities))


def steps(rank: RankTrace) -> list[Window]:
    """One window per ProfilerStep marker, in order (empty list when the trace has none)."""
    out = []
    order = np.argsort(rank.act_launch_s, kind="stable")  # NaN (no launch) sorts last, never selected
    when = rank.act_launch_s[order]
    lo = np.searchsorted(when, rank.step_start_s, side="left")
    hi = np.searchsorted(when, rank.step_start_s + rank.step_dur_s, side="left")
    for number, start, dur, a, b in zip(rank.step_number, rank.step_start_s, rank.step_dur_s, lo, hi):
        out.append(Window(step=int(number), index=np.sort(order[a:b]), start_s=float(start),
                          end_s=float(start + dur)))
    return out


def _window(rank: RankTrace, step: int | None, index: np.ndarray) -> Window:
    if index.size == 0:
        return Window(step=step, index=index, start_s=0.0, end_s=0.0)
    return Window(step=step, index=index, start_s=float(rank.act_start_s[index].min()),
                  end_s=float(rank.act_end_s[index].max()))
