"""Validate the serving model on an `inference-corpus/1` file (shared/validation/README.md): every case is read
and simulated as its source ran it, and each measured figure is set beside the prediction.

Error of a figure = (predicted − measured) / measured; a case's error is its largest-magnitude figure error
(signed). Knobs a source left null are chosen by schedule.serving_defaults (the serving stack's defaults, or the
fastest consistent layout), never from the measurement; `assumed` is documentation and is never applied.
A fixed-batch case whose output length is not published (a batch-1 "tokens/s" row) is predicted as the
generation rate, batch / TPOT, of a run whose output is as long as its prompt; the case says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from narrowpath.catalog.resolve import read_data_file
from narrowpath.catalog.serving import serving_scenario_from_dict, serving_stack
from narrowpath.errors import NarrowpathError
from narrowpath.schedule.serving_run import ServingRun, simulate
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.serving import ServingScenario
from narrowpath.validate.corpus import corpus_schema

SCHEMA = "inference-corpus/1"
FIGURES = ("output_tokens_per_s", "total_tokens_per_s", "ttft_s", "tpot_s", "e2e_latency_s")
_META = ("id", "source", "kind", "measured", "assumed")
LATENCY_BATCH = 8
"""Runs of at most this many concurrent sequences form the `latency` regime."""


@dataclass(frozen=True, slots=True)
class Figure:
    predicted: float
    measured: float

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured


@dataclass
class InferenceCase:
    id: str
    source: str
    figures: dict[str, Figure] = field(default_factory=dict)
    failure: str | None = None
    regime: str = ""
    groups: dict[str, str] = field(default_factory=dict)
    """Group labels of the case: generation, precision, family, stack."""
    notes: tuple[str, ...] = ()
    run: ServingRun | None = None

    @property
    def error(self) -> float | None:
        if not self.figures:
            return None
        return max((f.error for f in self.figures.values()), key=abs)


@dataclass
class InferenceReport:
    corpus: str
    cases: list[InferenceCase]

    @property
    def all_errors(self) -> list[float]:
        return [f.error for c in self.cases for f in c.figures.values()]

    @property
    def mean_abs_error(self) -> float:
        e = self.all_errors
        return sum(abs(x) for x in e) / len(e) if e else math.nan

    @property
    def max_abs_error(self) -> float:
        e = self.all_errors
        return max(abs(x) for x in e) if e else math.nan

    def grouped(self, key: str) -> dict[str, dict[str, float]]:
        """Mean and worst |error| over the figures of each group of `key` (`regime` or a group label)."""
        out: dict[str, list[float]] = {}
        for c in self.cases:
            if c.failure is not None:
                continue
            label = c.regime if key == "regime" else c.groups.get(key, "")
            out.setdefault(label, []).extend(f.error for f in c.figures.values())
        return {k: {"figures": len(v), "mean_abs_error": sum(abs(x) for x in v) / len(v) if v else math.nan,
                    "max_abs_error": max((abs(x) for x in v), default=math.nan)} for k, v in sorted(out.items())}

    def to_json(self) -> dict:
        return {
            "corpus": self.corpus, "schema": SCHEMA,
            "cases": [{"id": c.id, "regime": c.regime, **c.groups,
                       "figures": {k: {"predicted": f.predicted, "measured": f.measured, "error": f.error}
                                   for k, f in c.figures.items()},
                       "error": c.error, "failure": c.failure, "notes": list(c.notes)} for c in self.cases],
            "figures": len(self.all_errors),
            "mean_abs_error": self.mean_abs_error, "max_abs_error": self.max_abs_error,
            "groups": {k: self.grouped(k) for k in ("regime", "generation", "precision", "family", "stack")},
        }


def is_inference_corpus(path: str | Path) -> bool:
    """Whether a corpus file declares `schema: inference-corpus/1` (read cheaply, without building cases)."""
    return corpus_schema(path) == SCHEMA


def load_inference_corpus(path: str | Path) -> list[Mapping[str, Any]]:
    """The raw cases of an inference corpus; refuses a missing schema, no `cases` list, or duplicate ids."""
    p = Path(path)
    data = read_data_file(p)
    if not isinstance(data, Mapping) or not isinstance(data.get("cases"), list):
        raise NarrowpathError(f"{p}: not an {SCHEMA} file (needs a top-level `cases` list)")
    if data.get("schema") != SCHEMA:
        raise NarrowpathError(f"{p}: schema {data.get('schema')!r} is not {SCHEMA!r}")
    seen: set[str] = set()
    for i, raw in enumerate(data["cases"]):
        cid = raw.get("id") if isinstance(raw, Mapping) else None
        if cid is not None and (isinstance(cid, bool) or not isinstance(cid, (str, int, float))):
            raise NarrowpathError(f"{p}: case[{i}].id: must be text, got {type(cid).__name__} {cid!r}")
        if cid is not None and cid in seen:
            raise NarrowpathError(f"{p}: duplicate case id {cid!r}")
        seen.add(cid)
    return data["cases"]


def _regime(w: Mapping[str, Any]) -> str:
    scenario = w.get("scenario") or "offline"
    width = w.get("batch_size") or w.get("concurrency")
    if not isinstance(scenario, str):
        return str(scenario)  # refused when the workload is read, naming the field
    if isinstance(width, (int, float)) and not isinstance(width, bool) and width <= LATENCY_BATCH:
        return "latency (<= 8 sequences)"
    return {"fixed-batch": "static-batch throughput", "server": "server (Poisson)",
            "offline": "offline throughput"}.get(scenario, scenario)


def _stat(values, stat: str) -> float:
    from narrowpath.schedule.serving_stats import summary
    return summary(values)[stat]


def nominal_output_note(tokens: int) -> tuple[str, str]:
    """The (knob, why) note of a static batch whose output length is not published, run at its input length: one
    text for validate's case notes and for `serve FILE#ID`'s assumptions."""
    return ("workload.output_tokens", f"{tokens} — not published: the static batch runs its input length (validate "
            "compares the batch's generation rate, batch / TPOT, with the published tokens/s)")


def case_scenario(raw: Mapping[str, Any], name: str) -> tuple[ServingScenario, tuple[str, ...], tuple[str, ...], bool]:
    """(serving scenario, its unpublished knobs, notes, nominal) of one inference case as validate simulates it. A
    static batch whose output length is not published is run at its input length (`nominal`: its tokens/s is then
    the batch's generation rate); a case whose lengths follow an unpublished data set cannot be simulated."""
    data = {k: v for k, v in raw.items() if k not in _META}
    w = dict(data.get("workload") or {})
    nominal = w.get("output_tokens") is None and w.get("scenario") == "fixed-batch"
    notes = []
    if nominal:
        w["output_tokens"] = w.get("input_tokens") or 128
        notes.append(": ".join(nominal_output_note(w["output_tokens"])))
    for length in ("input_tokens", "output_tokens"):
        if w.get(length) is None and "requests_file" not in w:
            raise NarrowpathError(f"workload.{length}: not published (the run's lengths follow a data set's "
                                  "distribution, which the case does not give): nothing to simulate")
    data["workload"] = w
    scn, open_knobs = serving_scenario_from_dict(data, name=name, allow_null=True, corpus=True)
    return scn, open_knobs, tuple(notes), nominal


def run_case(raw: Any, index: int, calibration: Calibration | None = None) -> InferenceCase:
    """Simulate one raw case and compare every figure it measured (failures are kept, with their reason)."""
    if not isinstance(raw, Mapping):
        return InferenceCase(f"case[{index}]", "", failure=f"case[{index}] is not a mapping")
    case = InferenceCase(str(raw.get("id", f"case[{index}]")), str(raw.get("source", "")))
    try:
        if (raw.get("kind") or "inference") != "inference":
            raise NarrowpathError(f"kind: only `inference` cases are served here, got {raw.get('kind')!r}")
        measured = raw.get("measured")
        if not isinstance(measured, Mapping) or not any(measured.get(k) is not None for k in FIGURES):
            raise NarrowpathError(f"measured: needs at least one of {', '.join(FIGURES)}")
        stat = measured.get("percentile") or "mean"
        if stat not in ("mean", "p50", "p90", "p99"):
            raise NarrowpathError(f"measured.percentile: must be mean, p50, p90 or p99, got {stat!r}")
        case.regime = _regime(dict(raw.get("workload") or {}))
        scn, open_knobs, notes, nominal = case_scenario(raw, case.id)
        notes = list(notes)
        run = simulate(scn, open_knobs, calibration, log_lane=False)
        res = run.result
        fig = res.figures()
        for key in FIGURES:
            if measured.get(key) is None:  # absent, or null: not published
                continue
            m = measured[key]
            if isinstance(m, bool) or not isinstance(m, (int, float)) or not m > 0 or not math.isfinite(m):
                raise NarrowpathError(f"measured.{key}: must be a positive number, got {m!r}")
            if key == "output_tokens_per_s" and nominal:
                pred = res.output_tokens.size / _stat(res.tpot_s, "mean")  # the batch's generation rate
            elif isinstance(fig[key], dict):
                pred = {"ttft_s": lambda: _stat(res.ttft_s, stat), "tpot_s": lambda: _stat(res.tpot_s, stat),
                        "e2e_latency_s": lambda: _stat(res.e2e_s, stat)}[key]()
            else:
                pred = fig[key]
            case.figures[key] = Figure(float(pred), float(m))
        dev = scn.system.device
        case.groups = {"generation": dev.generation or dev.name, "precision": run.scenario.plan.weight_precision,
                       "family": "moe" if scn.model.moe is not None else "dense",
                       "stack": serving_stack(scn.plan.framework)["id"]}
        if measured.get("percentile") is None:
            notes.append("percentile: not published — the figures are compared as means")
        case.notes = tuple(notes) + tuple(res.notes)
        case.run = run
    except NarrowpathError as exc:
        case.failure = str(exc)
    return case


def run_inference_validation(path: str | Path, calibration: Calibration | None = None) -> InferenceReport:
    """Every case of the corpus, simulated and compared."""
    raw = load_inference_corpus(path)
    return InferenceReport(str(path), [run_case(c, i, calibration) for i, c in enumerate(raw)])
