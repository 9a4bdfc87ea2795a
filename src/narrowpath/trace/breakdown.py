"""Temporal breakdown and communication-computation overlap of a window of one rank.

Definitions are HTA's (hta/analyzers/breakdown_analysis.py `get_temporal_breakdown`,
hta/analyzers/communication_analysis.py `get_comm_comp_overlap`, v0.5.0):
- span: end of the last activity minus start of the first (HTA "kernel_time"); for a ProfilerStep, the
  step's slice of the device timeline (windows.py), with activities clipped to it;
- idle: span minus the union of all activities;
- compute: union of computation-class kernels;
- non-compute (HTA): union of all minus compute. narrowpath splits it into exposed communication
  (communication kernels while no compute runs), memcpy (memory kernels while neither compute nor
  communication runs) and other (the rest: e.g. `*Sync` kernels alone on the GPU); the four-part
  breakdown (`pct`) counts other under memcpy, so compute + exposed_comm + memcpy + idle = span;
- overlap: time covered by both merged communication and merged computation, over the merged
  communication time (HTA's `comp_comm_overlap_ratio`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from narrowpath.trace import intervals, schema
from narrowpath.trace.model import RankTrace
from narrowpath.trace.windows import Window


@dataclass(frozen=True, slots=True, kw_only=True)
class Breakdown:
    """Where a window's device time went, in seconds; the parts sum to `span_s`."""

    span_s: float
    compute_s: float
    exposed_comm_s: float
    memcpy_s: float
    other_s: float
    idle_s: float
    comm_s: float
    """Union of communication time (exposed or hidden)."""
    overlap_s: float
    """Communication time during which compute also runs."""

    @property
    def overlap_pct(self) -> float:
        """HTA comp_comm_overlap: share of communication time overlapped by compute, in percent (the overlap is an
        interval intersection of the same sums, so a ratio above 100 is rounding: clamped)."""
        return min(100.0, 100.0 * self.overlap_s / self.comm_s) if self.comm_s > 0 else 0.0

    def parts_s(self) -> dict[str, float]:
        """The four parts of the span in seconds: compute, exposed_comm, memcpy, idle.

        `memcpy` here includes `other_s` (HTA class "other": `*Sync` activities such as Event Sync, alone on
        the GPU), so the four parts sum to the span and `exposed_comm + memcpy` is HTA's non-compute time."""
        return {"compute": self.compute_s, "exposed_comm": self.exposed_comm_s,
                "memcpy": self.memcpy_s + self.other_s, "idle": self.idle_s}

    def pct(self) -> dict[str, float]:
        """`parts_s` in percent of the span (summing to 100; all 0 for an empty window)."""
        span = self.span_s or 1.0
        return {k: 100.0 * v / span for k, v in self.parts_s().items()}


def temporal_breakdown(rank: RankTrace, window: Window) -> Breakdown:
    """Breakdown of the activities selected by `window` (see module docstring for the definitions)."""
    sel = window.index if window.time_index is None else window.time_index
    if sel.size == 0:
        return Breakdown(span_s=0.0, compute_s=0.0, exposed_comm_s=0.0, memcpy_s=0.0, other_s=0.0, idle_s=0.0,
                         comm_s=0.0, overlap_s=0.0)
    cls, start, end = rank.act_class[sel], rank.act_start_s[sel], rank.act_end_s[sel]
    if window.time_index is not None:  # a step: its slice of the device timeline, activities clipped to it
        start = np.clip(start, window.span_start_s, window.span_end_s)
        end = np.clip(end, window.span_start_s, window.span_end_s)
    ones = np.ones(sel.size, dtype=bool)

    def _merged(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return intervals.merge(start[mask], end[mask])

    all_s, all_e = _merged(ones)
    span = float(all_e[-1] - all_s[0]) if window.time_index is None else window.span_end_s - window.span_start_s
    busy = intervals.length(all_s, all_e)
    comp_s, comp_e = _merged(cls == schema.CLASS_COMPUTE)
    comm_s, comm_e = _merged(cls == schema.CLASS_COMM)
    cc_s, cc_e = _merged((cls == schema.CLASS_COMPUTE) | (cls == schema.CLASS_COMM))
    ccm_s, ccm_e = _merged(cls != schema.CLASS_OTHER)
    compute = intervals.length(comp_s, comp_e)
    comm = intervals.length(comm_s, comm_e)
    overlap = intervals.intersection(comm_s, comm_e, comp_s, comp_e)
    compute_or_comm = intervals.length(cc_s, cc_e)
    memcpy = intervals.length(ccm_s, ccm_e) - compute_or_comm
    exposed = compute_or_comm - compute
    return Breakdown(span_s=span, compute_s=compute, exposed_comm_s=exposed, memcpy_s=memcpy,
                     other_s=max(busy - compute - exposed - memcpy, 0.0), idle_s=span - busy, comm_s=comm,
                     overlap_s=overlap)
