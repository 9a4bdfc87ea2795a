"""Critical path of one step on one rank, by walking dependencies backwards from the step's last activity.

Dependencies (as in HTA's critical-path graph, hta/analyzers/critical_path_analysis.py, simplified to what a
Kineto trace shows without CPU operators): an activity depends on the previous activity of its stream
(stream order), on its launching runtime call (correlation id), and on the activity of another stream that
ended last before it started, when that end is later than both other releases (only a cross-stream event or
stream wait can then explain the start: Kineto files of this age carry no event ids); a runtime call depends on
the previous runtime call of its thread (program order), and a blocking call on the activity that finished
last before it returned: any `*Synchronize` call, or a call that returned within `BLOCKING_RETURN_S` of an
activity's end (e.g. a `cudaMemcpyAsync` to pageable memory, which blocks until the copy is done). Going back from the latest-ending activity, each node hands
over to the dependency released last; the time between that release and the node's end is charged to the
node (its own duration by category, the rest as a wait), so the path's parts sum to the step's span.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from narrowpath.trace import schema
from narrowpath.trace.model import RankTrace
from narrowpath.trace.windows import Window

BLOCKING_RETURN_S = 50e-6
PATH_CATEGORIES = ("compute", "communication", "memcpy", "gpu_other", "gpu_wait", "launch_delay", "runtime",
                   "cpu", "sync_wait")
_CLASS_TO_CAT = {schema.CLASS_COMPUTE: "compute", schema.CLASS_COMM: "communication",
                 schema.CLASS_MEMORY: "memcpy", schema.CLASS_OTHER: "gpu_other"}


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


def critical_path(rank: RankTrace, window: Window) -> CriticalPath:
    acts = window.index
    cats = dict.fromkeys(PATH_CATEGORIES, 0.0)
    if acts.size == 0:
        return CriticalPath(step=window.step, span_s=0.0, by_category_s=cats, num_nodes=0, top_kernels=())
    start, end = rank.act_start_s.tolist(), rank.act_end_s.tolist()
    lane, cls, corr = rank.act_lane.tolist(), rank.act_class.tolist(), rank.act_corr.tolist()
    lane_lists: dict[int, list[int]] = {}
    pos_in_lane = {}
    for i in acts.tolist():
        lst = lane_lists.setdefault(lane[i], [])
        pos_in_lane[i] = len(lst)
        lst.append(i)
    by_end = sorted(acts.tolist(), key=lambda i: end[i])
    ends_sorted = [end[i] for i in by_end]
    t0 = min(window.start_s, float(rank.act_start_s[acts].min()))
    rt_lo, rt_hi = np.searchsorted(rank.rt_start_s, [t0 - 1.0, float(rank.act_end_s[acts].max())])
    rts = range(int(rt_lo), int(rt_hi))
    rt_start, rt_dur, rt_tid = rank.rt_start_s, rank.rt_dur_s, rank.rt_tid
    rt_by_corr = {int(rank.rt_corr[j]): j for j in rts if rank.rt_corr[j] >= 0}
    thread_lists: dict[int, list[int]] = {}
    pos_in_thread = {}
    for j in rts:
        lst = thread_lists.setdefault(int(rt_tid[j]), [])
        pos_in_thread[j] = len(lst)
        lst.append(j)
    sync_names = {k for k, n in enumerate(rank.names) if "Synchronize" in n}
    on_path: dict[int, float] = {}

    node, is_act = by_end[-1], True
    t = end[node]
    span = t - t0
    nodes = 0
    visited: set[tuple[bool, int]] = set()
    while t > t0 and (is_act, node) not in visited:  # every hop goes back in time; a revisit would loop
        visited.add((is_act, node))
        nodes += 1
        if is_act:
            s = start[node]
            cats[_CLASS_TO_CAT[cls[node]]] += t - max(s, t0)
            on_path[node] = on_path.get(node, 0.0) + t - max(s, t0)
            cands = []  # (release time, is_act, index, wait category)
            p = pos_in_lane[node]
            if p > 0:
                prev = lane_lists[lane[node]][p - 1]
                cands.append((min(end[prev], s), True, prev, "gpu_wait"))
            j = rt_by_corr.get(corr[node])
            if j is not None:
                cands.append((min(rt_start[j] + rt_dur[j], s), False, j, "launch_delay"))
            k = bisect.bisect_right(ends_sorted, s) - 1
            while k >= 0 and lane[by_end[k]] == lane[node]:
                k -= 1
            if k >= 0 and (not cands or ends_sorted[k] > max(c[0] for c in cands)):
                cands.append((ends_sorted[k], True, by_end[k], "gpu_wait"))
            if not cands:
                t = max(s, t0)
                break
            release, is_act, nxt, wait = max(cands, key=lambda c: c[0])
            cats[wait] += max(s - max(release, t0), 0.0)
            t, node = min(release, s), nxt
        else:
            s, e = float(rt_start[node]), float(rt_start[node] + rt_dur[node])
            release, nxt_act, wait = None, None, "cpu"
            k = bisect.bisect_right(ends_sorted, e) - 1
            if t >= e and k >= 0 and ends_sorted[k] > s and (rank.rt_name[node] in sync_names
                                                             or e - ends_sorted[k] <= BLOCKING_RETURN_S):
                release, nxt_act = ends_sorted[k], by_end[k]  # reached at its return: it waited for that
            if nxt_act is not None:
                cats["sync_wait"] += t - max(release, t0)
                t, node, is_act = release, nxt_act, True
                continue
            cats["runtime"] += max(min(t, e) - max(s, t0), 0.0)
            p = pos_in_thread.get(node, 0)
            if p == 0:
                cats[wait] += max(s - t0, 0.0)
                t = t0
                break
            prev = thread_lists[int(rt_tid[node])][p - 1]
            pe = float(rt_start[prev] + rt_dur[prev])
            cats[wait] += max(s - max(pe, t0), 0.0)
            t, node = min(pe, s), prev
    if t > t0:  # no tracked dependency reaches further back: host code ran before it
        cats["cpu"] += t - t0
    top = sorted(on_path.items(), key=lambda kv: -kv[1])[:5]
    return CriticalPath(step=window.step, span_s=span, by_category_s={k: float(v) for k, v in cats.items()}, num_nodes=nodes,
                        top_kernels=tuple((rank.names[rank.act_name[i]][:80], v) for i, v in top))
