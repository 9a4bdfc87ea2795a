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
    mask: np.ndarray
    """Boolean mask over the rank's activities."""
    start_s: float
    """CPU start of the step (whole trace: first selected activity start)."""
    end_s: float
    """CPU end of the step (whole trace: last selected activity end)."""


def whole_trace(rank: RankTrace) -> Window:
    """HTA's analysis window (see module docstring)."""
    if rank.step_start_s.size >= 2 and not rank.host_mode:
        last_start = rank.step_start_s.max()
        mask = np.isfinite(rank.act_launch_s) & (rank.act_launch_s < last_start)
    elif rank.step_start_s.size >= 2:
        mask = rank.act_start_s < rank.step_start_s.max()
    else:
        mask = np.ones(rank.num_activities, dtype=bool)
    return _window(rank, None, mask)


def steps(rank: RankTrace) -> list[Window]:
    """One window per ProfilerStep marker, in order (empty list when the trace has none)."""
    out = []
    when = rank.act_launch_s
    for number, start, dur in zip(rank.step_number, rank.step_start_s, rank.step_dur_s):
        mask = (when >= start) & (when < start + dur)
        out.append(Window(step=int(number), mask=mask, start_s=float(start), end_s=float(start + dur)))
    return out


def _window(rank: RankTrace, step: int | None, mask: np.ndarray) -> Window:
    if not mask.any():
        return Window(step=step, mask=mask, start_s=0.0, end_s=0.0)
    return Window(step=step, mask=mask, start_s=float(rank.act_start_s[mask].min()),
                  end_s=float(rank.act_end_s[mask].max()))
