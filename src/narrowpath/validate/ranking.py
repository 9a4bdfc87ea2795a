"""How well the model ranks plans: cases of one sweep ran the same model on the same hardware and batch and
differ only in plan or precision, so the model's order of their predicted times can be held against the
measured order.

- pairwise order agreement: over the pairs of a sweep whose measured times differ by more than `min_gap`
  (3 %: closer pairs are within run-to-run noise), the fraction the model orders the same way;
- top-1 regret: measured time of the plan the model ranks first, over the measured best, minus 1 (0 = the model
  picks the fastest plan).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol

MIN_GAP = 0.03


class _Result(Protocol):
    sweep: str | None
    predicted_step_time_s: float | None
    measured_step_time_s: float | None


@dataclass(frozen=True, slots=True)
class RankingSummary:
    sweeps: int
    """Sweep groups with at least two predicted cases."""
    pairs: int
    """Pairs whose measured times differ by more than MIN_GAP."""
    agreeing: int
    top1_regrets: tuple[tuple[str, float], ...]
    """(sweep, regret) per sweep group."""

    @property
    def order_agreement(self) -> float | None:
        return self.agreeing / self.pairs if self.pairs else None

    @property
    def top1_regret_mean(self) -> float | None:
        r = [x for _, x in self.top1_regrets]
        return sum(r) / len(r) if r else None

    @property
    def top1_regret_max(self) -> float | None:
        r = [x for _, x in self.top1_regrets]
        return max(r) if r else None

    def to_json(self) -> dict:
        return {"sweeps": self.sweeps, "pairs": self.pairs, "order_agreement": self.order_agreement,
                "top1_regret_mean": self.top1_regret_mean, "top1_regret_max": self.top1_regret_max,
                "min_gap": MIN_GAP}


def order_agreement(predicted: list[float], measured: list[float], min_gap: float = MIN_GAP) -> tuple[int, int]:
    """(agreeing pairs, counted pairs) over the pairs whose measured times differ by more than `min_gap`."""
    agree = counted = 0
    for i in range(len(measured)):
        for j in range(i + 1, len(measured)):
            lo = min(measured[i], measured[j])
            if abs(measured[i] - measured[j]) <= min_gap * lo:
                continue
            counted += 1
            if (predicted[i] - predicted[j]) * (measured[i] - measured[j]) > 0:
                agree += 1
    return agree, counted


def top1_regret(predicted: list[float], measured: list[float]) -> float:
    """Measured time of the model's first choice over the measured best, minus 1."""
    pick = min(range(len(predicted)), key=lambda i: (predicted[i], i))
    return measured[pick] / min(measured) - 1.0


def rank_sweeps(results: Iterable[_Result]) -> RankingSummary:
    by_sweep: dict[str, list[_Result]] = {}
    for r in results:
        if r.sweep and r.predicted_step_time_s is not None and r.measured_step_time_s is not None:
            by_sweep.setdefault(r.sweep, []).append(r)
    pairs = agreeing = 0
    regrets = []
    for name, rs in sorted(by_sweep.items()):
        if len(rs) < 2:
            continue
        pred = [r.predicted_step_time_s for r in rs]
        meas = [r.measured_step_time_s for r in rs]
        a, c = order_agreement(pred, meas)
        agreeing += a
        pairs += c
        regrets.append((name, top1_regret(pred, meas)))
    return RankingSummary(len(regrets), pairs, agreeing, tuple(regrets))
