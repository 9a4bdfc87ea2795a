"""How far the corpus agrees with itself: cases that state the same configuration (model, system, GPU count and
every plan knob, after the unpublished ones are chosen) but were measured apart — another container version, a
table re-run — should have the same step time. Where they do not, no model that sees only what the corpus states
can match them all: it gives such cases one prediction.

For a group of measured times m_i and one prediction t, the relative errors are |t − m_i| / m_i:
- mean |error| is smallest at the weighted median of the m_i with weights 1/m_i (the minimiser of
  Σ w_i·|t − m_i|);
- worst |error| is smallest at t = 2·m_min·m_max / (m_min + m_max), where it is (m_max − m_min) / (m_max + m_min).

Summed over groups (a lone case can be matched exactly) these give an error floor for the whole corpus: a lower
bound on the mean and on the worst |error| of any predictor that is a function of the stated configuration, ours
included. The validation targets are read against it.
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Iterable, Protocol


class _Result(Protocol):
    id: str
    config_key: str
    measured_step_time_s: float | None
    predicted_step_time_s: float | None


def best_mean_abs_error(measured: list[float]) -> float:
    """Smallest mean of |t − m_i| / m_i over one prediction t (the weighted median, weights 1/m_i)."""
    if len(measured) < 2:
        return 0.0
    pts = sorted(measured)
    w = [1.0 / m for m in pts]
    half, acc = sum(w) / 2.0, 0.0
    t = pts[-1]
    for m, wi in zip(pts, w):
        acc += wi
        if acc >= half:
            t = m
            break
    return sum(abs(t - m) / m for m in pts) / len(pts)


def best_max_abs_error(measured: list[float]) -> float:
    """Smallest worst |t − m_i| / m_i over one prediction t: (m_max − m_min) / (m_max + m_min)."""
    if len(measured) < 2:
        return 0.0
    lo, hi = min(measured), max(measured)
    return (hi - lo) / (hi + lo)


@dataclass(frozen=True, slots=True)
class RepeatabilitySummary:
    groups: int
    """Configurations measured more than once."""
    cases: int
    """Cases in those groups."""
    total: int
    """Priced cases in all (the floor's denominator)."""
    spreads: tuple[tuple[str, float], ...]
    """(a case id of the group, measured max / min − 1) per group, largest first."""
    floor_mean_abs_error: float
    """Lower bound on the mean |error| over all priced cases of any predictor of the stated configuration."""
    floor_max_abs_error: float
    """Lower bound on its worst |error|."""

    @property
    def median_spread(self) -> float | None:
        return statistics.median(x for _, x in self.spreads) if self.spreads else None

    @property
    def max_spread(self) -> float | None:
        return self.spreads[0][1] if self.spreads else None

    def to_json(self) -> dict:
        return {"groups": self.groups, "cases": self.cases, "median_spread": self.median_spread,
                "max_spread": self.max_spread, "floor_mean_abs_error": self.floor_mean_abs_error,
                "floor_max_abs_error": self.floor_max_abs_error,
                "largest": [{"case": cid, "spread": x} for cid, x in self.spreads[:5]]}


def config_key(scn) -> str:
    """What a prediction depends on: the resolved scenario's model, system, GPU count, mode and plan, without
    names and without the free-text framework (its stack defaults are already in the plan)."""
    return repr((dataclasses.replace(scn.model, name=""), dataclasses.replace(scn.system, name=""), scn.num_gpus,
                 scn.mode, scn.calibration, dataclasses.replace(scn.plan, framework="")))


def repeatability(results: Iterable[_Result]) -> RepeatabilitySummary:
    """Groups of priced results with the same `config_key` and their error floor (module docstring)."""
    rs = [r for r in results if r.config_key and r.measured_step_time_s and r.predicted_step_time_s is not None]
    by_key: dict[str, list[_Result]] = {}
    for r in rs:
        by_key.setdefault(r.config_key, []).append(r)
    spreads, sum_mean, worst, n_cases = [], 0.0, 0.0, 0
    for members in by_key.values():
        if len(members) < 2:
            continue
        m = [r.measured_step_time_s for r in members]
        spreads.append((min(members, key=lambda r: r.measured_step_time_s).id, max(m) / min(m) - 1.0))
        sum_mean += best_mean_abs_error(m) * len(m)
        worst = max(worst, best_max_abs_error(m))
        n_cases += len(m)
    spreads.sort(key=lambda kv: -kv[1])
    return RepeatabilitySummary(len(spreads), n_cases, len(rs), tuple(spreads), sum_mean / len(rs) if rs else 0.0,
                                worst)
