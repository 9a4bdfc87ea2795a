"""Chrome-trace (Perfetto-loadable) JSON of the simulated steps on chosen ranks.

pid = rank, one track (tid) per stream: compute (passes, optimizer), tensor-parallel collectives (the engine folds
them into their pass's run; drawn where they fall in the pass, stretched to its simulated length), pipeline
(send/recv), collectives across units (cp/ep/dp groups), gradient sync, step end.
Flow events ('s'/'f', one id per message or collective) link the two ends of a pipeline message and the
recorded members of one collective. Times in microseconds from the job's start (Trace Event Format).
"""
from __future__ import annotations

import json
from pathlib import Path

from narrowpath.schedule.sim import SimResult

TRACKS = {"compute": 1, "tp": 2, "pp": 3, "collective": 4, "dp": 5, "step": 6}
NAMES = {1: "compute stream", 2: "tensor-parallel collectives (placed in their pass)", 3: "pipeline send/recv",
         4: "collectives across units (cp/ep/dp)", 5: "gradient sync (dp)", 6: "step end"}


def sim_timeline_events(r: SimResult) -> list[dict]:
    ranks = sorted({e.rank for e in r.events})
    out: list[dict] = []
    for rank in ranks:
        out.append({"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"rank {rank}"}})
        for tid, name in NAMES.items():
            out.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": name}})
    flows: dict[int, list] = {}
    for e in r.events:
        tid = TRACKS[e.track]
        ev = {"name": e.name, "ph": "X", "pid": e.rank, "tid": tid, "ts": e.start_s * 1e6,
              "dur": max(0.0, e.end_s - e.start_s) * 1e6, "cat": e.track, "args": dict(e.args)}
        out.append(ev)
        if e.flow is not None:
            flows.setdefault(e.flow, []).append(ev)
    for fid, evs in flows.items():
        if len(evs) < 2:
            continue
        evs = sorted(evs, key=lambda x: (x["ts"], x["pid"]))
        for k, ev in enumerate(evs):
            ph = "s" if k == 0 else ("f" if k == len(evs) - 1 else "t")
            out.append({"name": ev["name"], "ph": ph, "id": fid, "pid": ev["pid"], "tid": ev["tid"], "ts": ev["ts"],
                        "cat": "link", **({"bp": "e"} if ph == "f" else {})})
    return out


def write_sim_timeline(r: SimResult, path: str) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"traceEvents": sim_timeline_events(r), "displayTimeUnit": "ms",
           "otherData": {"scenario": r.prediction.scenario.name, "seed": r.seed, "schedule": r.schedule,
                         "closed_form_step_time_s": r.closed_form_step_time_s}}
    out.write_text(json.dumps(doc))
    return out
