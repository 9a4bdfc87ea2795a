"""Chrome-trace (Perfetto-loadable) JSON of the logged lane of a serving run: one slice per iteration (merged
decode steps are one slice with their step count), and counters of decodes, prompt tokens and KV blocks in use.
Times in microseconds (Trace Event Format)."""
from __future__ import annotations

import json
from pathlib import Path

from narrowpath.schedule.serving_run import ServingRun


TRACKS = {"lane": (1, "iterations"), "prefill": (1, "prefill instance: iterations"),
          "decode": (2, "decode instance: iterations")}
"""Thread id and name of each logged lane's role (IterationRecord.role): a disaggregated deployment logs one lane
of each instance, whose iterations overlap in time."""


def serving_timeline_events(run: ServingRun) -> list[dict]:
    log = run.result.log
    roles = list(dict.fromkeys(r.role for r in log)) or ["lane"]
    ev = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": f"lane 0 of {run.scenario.name}"}}]
    for role in roles:
        tid, name = TRACKS[role]
        ev.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": name}})
    for r in log:
        kind = "prefill + decode" if r.prompt_tokens and r.decodes else "prefill" if r.prompt_tokens else "decode"
        tid = TRACKS[r.role][0]
        suffix = "" if r.role == "lane" else f" ({r.role})"
        ev.append({"name": kind + (f" ×{r.steps}" if r.steps > 1 else ""), "ph": "X", "pid": 0, "tid": tid,
                   "ts": r.start_s * 1e6, "dur": r.duration_s * 1e6, "cat": kind,
                   "args": {"decodes": r.decodes, "prompt_tokens": r.prompt_tokens, "steps": r.steps,
                            "kv_blocks_used": r.kv_blocks_used}})
        ev.append({"name": "batch" + suffix, "ph": "C", "pid": 0, "ts": r.start_s * 1e6,
                   "args": {"decodes": r.decodes, "prompt_tokens": r.prompt_tokens}})
        ev.append({"name": "kv blocks" + suffix, "ph": "C", "pid": 0, "ts": r.start_s * 1e6,
                   "args": {"used": r.kv_blocks_used}})
    return ev


def write_serving_timeline(run: ServingRun, path: str | Path) -> Path:
    p = Path(path)
    p.write_text(json.dumps({"traceEvents": serving_timeline_events(run), "displayTimeUnit": "ms"}))
    return p
