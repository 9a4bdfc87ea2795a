"""The critical-path walk, the idle-gap causes and the collective inventory as narrowpath computed them before
they were made O(n log n) or vectorised, kept verbatim as the independent references the fast ones must
reproduce exactly (test_fast_analyses.py). The walk is quadratic in the activities of a stream (for every
activity it walks back over the earlier ends of the same stream); the idle causes sort every other stream's ends
once per stream; the collectives were one Python object per communication kernel, twice per step."""
from __future__ import annotations

import bisect

import numpy as np

from narrowpath.trace import schema
from narrowpath.trace.critical_path import BLOCKING_RETURN_S, PATH_CATEGORIES
from narrowpath.trace.collectives import CollectiveGroup, CollectiveSample, busbw_factor
from narrowpath.trace.idle import IDLE_CAUSES

_CLASS_TO_CAT = {schema.CLASS_COMPUTE: "compute", schema.CLASS_COMM: "communication",
                 schema.CLASS_MEMORY: "memcpy", schema.CLASS_OTHER: "gpu_other"}
def reference_critical_path(rank, window):
    """(span_s, by_category_s, num_nodes, top_kernels) as the old walk computed them."""
    acts = window.index
    cats = dict.fromkeys(PATH_CATEGORIES, 0.0)
    if acts.size == 0:
        return 0.0, cats, 0, ()
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
    return (span, {k: float(v) for k, v in cats.items()}, nodes,
            tuple((rank.names[rank.act_name[i]][:80], v) for i, v in top))


def reference_idle_causes(rank, window, consecutive_kernel_delay_s=30e-9, sync_tolerance_s=20e-6):
    """(by_cause_s, num_gaps) as the old per-stream loop computed them."""
    sel = window.index
    totals = dict.fromkeys(IDLE_CAUSES, 0.0)
    if sel.size < 2:
        return totals, 0
    start, end, lane = rank.act_start_s[sel], rank.act_end_s[sel], rank.act_lane[sel]
    launch = rank.act_launch_s[sel]
    num_gaps = 0
    for stream in np.unique(lane):
        on = lane == stream
        idx = np.flatnonzero(on)  # already sorted by start
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
        other_ends = np.sort(end[~on])  # latest end on another stream before the gap closes
        k = np.searchsorted(other_ends, start[nxt], side="right") - 1
        latest = np.where(k >= 0, other_ends[np.maximum(k, 0)] if other_ends.size else 0.0, -np.inf)
        other = ~host & ~kernel & (latest > prev_end) & (start[nxt] - latest <= sync_tolerance_s)
        totals["host_wait"] += float(gap[host].sum())
        totals["kernel_wait"] += float(gap[kernel].sum())
        totals["other_stream_wait"] += float(gap[other].sum())
        totals["other"] += float(gap[~host & ~kernel & ~other].sum())
    return totals, num_gaps


def reference_collective_samples(rank, window):
    """The samples as the old per-kernel loop built them."""
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


def reference_collective_inventory(samples):
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
