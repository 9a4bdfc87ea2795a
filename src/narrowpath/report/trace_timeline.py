"""Re-export a filtered, annotated Chrome trace (Perfetto / chrome://tracing) from the per-rank tables.

Kept: device activities (kernels, memcpy, memset; host ops in CPU-only traces) with their class, category,
step and, for collectives, kind, group size, message size and busbw in `args`; kernel launches; ProfilerStep
markers. Dropped: plain CPU operators, flow arrows, polls. One process per rank (pid = rank), one integer
thread per stream / host thread / step row, named by `thread_name` metadata (Perfetto and chrome://tracing
both read it). Times are µs (`ts`, `dur`, as in Kineto) from the earliest event of the job on the common
clock (`baseTimeNanoseconds` + trace time), so ranks line up and ns resolution survives; the offset of
that zero is in `otherData.zero_unix_ns`. Written incrementally, so memory stays that of the tables.
"""
from __future__ import annotations

import json
import math
import os

import numpy as np

from narrowpath.trace import schema
from narrowpath.trace.collectives import busbw_factor
from narrowpath.trace.kernels import category_codes
from narrowpath.trace.model import Trace


def write_timeline(trace: Trace, path: str, min_dur_s: float = 0.0) -> int:
    """Write the timeline; activities shorter than `min_dur_s` are left out. Returns the number of events."""
    n = 0
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)  # as analyze --timeline does
    with open(path, "w", encoding="utf-8") as fh:
        zero = min((r.origin_ns + r.clock_offset_ns for r in trace.ranks), default=0)
        fh.write(json.dumps({"displayTimeUnit": "ms", "otherData": {
            "producer": "narrowpath trace --timeline", "zero_unix_ns": zero,
            "note": "ts/dur in microseconds from zero_unix_ns (the job's earliest event)"}})[:-1]
                 + ',\n"traceEvents": [\n')
        first = True

        def emit(ev: dict) -> None:
            nonlocal first, n
            fh.write(("" if first else ",\n") + json.dumps(ev, separators=(",", ":")))
            first, n = False, n + 1

        zero_ns = min((r.origin_ns + r.clock_offset_ns for r in trace.ranks), default=0)
        for r in trace.ranks:
            pid = r.rank
            shift_us = (r.origin_ns + r.clock_offset_ns - zero_ns) / 1000.0  # exact integer ns -> µs
            us = lambda s: shift_us + float(s) * 1e6  # noqa: E731
            emit({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"rank {r.rank}"}})
            emit({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": r.rank}})
            tids: dict[str, int] = {}

            def tid(label: str) -> int:
                if label not in tids:
                    tids[label] = len(tids) + 1
                    emit({"ph": "M", "name": "thread_name", "pid": pid, "tid": tids[label], "args": {"name": label}})
                    emit({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tids[label],
                          "args": {"sort_index": tids[label]}})
                return tids[label]

            if r.step_number.size:
                tid("ProfilerStep")
            cats, codes = category_codes(r)
            step_of = np.full(r.num_activities, -1)
            for num, s, d in zip(r.step_number, r.step_start_s, r.step_dur_s):
                step_of[(r.act_launch_s >= s) & (r.act_launch_s < s + d)] = num
            for i in np.flatnonzero(r.act_dur_s >= min_dur_s):
                args = {"class": schema.CLASS_NAMES[r.act_class[i]], "category": cats[codes[r.act_name[i]]],
                        "step": int(step_of[i])}
                if r.act_coll[i] >= 0:
                    kind, size, group = r.coll_kind(i), float(r.act_message_bytes[i]), int(r.act_group_size[i])
                    args.update(collective=kind, group_size=group)
                    if math.isfinite(size):
                        algbw = size / max(float(r.act_dur_s[i]), 1e-12)
                        args.update(message_bytes=size, busbw_GB_per_s=algbw * busbw_factor(kind, group) / 1e9)
                emit({"ph": "X", "name": r.names[r.act_name[i]], "cat": args["class"], "pid": pid,
                      "tid": tid(f"{'thread' if r.host_mode else 'stream'} {int(r.act_lane[i])}"),
                      "ts": us(r.act_start_s[i]), "dur": float(r.act_dur_s[i]) * 1e6, "args": args})
            launches = set(r.act_corr[r.act_corr >= 0].tolist())
            for j in range(r.rt_start_s.size):
                if int(r.rt_corr[j]) in launches or "Synchronize" in r.names[r.rt_name[j]]:
                    emit({"ph": "X", "name": r.names[r.rt_name[j]], "cat": "runtime", "pid": pid,
                          "tid": tid(f"host thread {int(r.rt_tid[j])}"), "ts": us(r.rt_start_s[j]),
                          "dur": float(r.rt_dur_s[j]) * 1e6, "args": {"correlation": int(r.rt_corr[j])}})
            for num, s, d in zip(r.step_number, r.step_start_s, r.step_dur_s):
                emit({"ph": "X", "name": f"ProfilerStep#{int(num)}", "cat": "step", "pid": pid,
                      "tid": tid("ProfilerStep"), "ts": us(s), "dur": float(d) * 1e6})
        fh.write("\n]}\n")
    return n
