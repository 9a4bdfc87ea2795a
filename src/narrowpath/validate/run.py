"""Predict every case of a corpus and compare with the measurement: error = (predicted − measured) / measured.

Errors are reported per case, grouped by regime (hardware generation, precision, parallel family, source), and
— for sweep groups, which differ only in plan or precision — by how well the model ranks the plans
(validate.ranking).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from narrowpath.errors import NarrowpathError
from narrowpath.schedule.step import predict
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.scenario import Scenario
from narrowpath.validate.corpus import load_corpus
from narrowpath.validate.flop_check import FlopCheck, flop_check, summary_lines
from narrowpath.validate.ranking import RankingSummary, rank_sweeps
from narrowpath.validate.repeatability import RepeatabilitySummary, config_key, repeatability

GROUP_KINDS = ("hardware", "precision", "family", "source")


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
    chosen: dict[str, str] = field(default_factory=dict)
    """Knobs the tool filled (not published, or a stack default) → what it chose and why."""
    sweep: str | None = None
    corpus: str = ""
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Regime of the case by kind (GROUP_KINDS); a case may belong to several parallel families."""
    config_key: str = ""
    """What its prediction depends on (validate.repeatability.config_key); equal keys, equal predictions."""
    flop_check: FlopCheck | None = None
    """The stated model's FLOPs per token beside those the case's own figures imply (validate.flop_check)."""


def regimes(scn: Scenario, source: str) -> dict[str, tuple[str, ...]]:
    """The regime groups a case belongs to: hardware generation, precision, parallel family, source."""
    p, m = scn.plan, scn.model
    families = []
    if m.moe is not None:
        families.append("MoE/EP")
    if p.zero_stage == 3:
        families.append("FSDP/ZeRO-3")
    if p.cp > 1:
        families.append("CP")
    if (p.tp > 1 or p.pp > 1) and p.zero_stage != 3:
        families.append("PTD-P")
    if not families:
        families.append("DP")
    word = source.strip().strip("'\"").split()
    src = word[0].rstrip(",.;:'\"") if word else "unknown"
    return {"hardware": (scn.system.device.generation or scn.system.device.name,), "precision": (p.precision,),
            "family": tuple(families), "source": (src,)}


@dataclass(frozen=True, slots=True)
class GroupError:
    name: str
    kind: str
    n: int
    mean_abs_error: float
    max_abs_error: float


@dataclass(frozen=True, slots=True)
class ValidationReport:
    corpus: str
    cases: tuple[CaseResult, ...]
    ranking: RankingSummary | None = None
    repeatability: RepeatabilitySummary | None = None

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

    @property
    def num_failed(self) -> int:
        return len(self.cases) - len(self.ok_cases)

    def groups(self) -> list[GroupError]:
        """Mean and worst |error| of every regime group, by kind then name."""
        members: dict[tuple[str, str], list[float]] = {}
        for c in self.ok_cases:
            for kind in GROUP_KINDS:
                for name in c.groups.get(kind, ()):
                    members.setdefault((kind, name), []).append(abs(c.error))
        return [GroupError(name, kind, len(errs), sum(errs) / len(errs), max(errs))
                for (kind, name), errs in sorted(members.items(), key=lambda kv: (GROUP_KINDS.index(kv[0][0]),
                                                                                   kv[0][1]))]

    def to_json(self) -> dict:
        return {
            "corpus": self.corpus,
            "cases": [{"id": c.id, "predicted_step_time_s": c.predicted_step_time_s,
                       "measured_step_time_s": c.measured_step_time_s, "error": c.error, "mfu": c.mfu,
                       "measured_derived": c.derived, "chosen": dict(c.chosen), "sweep": c.sweep,
                       "corpus": c.corpus, "groups": {k: list(v) for k, v in c.groups.items()},
                       **({"flop_check": c.flop_check.to_json()} if c.flop_check else {}),
                       **({"failure": c.failure} if c.failure else {})} for c in self.cases],
            "mean_abs_error": self.mean_abs_error,
            "max_abs_error": self.max_abs_error,
            "num_cases": len(self.cases),
            "num_failed": self.num_failed,
            "groups": [{"name": g.name, "kind": g.kind, "n": g.n, "mean_abs_error": g.mean_abs_error,
                        "max_abs_error": g.max_abs_error} for g in self.groups()],
            "ranking": self.ranking.to_json() if self.ranking is not None else None,
            "repeatability": self.repeatability.to_json() if self.repeatability is not None else None,
            "flop_inconsistent": [c.id for c in self.flop_inconsistent],
        }

    @property
    def flop_inconsistent(self) -> list[CaseResult]:
        """Cases whose stated model does not do the FLOPs per token their own figures imply (validate.flop_check)."""
        return [c for c in self.cases if c.flop_check is not None and not c.flop_check.consistent]

    def flop_summary(self) -> list[str]:
        """The FLOP check in plain lines (validate.flop_check.summary_lines), for the console and the docs."""
        return summary_lines(sum(c.flop_check is not None for c in self.cases),
                             [(c.id, c.flop_check) for c in self.flop_inconsistent])


def run_validation(path: str | Path | None = None, calibration: Calibration | None = None) -> ValidationReport:
    """Every case of the corpus at `path` (default: every shipped training corpus), predicted and compared."""
    results = []
    for case in load_corpus(path):
        if case.scenario is None:
            results.append(CaseResult(case.id, None, case.measured_step_time_s, None, failure=case.error,
                                      sweep=case.sweep, corpus=case.corpus))
            continue
        check = flop_check(case.scenario.model, case.measured_flop_per_token)
        try:
            pred = predict(case.scenario, calibration)
        except NarrowpathError as exc:  # a case that fails keeps the groups of its plan as stated
            results.append(CaseResult(case.id, None, case.measured_step_time_s, None, failure=str(exc),
                                      sweep=case.sweep, corpus=case.corpus,
                                      groups=regimes(case.scenario, case.source), flop_check=check))
            continue
        err = (pred.step_time_s - case.measured_step_time_s) / case.measured_step_time_s
        groups = regimes(pred.scenario, case.source)  # as priced: a null zero_stage chosen 3 is FSDP/ZeRO-3
        results.append(CaseResult(case.id, pred.step_time_s, case.measured_step_time_s, err, pred.mfu,
                                  derived=case.derived, chosen=dict(pred.scenario.chosen), sweep=case.sweep,
                                  corpus=case.corpus, groups=groups, config_key=config_key(pred.scenario),
                                  flop_check=check))
    name = str(path) if path is not None else "shipped: training-public, training-sweeps-public, published-extra"
    return ValidationReport(name, tuple(results), rank_sweeps(results), repeatability(results))
