"""Chrome-trace (Perfetto-loadable) JSON of one predicted step on one rank of the critical stage.

Tracks (tid): 1 compute, 2 exposed communication, 3 overlapped communication, 4 pipeline/step. Layout: for each
micro-batch its forward ops (aggregated per op name, and the overlap slowdown of the forward's hidden traffic),
exposed forward communication, backward ops (incl. recompute and the overlap slowdown), exposed backward
communication; then the pipeline bubble, the exposed
once-per-step transfers and the optimizer. Durations come from the analysis context (op_time_s) and the
prediction's transfer rows, so the last event ends at the predicted step time. Times in microseconds
(Trace Event Format, 'X' complete events and 'M' metadata).

A step of many micro-batches (a global batch of 10⁸ sequences is 10⁸ of them) would be gigabytes of events: past
MAX_EVENTS, the first micro-batches are drawn one by one and the rest as one aggregated block (each op once, its
duration times the micro-batches it stands for, `args.microbatches` naming the range). The document says so in
`otherData.aggregated`, and every track still adds up to the same totals.
"""
from __future__ import annotations

import json
from pathlib import Path

from narrowpath.analysis import Analysis
from narrowpath.analysis.context import critical_times

TRACKS = {1: "compute", 2: "exposed communication", 3: "overlapped communication", 4: "pipeline / step"}
MAX_EVENTS = 20_000
"""Most per-micro-batch events written one by one; past it the remaining micro-batches are aggregated."""


def _ev(name: str, tid: int, start_s: float, dur_s: float, cat: str, args: dict | None = None) -> dict:
    return {"name": name, "ph": "X", "pid": 0, "tid": tid, "ts": start_s * 1e6, "dur": max(0.0, dur_s) * 1e6,
            "cat": cat, "args": args or {}}


def _per_mb(rows, phases) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rows:
        if r.op.phase in phases:
            out[r.op.name] = out.get(r.op.name, 0.0) + r.time_each_s * r.count_per_step
    return out


def shown_microbatches(num_microbatches: int, events_per_microbatch: int, max_events: int = MAX_EVENTS) -> int:
    """Micro-batches drawn one by one: all of them when their events fit in `max_events`, else as many as fit
    (at least one), the rest aggregated into one block."""
    if num_microbatches * events_per_microbatch <= max_events:
        return num_microbatches
    return max(1, min(num_microbatches - 1, max_events // max(1, events_per_microbatch)))


def timeline_events(a: Analysis, max_events: int = MAX_EVENTS) -> list[dict]:
    p = a.prediction
    m = p.workload.num_microbatches
    cs = critical_times(p)[a.context.critical_stage]
    fwd = {k: v / m for k, v in _per_mb(a.context.ops, ("fwd",)).items()}
    bwd = {k: v / m for k, v in _per_mb(a.context.ops, ("bwd", "recompute")).items()}
    # the slowdown of the compute overlapped traffic runs beside, in the pass it runs beside
    slowdown = {"fwd": cs.fwd_compute_s - sum(fwd.values()), "bwd": cs.bwd_compute_s - sum(bwd.values())}
    comm = {"fwd": {}, "bwd": {}}
    hidden = []
    for t in p.transfers:
        if t.phase == "step":
            continue
        ph = "fwd" if t.phase == "fwd" else "bwd"
        if t.exposed_s > 0:
            comm[ph][t.name] = comm[ph].get(t.name, 0.0) + t.exposed_s / m
        if t.total_s > t.exposed_s:
            hidden.append((t.name, ph, (t.total_s - t.exposed_s) / m))
    ev = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": k, "args": {"name": v}} for k, v in TRACKS.items()]
    ev.append({"name": "process_name", "ph": "M", "pid": 0, "args": {"name": f"{p.scenario.name} — stage "
                                                                          f"{a.context.critical_stage} rank"}})
    per_mb = len(fwd) + len(bwd) + 2 + len(hidden) + len(comm["fwd"]) + len(comm["bwd"])
    k = shown_microbatches(m, per_mb, max_events)
    # (args, how many micro-batches the block stands for): one by one, then the rest as one block
    blocks = [({"microbatch": i}, 1) for i in range(k)]
    if k < m:
        blocks.append(({"microbatches": f"{k}-{m - 1}", "aggregated": m - k}, m - k))
    t = 0.0
    for args, n in blocks:
        for ph, ops in (("fwd", fwd), ("bwd", bwd)):
            start_ph = t
            for name, d in ops.items():
                ev.append(_ev(name, 1, t, d * n, ph, args))
                t += d * n
            if slowdown[ph] > 1e-12:
                ev.append(_ev("overlap slowdown", 1, t, slowdown[ph] * n, ph, args))
                t += slowdown[ph] * n
            h0 = start_ph
            for name, hph, d in hidden:
                if hph == ph:
                    ev.append(_ev(name, 3, h0, d * n, "comm", args))
                    h0 += d * n
            for name, d in comm[ph].items():
                ev.append(_ev(name, 2, t, d * n, "comm", args))
                t += d * n
    bubble = p.breakdown_s["bubble"]
    ev.append(_ev("pipeline bubble", 4, t, bubble, "bubble"))
    t += bubble
    for tr in p.transfers:
        if tr.phase == "step":
            if tr.total_s > tr.exposed_s:
                ev.append(_ev(tr.name + " (overlapped)", 3, t - min(t, tr.total_s - tr.exposed_s),
                              tr.total_s - tr.exposed_s, "comm"))
            if tr.exposed_s > 0:
                ev.append(_ev(tr.name, 2, t, tr.exposed_s, "comm"))
                t += tr.exposed_s
    opt = p.breakdown_s["optimizer"]
    ev.append(_ev("optimizer", 1, t, opt, "optimizer"))
    return ev


def timeline_document(a: Analysis, max_events: int = MAX_EVENTS) -> dict:
    """The Chrome-trace document; `otherData.aggregated` says which micro-batches were drawn as one block."""
    events = timeline_events(a, max_events)
    other = {"scenario": a.prediction.scenario.name, "step_time_s": a.prediction.step_time_s}
    agg = next((e["args"] for e in events if e.get("args", {}).get("aggregated")), None)
    if agg is not None:
        other["aggregated"] = {"microbatches": agg["microbatches"], "count": agg["aggregated"],
                               "reason": f"more than {max_events:,} events one by one"}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def aggregation_note(doc: dict) -> str | None:
    """One line on what a timeline document aggregates, or None."""
    agg = doc.get("otherData", {}).get("aggregated")
    if not agg:
        return None
    first, last = (int(x) for x in agg["microbatches"].split("-"))
    return f"micro-batches {first:,} to {last:,} drawn as one aggregated block ({agg['reason']})"


def write_timeline(a: Analysis, path: str) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(timeline_document(a)))
    return out
