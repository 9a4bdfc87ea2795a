"""Facade: every observed account of a trace, per rank and per step, as one frozen report.

Analyses are stateless functions of a `RankTrace` and a `Window` (HTA's layout: one trace object,
stateless analyses); this module only runs them and gathers the results. `report_to_dict` is the JSON form
(`ranks`, each with `rank`, `overlap_pct`, `breakdown_pct` {compute, exposed_comm, memcpy, idle} summing to
100, ...). `JSON_SCHEMA_VERSION` changes whenever a key is added, renamed or removed.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from narrowpath.trace import windows
from narrowpath.trace.breakdown import Breakdown, temporal_breakdown
from narrowpath.trace.collectives import CollectiveGroup, CollectiveSamples, collective_inventory, collective_samples
from narrowpath.trace.critical_path import CriticalPath, critical_path
from narrowpath.trace.idle import IdleCauses, idle_causes
from narrowpath.trace.kernels import KernelCategory, kernel_breakdown
from narrowpath.trace.model import RankTrace, Trace
from narrowpath.trace.stragglers import StragglerReport, straggler_report


JSON_SCHEMA_VERSION = 1
"""Version of the `--json` object's layout (tests/trace/test_cli.py pins the keys)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepAccounts:
    """Accounts of one ProfilerStep on one rank."""

    step: int
    cpu_dur_s: float
    """Duration of the ProfilerStep marker on the CPU."""
    breakdown: Breakdown
    collectives: tuple[CollectiveGroup, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RankAccounts:
    """Observed accounts of one rank over the whole analysis window, plus per step."""

    rank: int
    path: str
    host_mode: bool
    device_name: str | None
    breakdown: Breakdown
    steps: tuple[StepAccounts, ...]
    kernels: tuple[KernelCategory, ...]
    collectives: tuple[CollectiveGroup, ...]
    samples: CollectiveSamples
    idle: IdleCauses
    critical_path: CriticalPath


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceReport:
    """All accounts of a job's trace."""

    ranks: tuple[RankAccounts, ...]
    stragglers: StragglerReport | None


def _critical_step(rank: RankTrace, window: windows.Window, steps: list[windows.Window],
                   step: int | None) -> windows.Window:
    """The requested step, else the longest step inside the analysis window, else the whole window."""
    if step is not None:
        for w in steps:
            if w.step == step:
                return w
        raise KeyError(step)
    complete = steps[:-1] if len(steps) >= 2 else steps
    complete = [w for w in complete if w.index.size]
    if not complete:
        return window
    return max(complete, key=lambda w: w.end_s - w.start_s)


def has_step(trace: Trace, step: int) -> bool:
    """Whether every rank of the trace has ProfilerStep#`step` (what a critical path of that step needs)."""
    return all(any(w.step == step for w in windows.steps(r)) for r in trace.ranks)


def analyze_rank(rank: RankTrace, critical_step: int | None = None) -> RankAccounts:
    window = windows.whole_trace(rank)
    steps = windows.steps(rank)
    samples = collective_samples(rank, window)
    return RankAccounts(
        rank=rank.rank, path=rank.path, host_mode=rank.host_mode, device_name=rank.device_name,
        breakdown=temporal_breakdown(rank, window),
        steps=tuple(StepAccounts(step=w.step, cpu_dur_s=w.end_s - w.start_s, breakdown=temporal_breakdown(rank, w),
                                 collectives=collective_inventory(collective_samples(rank, w))) for w in steps),
        kernels=kernel_breakdown(rank, window), collectives=collective_inventory(samples), samples=samples,
        idle=idle_causes(rank, window),
        critical_path=critical_path(rank, _critical_step(rank, window, steps, critical_step)))


def analyze(trace: Trace, critical_step: int | None = None) -> TraceReport:
    """Every account of every rank, and the cross-rank straggler report."""
    return TraceReport(ranks=tuple(analyze_rank(r, critical_step) for r in trace.ranks),
                       stragglers=straggler_report(trace.ranks, tuple(windows.whole_trace(r) for r in trace.ranks)))


def json_safe(value: Any) -> Any:
    """JSON-safe: NaN/inf become None, tuples lists, dict keys strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def _breakdown_dict(b: Breakdown) -> dict[str, Any]:
    return {"span_s": b.span_s, "overlap_pct": b.overlap_pct, "breakdown_pct": b.pct(),
            "breakdown_s": b.parts_s(), "sync_other_s": b.other_s, "comm_s": b.comm_s, "overlap_s": b.overlap_s}


def report_to_dict(report: TraceReport) -> dict[str, Any]:
    """The `--json` object."""
    ranks = []
    for r in report.ranks:
        d = {"rank": r.rank, "path": r.path, "host_mode": r.host_mode, "device_name": r.device_name}
        d.update(_breakdown_dict(r.breakdown))
        last = len(r.steps) - 1 if len(r.steps) >= 2 else None  # its device slice has no next step to end it
        d["steps"] = [{"step": s.step, "cpu_dur_s": s.cpu_dur_s, "complete": i != last, **_breakdown_dict(s.breakdown),
                       "collectives": [asdict(c) for c in s.collectives]} for i, s in enumerate(r.steps)]
        d["kernels"] = [asdict(k) for k in r.kernels]
        d["collectives"] = [asdict(c) for c in r.collectives]
        d["idle_causes_s"] = dict(r.idle.by_cause_s)
        d["idle_causes_pct"] = r.idle.pct()
        cp = r.critical_path
        d["critical_path"] = {"step": cp.step, "span_s": cp.span_s, "by_category_s": cp.by_category_s,
                              "by_category_pct": cp.pct(), "num_nodes": cp.num_nodes,
                              "top_kernels": [{"name": n, "time_s": t} for n, t in cp.top_kernels]}
        ranks.append(d)
    out: dict[str, Any] = {"schema_version": JSON_SCHEMA_VERSION, "ranks": ranks, "stragglers": asdict(report.stragglers) if report.stragglers else None}
    return json_safe(out)
