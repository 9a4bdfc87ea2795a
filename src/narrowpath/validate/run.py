"""Predict every case of a corpus and compare with the measurement: error = (predicted − measured) / measured."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from narrowpath.errors import NarrowpathError
from narrowpath.schedule.step import predict
from narrowpath.spec.calibration import Calibration
from narrowpath.validate.corpus import load_corpus


@dataclass(frozen=True, slots=True)
class CaseResult:
    id: str
    predicted_step_time_s: float | None
    measured_step_time_s: float | None
    error: float | None
    """Signed fraction (predicted − measured) / measured; None when the case failed."""
    mfu: float | None = None
    failure: str | None = None
    derived: bool = False


@dataclass(frozen=True, slots=True)
class ValidationReport:
    corpus: str
    cases: tuple[CaseResult, ...]

    @property
    def ok_cases(self) -> list[CaseResult]:
        return [c for c in self.cases if c.error is not None]

    @property
    def mean_abs_error(self) -> float | None:
        ok = self.ok_cases
        return sum(abs(c.error) for c in ok) / len(ok) if ok else None

    @property
    def max_abs_error(self) -> float | None:
        ok = self.ok_cases
        return max(abs(c.error) for c in ok) if ok else None

    @property
    def worst(self) -> CaseResult | None:
        ok = self.ok_cases
        return max(ok, key=lambda c: abs(c.error)) if ok else None

    def to_json(self) -> dict:
        return {
            "corpus": self.corpus,
            "cases": [{"id": c.id, "predicted_step_time_s": c.predicted_step_time_s,
                       "measured_step_time_s": c.measured_step_time_s, "error": c.error, "mfu": c.mfu,
                       "measured_derived": c.derived,
                       **({"failure": c.failure} if c.failure else {})} for c in self.cases],
            "mean_abs_error": self.mean_abs_error,
            "max_abs_error": self.max_abs_error,
            "num_cases": len(self.cases),
            "num_failed": len(self.cases) - len(self.ok_cases),
        }


def run_validation(path: str | Path | None = None, calibration: Calibration | None = None) -> ValidationReport:
    results = []
    for case in load_corpus(path):
        if case.scenario is None:
            results.append(CaseResult(case.id, None, case.measured_step_time_s, None, failure=case.error))
            continue
        try:
            pred = predict(case.scenario, calibration)
        except NarrowpathError as exc:
            results.append(CaseResult(case.id, None, case.measured_step_time_s, None, failure=str(exc)))
            continue
        err = (pred.step_time_s - case.measured_step_time_s) / case.measured_step_time_s
        results.append(CaseResult(case.id, pred.step_time_s, case.measured_step_time_s, err, pred.mfu,
                                  derived=case.derived))
    return ValidationReport(str(path or "shipped: training-public.yaml"), tuple(results))
