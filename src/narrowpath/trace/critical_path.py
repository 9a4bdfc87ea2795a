"""Critical path of one step on one rank, by walking dependencies backwards from the step's last activity.

Dependencies (as in HTA's critical-path graph, hta/analyzers/critical_path_analysis.py, simplified to what a
Kineto trace shows without CPU operators): an activity depends on the previous activity of its stream
(stream order), on its launching runtime call (correlation id), and on the activity of another stream that
ended last before it started, when that end is later than both other releases (only a cross-stream event or
stream wait can then explain the start: Kineto files of this age carry no event ids); a runtime call depends on
the previous runtime call of its thread (program order), and a blocking call on the activity that finished
last before it returned: any `*Synchronize` call, or a call that returned within `BLOCKING_RETURN_S` of an
activity's end (e.g. a `cudaMemcpyAsync` to pageable memory, which blocks until the copy is done). Going back
from the latest-ending activity, each node hands over to the dependency released last; the time between that
release and the node's end is charged to the node (its own duration by category, the rest as a wait), so the
path's parts sum to the step's span.

Cost: O(n log n) in the step's activities and runtime calls. Every node's dependencies are found for all nodes
at once with sorts and binary searches (`_activity_steps`, `_runtime_steps`); "the last end on another
stream" is the last end before the start, or, when that activity is on the node's own stream, the last end
before the run of own-stream ends it belongs to. The walk then costs O(1) a node. (It used to walk back over
every earlier activity of the node's stream: quadratic, 63 s for 50k kernels on one stream.)
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np

from narrowpath.trace import schema
from narrowpath.trace.model import RankTrace
from narrowpath.trace.windows import Window

BLOCKING_RETURN_S = 50e-6
PATH_CATEGORIES = ("compute", "communication", "memcpy", "gpu_other", "gpu_wait", "launch_delay", "runtime",
                   "cpu", "sync_wait")
_CAT = {c: i for i, c in enumerate(PATH_CATEGORIES)}
_CLASS_TO_CAT = {schema.CLASS_COMPUTE: _CAT["compute"], schema.CLASS_COMM: _CAT["communication"],
                 schema.CLASS_MEMORY: _CAT["memcpy"], schema.CLASS_OTHER: _CAT["gpu_other"]}
_NONE, _ACT, _RT = 0, 1, 2
"""Kinds of a node's next hop: none (the walk stops), an activity, a runtime call."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CriticalPath:
    """A step's critical path on one rank: seconds per category, and the nodes walked."""

    step: int | None
    span_s: float
    """From the step's CPU start to its last activity's end."""
    by_category_s: dict[str, float]
    num_nodes: int
    top_kernels: tuple[tuple[str, float], ...]
    """Kernels on the path with the most time on it: (name, seconds), at most 5."""

    def pct(self) -> dict[str, float]:
        span = self.span_s or 1.0
        return {k: 100.0 * v / span for k, v in self.by_category_s.items()}


@dataclass(frozen=True, slots=True)
class _Ends:
    """The window's activities ordered by end (ties in start order), and for each position the last earlier
    position on another stream (-1: none)."""

    order: np.ndarray
    end_s: np.ndarray
    lane: np.ndarray
    before_run: np.ndarray

    def last_before(self, t: np.ndarray) -> np.ndarray:
        """Position of the last activity ending at or before each time t (-1: none)."""
        return np.searchsorted(self.end_s, t, side="right") - 1


def _ends(end_s: np.ndarray, lane: np.ndarray) -> _Ends:
    order = np.argsort(end_s, kind="stable")
    lane_e = lane[order]
    n = order.size
    change = np.ones(n, dtype=bool)
    change[1:] = lane_e[1:] != lane_e[:-1]
    run_start = np.maximum.accumulate(np.where(change, np.arange(n), 0)) if n else np.zeros(0, np.int64)
    return _Ends(order=order, end_s=end_s[order], lane=lane_e, before_run=run_start - 1)


def _previous_in_group(group: np.ndarray) -> np.ndarray:
    """For each position, the previous position with the same group value (-1 for the first)."""
    order = np.argsort(group, kind="stable")
    prev = np.full(group.size, -1, dtype=np.int64)
    if group.size > 1:
        same = group[order[1:]] == group[order[:-1]]
        prev[order[1:][same]] = order[:-1][same]
    return prev


def _launch_rows(corr: np.ndarray, rt_corr: np.ndarray) -> np.ndarray:
    """For each activity, the runtime row (within the rows given) with its correlation id, the last one when
    several share it (a CUDA graph); -1 when none."""
    rows = np.flatnonzero(rt_corr >= 0)
    if rows.size == 0 or corr.size == 0:
        return np.full(corr.size, -1, dtype=np.int64)
    order = np.lexsort((rows, rt_corr[rows]))  # by correlation, then row: the last of equal ids wins below
    keys, rows = rt_corr[rows][order], rows[order]
    pos = np.searchsorted(keys, corr, side="right") - 1
    hit = (pos >= 0) & (keys[np.maximum(pos, 0)] == corr) & (corr >= 0)
    return np.where(hit, rows[np.maximum(pos, 0)], -1)


def _activity_steps(start, end, lane, launch_row, rt_end, ends: _Ends):
    """Per activity: (kind of next hop, its index, release time, wait category) — the dependency released last
    among stream order, launch and the last end on another stream (that one only when strictly later)."""
    n = start.size
    prev = _previous_in_group(lane)
    r1 = np.where(prev >= 0, np.minimum(end[np.maximum(prev, 0)], start), -np.inf)
    has_launch = launch_row >= 0
    r2 = np.where(has_launch, np.minimum(rt_end[launch_row], start), -np.inf) if rt_end.size else \
        np.full(n, -np.inf)
    k = ends.last_before(start)
    kk = np.maximum(k, 0)
    k_other = np.where(k < 0, -1, np.where(ends.lane[kk] != lane, k, ends.before_run[kk])) if n else k
    r3 = np.where(k_other >= 0, ends.end_s[np.maximum(k_other, 0)], -np.inf)
    use2 = has_launch & (r2 > r1)  # max() keeps the first of equal releases: stream order before launch
    r12 = np.where(use2, r2, r1)
    use3 = (k_other >= 0) & (((prev < 0) & ~has_launch) | (r3 > r12))
    kind = np.where(use3 | (prev >= 0), _ACT, np.where(has_launch, _RT, _NONE))
    kind = np.where(use2 & ~use3, _RT, kind)
    index = np.where(use3, ends.order[np.maximum(k_other, 0)], np.where(use2, launch_row, prev))
    release = np.where(use3, r3, r12)
    wait = np.where(use2 & ~use3, _CAT["launch_delay"], _CAT["gpu_wait"])
    return kind, index, release, wait


def _runtime_steps(rt_start, rt_end, rt_tid, rt_sync, ends: _Ends):
    """Per runtime call: the previous call of its thread, and the activity a blocking call waited for (the last
    to end before it returned, when it ended inside the call; -1: none) with that end."""
    prev = _previous_in_group(rt_tid)
    k = ends.last_before(rt_end)
    kk = np.maximum(k, 0)
    last_end = ends.end_s[kk] if ends.end_s.size else np.zeros(k.size)
    blocks = (k >= 0) & (last_end > rt_start) & (rt_sync | (rt_end - last_end <= BLOCKING_RETURN_S))
    target = np.where(blocks, ends.order[kk] if ends.order.size else 0, -1)
    return prev, target, last_end


def critical_path(rank: RankTrace, window: Window) -> CriticalPath:
    acts = window.index
    if acts.size == 0:
        return CriticalPath(step=window.step, span_s=0.0, by_category_s=dict.fromkeys(PATH_CATEGORIES, 0.0),
                            num_nodes=0, top_kernels=())
    start, end, lane = rank.act_start_s[acts], rank.act_end_s[acts], rank.act_lane[acts]
    ends = _ends(end, lane)
    t0 = min(window.start_s, float(start.min()))
    rt_lo, rt_hi = (int(x) for x in np.searchsorted(rank.rt_start_s, [t0 - 1.0, float(end.max())]))
    rt_start = rank.rt_start_s[rt_lo:rt_hi]
    rt_end = rt_start + rank.rt_dur_s[rt_lo:rt_hi]
    sync_names = np.array(["Synchronize" in n for n in rank.names] or [False])
    rt_sync = sync_names[rank.rt_name[rt_lo:rt_hi]] if rt_hi > rt_lo else np.zeros(0, dtype=bool)
    a_kind, a_next, a_release, a_wait = _activity_steps(
        start, end, lane, _launch_rows(rank.act_corr[acts], rank.rt_corr[rt_lo:rt_hi]), rt_end, ends)
    r_prev, r_block, r_block_end = _runtime_steps(rt_start, rt_end, rank.rt_tid[rt_lo:rt_hi], rt_sync, ends)
    cat_of = [_CLASS_TO_CAT[int(c)] for c in range(4)]
    return _walk(rank, window, acts, t0, start.tolist(), end.tolist(), rank.act_class[acts].tolist(), cat_of,
                 (a_kind.tolist(), a_next.tolist(), a_release.tolist(), a_wait.tolist()),
                 (rt_start.tolist(), rt_end.tolist(), r_prev.tolist(), r_block.tolist(), r_block_end.tolist()),
                 int(ends.order[-1]))


def _walk(rank, window, acts, t0, start, end, cls, cat_of, act_steps, rt_steps, last) -> CriticalPath:
    """Follow the precomputed hops back from the last-ending activity (O(1) a node)."""
    a_kind, a_next, a_release, a_wait = act_steps
    rt_start, rt_end, r_prev, r_block, r_block_end = rt_steps
    acc = [0.0] * len(PATH_CATEGORIES)
    seen_act, seen_rt = bytearray(len(start)), bytearray(len(rt_start))
    path_nodes, path_time = array("q"), array("d")
    runtime_cat, cpu_cat, sync_cat = _CAT["runtime"], _CAT["cpu"], _CAT["sync_wait"]
    node, is_act = last, True
    t = end[node]
    span = t - t0
    nodes = 0
    while t > t0:  # every hop goes back in time; a revisit would loop
        if is_act:
            if seen_act[node]:
                break
            seen_act[node] = 1
            nodes += 1
            s = start[node]
            own = t - max(s, t0)
            acc[cat_of[cls[node]]] += own
            path_nodes.append(node)
            path_time.append(own)
            kind = a_kind[node]
            if kind == _NONE:
                t = max(s, t0)
                break
            release = a_release[node]
            acc[a_wait[node]] += max(s - max(release, t0), 0.0)
            t, node, is_act = min(release, s), a_next[node], kind == _ACT
        else:
            if seen_rt[node]:
                break
            seen_rt[node] = 1
            nodes += 1
            s, e = rt_start[node], rt_end[node]
            if t >= e and r_block[node] >= 0:  # reached at its return: it waited for that activity
                release = r_block_end[node]
                acc[sync_cat] += t - max(release, t0)
                t, node, is_act = release, r_block[node], True
                continue
            acc[runtime_cat] += max(min(t, e) - max(s, t0), 0.0)
            prev = r_prev[node]
            if prev < 0:
                acc[cpu_cat] += max(s - t0, 0.0)
                t = t0
                break
            pe = rt_end[prev]
            acc[cpu_cat] += max(s - max(pe, t0), 0.0)
            t, node = min(pe, s), prev
    if t > t0:  # no tracked dependency reaches further back: host code ran before it
        acc[cpu_cat] += t - t0
    top = np.argsort(-np.frombuffer(path_time, dtype=np.float64), kind="stable")[:5] if path_time else []
    return CriticalPath(step=window.step, span_s=span, by_category_s=dict(zip(PATH_CATEGORIES, acc)),
                        num_nodes=nodes, top_kernels=tuple(
                            (rank.names[rank.act_name[acts[path_nodes[i]]]][:80], path_time[i]) for i in top))
