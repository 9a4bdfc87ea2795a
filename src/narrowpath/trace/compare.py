"""Observed accounts beside a prediction for the same scenario, with the differences that matter named.

The prediction is taken as an object with `step_time_s`, `breakdown_s` (keys compute, exposed_*_comm,
bubble, optimizer; summing to step_time_s) and `transfers` (items with op, message_bytes, count,
time_each_s, total_s, exposed_s) — narrowpath.schedule.step.StepPrediction — so this module imports no stage
to its right. Mapping of predicted parts onto observed ones: compute (less the GPU's waits for its host) + optimizer
-> compute; the exposed communication of every axis -> exposed_comm; bubble and the host waits -> idle; memcpy is not
predicted (0).
A difference "matters" when a share differs by at least `min_pct_points` percentage points, the step time
or a collective's count, time per call or largest message by more than a factor `min_ratio`, or a collective
kind appears on one side only. Each is stated in percentage points of the step where it has a share (a
collective kind's share = calls per step × time per call / step time, on each side), and they are listed
largest first (a step-time mismatch leads).
The observed step is the mean device-side duration of the complete ProfilerSteps (windows.py).
Kernel time by class: the trace's kernel categories (kernels.py) summed into the model's classes
(`KERNEL_CLASS_OF`) per step on the rank with the most kernel time, beside `prediction.gpu_time_by_class_s()`
(each op at its roofline time); a class matters when its share of the step differs by `min_pct_points`. On a
real H200 trace of an eager PyTorch step this showed what the step time hid: GEMMs faster and element-wise work
slower than predicted (benchmarks/heldout_h200.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from narrowpath.trace.analyze import TraceReport

MIN_PCT_POINTS = 5.0
MIN_RATIO = 1.5
KERNEL_CLASS_OF = {"gemm": "gemm", "convolution": "gemm", "attention": "attention", "optimizer": "optimizer",
                   "elementwise": "elementwise", "normalization": "elementwise", "reduction": "elementwise",
                   "other": "elementwise"}
"""Trace kernel categories (schema.KERNEL_CATEGORIES) → the model's kernel classes
(StepPrediction.gpu_time_by_class_s); communication, memcpy and memset have rows of their own."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveSide:
    """One collective kind on one side: per-step count, message range, time per call."""

    kind: str
    count_per_step: float
    min_message_bytes: float
    max_message_bytes: float
    time_each_s: float
    """Median duration per call (observed) or predicted time per call (largest-count pattern)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """Observed (mean over ranks) versus predicted."""

    observed_step_s: float
    """Mean GPU span of the ProfilerSteps (whole window when the trace has none)."""
    predicted_step_s: float
    observed_pct: dict[str, float]
    predicted_pct: dict[str, float]
    observed_overlap_pct: float
    predicted_overlap_pct: float
    """Hidden share of predicted communication time: 1 - sum(exposed_s) / sum(total_s)."""
    observed_collectives: tuple[CollectiveSide, ...]
    predicted_collectives: tuple[CollectiveSide, ...]
    observed_kernel_s: dict[str, float]
    """Summed kernel time per step by class of the rank with the most of it, seconds."""
    predicted_kernel_s: dict[str, float]
    """The most loaded stage's roofline kernel time per step by class; empty for a prediction without classes."""
    differences: tuple[str, ...]


def predicted_shares(prediction: Any) -> dict[str, float]:
    """Predicted breakdown in percent of the step, in the observed vocabulary. The part of compute during which the
    GPU waits for its host (`host_wait_s`) is idle on a GPU timeline, as a trace shows it (trace.idle: host_wait)."""
    b, step = prediction.breakdown_s, prediction.step_time_s or 1.0
    exposed = sum(v for k, v in b.items() if k.startswith("exposed_"))
    host = getattr(prediction, "host_wait_s", 0.0)
    return {"compute": 100.0 * (b.get("compute", 0.0) - host + b.get("optimizer", 0.0)) / step,
            "exposed_comm": 100.0 * exposed / step, "memcpy": 0.0,
            "idle": 100.0 * (b.get("bubble", 0.0) + host) / step}


def _observed_collectives(report: TraceReport, num_steps: int) -> tuple[CollectiveSide, ...]:
    out: dict[str, list] = {}
    for r in report.ranks:
        for s in r.samples:
            out.setdefault(s.kind, []).append(s)
    rows = []
    for kind, items in out.items():
        sizes = [s.message_bytes for s in items if math.isfinite(s.message_bytes)]
        rows.append(CollectiveSide(kind=kind, count_per_step=len(items) / len(report.ranks) / max(num_steps, 1),
                                   min_message_bytes=min(sizes, default=math.nan),
                                   max_message_bytes=max(sizes, default=math.nan),
                                   time_each_s=float(np.median([s.dur_s for s in items]))))
    return tuple(sorted(rows, key=lambda c: c.kind))


def _predicted_collectives(prediction: Any) -> tuple[CollectiveSide, ...]:
    out: dict[str, list] = {}
    for t in prediction.transfers:
        kind = "send_recv" if t.op in ("send", "recv", "send_recv", "p2p") else t.op
        out.setdefault(kind, []).append(t)
    return tuple(sorted((CollectiveSide(
        kind=kind, count_per_step=float(sum(t.count for t in ts)),
        min_message_bytes=float(min(t.message_bytes for t in ts)),
        max_message_bytes=float(max(t.message_bytes for t in ts)),
        time_each_s=float(max(ts, key=lambda t: t.count).time_each_s)) for kind, ts in out.items()),
        key=lambda c: c.kind))


def observed_kernel_s(report: TraceReport, num_steps: int) -> dict[str, float]:
    """Kernel time per step by class (KERNEL_CLASS_OF) of the rank with the most such time — the observed side of
    the prediction's most loaded stage (under pipeline parallelism the ranks of different stages differ; under data
    parallelism they are alike)."""
    per_rank = []
    for r in report.ranks:
        out = {c: 0.0 for c in dict.fromkeys(KERNEL_CLASS_OF.values())}
        for k in r.kernels:
            if k.category in KERNEL_CLASS_OF:
                out[KERNEL_CLASS_OF[k.category]] += k.total_s / max(num_steps, 1)
        per_rank.append(out)
    return max(per_rank, key=lambda o: sum(o.values()), default={})


def _ratio_off(a: float, b: float, min_ratio: float) -> bool:
    return a > 0 and b > 0 and max(a / b, b / a) > min_ratio


def compare(report: TraceReport, prediction: Any, min_pct_points: float = MIN_PCT_POINTS,
            min_ratio: float = MIN_RATIO) -> Comparison:
    """Put the observed accounts (mean over ranks) beside the prediction and name what differs."""
    ranks = report.ranks
    # complete steps only: the last ProfilerStep's slice has no next step to end it (and HTA drops it)
    step_spans = [s.breakdown.span_s for r in ranks for s in (r.steps[:-1] if len(r.steps) >= 2 else r.steps)
                  if s.breakdown.span_s > 0]
    # the whole-trace window drops the last ProfilerStep when there are two or more (HTA)
    num_steps = max((len(r.steps) - 1 if len(r.steps) >= 2 else 1 for r in ranks), default=1)
    observed_step = float(np.mean(step_spans)) if step_spans else float(np.mean([r.breakdown.span_s for r in ranks]))
    obs_pct = {k: float(np.mean([r.breakdown.pct()[k] for r in ranks])) for k in ("compute", "exposed_comm",
                                                                                   "memcpy", "idle")}
    pred_pct = predicted_shares(prediction)
    total = sum(t.total_s for t in prediction.transfers)
    # what a 1F1B pipeline's cool-down hides of a stage's sync runs beside an idle GPU there: not overlap on a trace
    exposed = sum(t.exposed_s for t in prediction.transfers) + getattr(prediction, "sync_drain_hidden_s", 0.0)
    pred_overlap = 100.0 * (1.0 - min(total, exposed) / total) if total > 0 else 0.0
    obs_overlap = float(np.mean([r.breakdown.overlap_pct for r in ranks]))
    obs_coll, pred_coll = _observed_collectives(report, num_steps), _predicted_collectives(prediction)

    diffs: list[tuple[float, str]] = []  # (size in percentage points of the step, text), largest first
    if _ratio_off(observed_step, prediction.step_time_s, min_ratio):
        diffs.append((math.inf, f"step time: observed {observed_step * 1e3:.1f} ms vs predicted "
                      f"{prediction.step_time_s * 1e3:.1f} ms ({observed_step / prediction.step_time_s:.2f}x)"))
    labels = {"compute": "compute", "exposed_comm": "exposed communication", "memcpy": "memory copies",
              "idle": "idle (predicted: pipeline bubble)"}
    for key, label in labels.items():
        d = obs_pct[key] - pred_pct[key]
        if abs(d) >= min_pct_points:
            diffs.append((abs(d), f"{label}: observed {obs_pct[key]:.1f}% of the step vs predicted "
                          f"{pred_pct[key]:.1f}% ({d:+.1f} percentage points)"))
    if abs(obs_overlap - pred_overlap) >= 2 * min_pct_points:
        # the hidden communication as a share of the step, so it ranks with the other differences
        hidden_obs = float(np.mean([100.0 * r.breakdown.overlap_s / r.breakdown.span_s if r.breakdown.span_s > 0
                                    else 0.0 for r in ranks]))
        hidden_pred = 100.0 * (total - sum(t.exposed_s for t in prediction.transfers)) / (
            prediction.step_time_s or 1.0)
        diffs.append((abs(hidden_obs - hidden_pred),
                      f"overlap: observed {obs_overlap:.1f}% of communication hidden behind compute vs predicted "
                      f"{pred_overlap:.1f}%; hidden communication {hidden_obs:.1f}% of the step observed vs "
                      f"{hidden_pred:.1f}% predicted ({hidden_obs - hidden_pred:+.1f} percentage points)"))
    pred_by_kind = {c.kind: c for c in pred_coll}
    obs_by_kind = {c.kind: c for c in obs_coll}

    def share(c: CollectiveSide | None, step_s: float) -> float:
        """Percent of the step the kind's calls take end to end (count × time each), 0 when absent."""
        return 100.0 * c.count_per_step * c.time_each_s / step_s if c is not None and step_s > 0 else 0.0

    for kind in sorted(set(pred_by_kind) | set(obs_by_kind)):
        o, p = obs_by_kind.get(kind), pred_by_kind.get(kind)
        so, sp = share(o, observed_step), share(p, prediction.step_time_s)
        of_step = f"{so:.1f}% of the step observed vs {sp:.1f}% predicted ({so - sp:+.1f} percentage points)"
        if o is None:
            diffs.append((sp, f"{kind}: predicted {p.count_per_step:.3g} per step of {p.time_each_s * 1e3:.3g} ms "
                          f"each, none observed; {of_step}"))
        elif p is None:
            diffs.append((so, f"{kind}: observed {o.count_per_step:.3g} per step of {o.time_each_s * 1e3:.3g} ms "
                          f"each, none predicted; {of_step}"))
        else:
            if _ratio_off(o.count_per_step, p.count_per_step, min_ratio):
                diffs.append((abs(so - sp), f"{kind}: observed {o.count_per_step:.3g} per step vs predicted "
                              f"{p.count_per_step:.3g}; {of_step}"))
            if _ratio_off(o.time_each_s, p.time_each_s, min_ratio):
                diffs.append((abs(so - sp), f"{kind}: {o.time_each_s * 1e3:.3g} ms per call observed vs "
                              f"{p.time_each_s * 1e3:.3g} ms predicted ({o.time_each_s / p.time_each_s:.2f}x); "
                              f"{of_step}"))
            if _ratio_off(o.max_message_bytes, p.max_message_bytes, min_ratio):
                diffs.append((abs(so - sp), f"{kind}: largest message observed {o.max_message_bytes / 1e6:.2f} MB "
                              f"vs predicted {p.max_message_bytes / 1e6:.2f} MB"))
    obs_k = observed_kernel_s(report, num_steps)
    by_class = getattr(prediction, "gpu_time_by_class_s", None)
    pred_k = by_class() if callable(by_class) else {}
    for cls in pred_k:
        so = 100.0 * obs_k.get(cls, 0.0) / observed_step if observed_step > 0 else 0.0
        sp = 100.0 * pred_k[cls] / prediction.step_time_s if prediction.step_time_s > 0 else 0.0
        if abs(so - sp) >= min_pct_points:
            seen = obs_k.get(cls, 0.0)
            ratio = f"; {seen / pred_k[cls]:.2f}x the predicted time" if pred_k[cls] > 0 else ""
            diffs.append((abs(so - sp), f"{cls} kernels: observed {seen * 1e3:.1f} ms per step "
                          f"({so:.1f}% of the step) vs predicted {pred_k[cls] * 1e3:.1f} ms ({sp:.1f}%) "
                          f"({so - sp:+.1f} percentage points{ratio})"))
    diffs.sort(key=lambda d: -d[0])
    return Comparison(observed_step_s=observed_step, predicted_step_s=prediction.step_time_s,
                      observed_pct=obs_pct, predicted_pct=pred_pct, observed_overlap_pct=obs_overlap,
                      predicted_overlap_pct=pred_overlap, observed_collectives=obs_coll,
                      predicted_collectives=pred_coll, observed_kernel_s=obs_k, predicted_kernel_s=pred_k,
                      differences=tuple(d for _, d in diffs))
