"""Idle-gap causes per stream: why each gap between consecutive activities on a stream happened.

Categories, after HTA `_analyze_idle_time_for_stream` (hta/analyzers/breakdown_analysis.py, v0.5.0):
- host_wait: the next activity's launch started after the previous one ended (the CPU did not enqueue
  work fast enough; HTA HOST_WAIT);
- kernel_wait: not host_wait and the gap is below `consecutive_kernel_delay_s` (30 ns, HTA's default):
  the back-to-back launch overhead (HTA KERNEL_WAIT);
- other_stream_wait (narrowpath's split of HTA's OTHER): an activity on another stream ended inside the gap
  within `sync_tolerance_s` of its end, i.e. the stream waited on another stream (event/stream wait);
- other: the rest.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from narrowpath.trace.model import RankTrace
from narrowpath.trace.windows import Window

CONSECUTIVE_KERNEL_DELAY_S = 30e-9
SYNC_TOLERANCE_S = 20e-6
IDLE_CAUSES = ("host_wait", "kernel_wait", "other_stream_wait", "other")


@dataclass(frozen=True, slots=True, kw_only=True)
class IdleCauses:
    """Gap time per cause, summed over the streams of a window."""

    by_cause_s: dict[str, float]
    num_gaps: int

    @property
    def total_s(self) -> float:
        return sum(self.by_cause_s.values())

    def pct(self) -> dict[str, float]:
        total = self.total_s or 1.0
        return {k: 100.0 * v / total for k, v in self.by_cause_s.items()}


def idle_causes(rank: RankTrace, window: Window, consecutive_kernel_delay_s: float = CONSECUTIVE_KERNEL_DELAY_S,
                sync_tolerance_s: float = SYNC_TOLERANCE_S) -> IdleCauses:
    """O(n log n) in the window's activities: one sort groups them by stream, and the latest end on another
    stream before each gap closes comes from one sort of all ends (`latest_other_end`)."""
    sel = window.index
    totals = dict.fromkeys(IDLE_CAUSES, 0.0)
    if sel.size < 2:
        return IdleCauses(by_cause_s=totals, num_gaps=0)
    start, end, lane = rank.act_start_s[sel], rank.act_end_s[sel], rank.act_lane[sel]
    launch = rank.act_launch_s[sel]
    by_lane = np.argsort(lane, kind="stable")  # grouped by stream, each group in start order
    bounds = np.flatnonzero(np.diff(lane[by_lane])) + 1
    ends_order = np.argsort(end, kind="stable")
    num_gaps = 0
    for idx in np.split(by_lane, bounds):
        if idx.size < 2:
            continue
        prev_end = np.maximum.accumulate(end[idx])[:-1]
        nxt = idx[1:]
        gap = start[nxt] - prev_end
        pos = gap > 0
        nxt, gap, prev_end = nxt[pos], gap[pos], prev_end[pos]
        num_gaps += int(gap.size)
        host = np.nan_to_num(launch[nxt], nan=-np.inf) > prev_end
        kernel = ~host & (gap < consecutive_kernel_delay_s)
        latest = latest_other_end(end, lane, ends_order, start[nxt], lane[idx[0]])
        other = ~host & ~kernel & (latest > prev_end) & (start[nxt] - latest <= sync_tolerance_s)
        totals["host_wait"] += float(gap[host].sum())
        totals["kernel_wait"] += float(gap[kernel].sum())
        totals["other_stream_wait"] += float(gap[other].sum())
        totals["other"] += float(gap[~host & ~kernel & ~other].sum())
    return IdleCauses(by_cause_s=totals, num_gaps=num_gaps)


def latest_other_end(end: np.ndarray, lane: np.ndarray, ends_order: np.ndarray, t: np.ndarray,
                     own_lane) -> np.ndarray:
    """For each time t, the latest end at or before t of an activity not on `own_lane` (-inf when none).

    `ends_order` sorts `end` (stable). The last end before t is the answer unless it is on the own stream; then
    the answer is the last end before that stream's run of consecutive ends, found by binary search on the
    positions where the sorted ends change stream."""
    ends = end[ends_order]
    lanes = lane[ends_order]
    k = np.searchsorted(ends, t, side="right") - 1
    starts_run = np.flatnonzero(np.concatenate(([True], lanes[1:] != lanes[:-1])))
    kk = np.maximum(k, 0)
    run_start = starts_run[np.searchsorted(starts_run, kk, side="right") - 1] if ends.size else kk
    k_other = np.where(k < 0, -1, np.where(lanes[kk] != own_lane, k, run_start - 1)) if ends.size else k
    return np.where(k_other >= 0, ends[np.maximum(k_other, 0)] if ends.size else 0.0, -np.inf)
