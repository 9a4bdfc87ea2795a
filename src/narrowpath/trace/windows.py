"""Which activities an analysis looks at: the whole trace (HTA's window) or one ProfilerStep.

Whole trace, as HTA `Trace._filter_irrelevant_gpu_kernels` (hta/common/trace.py, v0.5.0): with two or more
ProfilerStep markers, keep GPU activities whose launching CPU event starts before the last ProfilerStep starts
(the last, often incomplete, step is dropped, and so are activities whose launch is not in the trace); with
fewer markers keep everything.

A step has two selections. `index`: the activities launched inside the ProfilerStep's CPU span (HTA's
iteration assignment; host-mode activities: whose own start does) — what the step *issued*, used to count
its collectives and to walk its critical path. `time_index` with `[span_start_s, span_end_s)`: the step's
slice of the device timeline, from the first start of its own activities to the first start of the next
step's (the last step: to its last end) — used for the step's temporal breakdown. The slices partition the
device timeline, so a GPU running behind the CPU (kernels of step k still running while step k+1's launch)
neither counts the same time twice nor shows the next step's work as idle, and the slice length is the
step's device-side duration (steady state: the iteration time).
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
    time_index: np.ndarray | None = None
    """Steps only: activities overlapping [span_start_s, span_end_s), ascending; None for the whole trace."""
    span_start_s: float = 0.0
    """Steps only: start of the step's slice of the device timeline (0 when the step launched nothing)."""
    span_end_s: float = 0.0
    """Steps only: end of that slice (== span_start_s when the step launched nothing)."""


def whole_trace(rank: RankTrace) -> Window:
    """HTA's analysis window (see module docstring)."""
    if rank.step_start_s.size >= 2:
        last_start = rank.step_start_s.max()
        mask = np.isfinite(rank.act_launch_s) & (rank.act_launch_s < last_start)
        return _window(rank, None, np.flatnonzero(mask))
    return _window(rank, None, np.arange(rank.num_activities))


def steps(rank: RankTrace) -> list[Window]:
    """One window per ProfilerStep marker, in order (empty list when the trace has none)."""
    order = np.argsort(rank.act_launch_s, kind="stable")  # NaN (no launch) sorts last, never selected
    when = rank.act_launch_s[order]
    lo = np.searchsorted(when, rank.step_start_s, side="left")
    hi = np.searchsorted(when, rank.step_start_s + rank.step_dur_s, side="left")
    issued = [np.sort(order[a:b]) for a, b in zip(lo, hi)]
    first = [float(rank.act_start_s[i].min()) if i.size else np.nan for i in issued]
    start, end = rank.act_start_s, rank.act_end_s
    reach = np.maximum.accumulate(end) if end.size else end  # running max end: monotone, so searchable
    next_first = [float("nan")] * len(first)  # the first start of a later step that launched anything
    upcoming = float("nan")
    for k in range(len(first) - 1, -1, -1):
        next_first[k] = upcoming
        if first[k] == first[k]:
            upcoming = first[k]
    out = []
    for k, (number, cpu_start, cpu_dur, idx) in enumerate(zip(rank.step_number, rank.step_start_s,
                                                               rank.step_dur_s, issued)):
        if not idx.size:
            out.append(Window(step=int(number), index=idx, start_s=float(cpu_start),
                              end_s=float(cpu_start + cpu_dur), time_index=idx))
            continue
        a = first[k]
        b = next_first[k] if next_first[k] == next_first[k] else float(end[idx].max())
        b = max(b, a)
        i0 = int(np.searchsorted(reach, a, side="right"))  # first activity that may end after a
        i1 = int(np.searchsorted(start, b, side="left"))   # activities starting before b
        cand = np.arange(i0, max(i1, i0))
        time_index = cand[end[cand] > a] if cand.size else cand
        out.append(Window(step=int(number), index=idx, start_s=float(cpu_start), end_s=float(cpu_start + cpu_dur),
                          time_index=time_index, span_start_s=a, span_end_s=b))
    return out


def _window(rank: RankTrace, step: int | None, index: np.ndarray) -> Window:
    if index.size == 0:
        return Window(step=step, index=index, start_s=0.0, end_s=0.0)
    return Window(step=step, index=index, start_s=float(rank.act_start_s[index].min()),
                  end_s=float(rank.act_end_s[index].max()))
