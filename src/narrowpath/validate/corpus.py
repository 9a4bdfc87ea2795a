"""Read `validation-corpus/1` files (see shared/validation/README.md) into cases, tolerating bad ones per case.

The corpus is the contract: every documented extension is read (`sweep`, `plan.framework`, null = not
published, mxfp8/nvfp4, MLA and flat MoE model fields, `hardware.power_limit_w` and `scale_up_gpus`, descriptive
GPU names, extra `measured` fields). `assumed` is documentation and is never applied: a knob the source did not
publish is chosen by `schedule.choose` without looking at the measurement.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from narrowpath.catalog.resolve import read_data_file, scenario_from_dict
from narrowpath.errors import NarrowpathError
from narrowpath.spec.scenario import Scenario
from narrowpath.validate.flop_check import measured_flop_per_token

SCHEMA = "validation-corpus/1"
SHIPPED = ("training-public.yaml", "training-sweeps-public.yaml", "published-extra.yaml")
"""Training corpora shipped with the package, unmodified copies of shared/validation/ (and of the held-out
llm-foundry and torchtitan runs, benchmarks/data/published-extra.yaml); `narrowpath validate` runs them all by default."""
_CASE_META = ("id", "source", "measured", "kind", "assumed", "sweep", "note", "notes")
REQUIRED = {"plan": ("tp", "pp", "dp", "ep", "cp", "vpp", "mbs", "gbs", "zero_stage", "recompute", "sequence_parallel",
                     "precision")}
"""The plan fields a case must carry (shared/validation/README.md; one the source does not publish is written
`null` and chosen without the measurement). Left out with no stack default to fill it, it took the tool's own
default and said nothing: a Megatron-Bridge MXFP8 case without `precision` was priced in bf16 (+34.5 % instead of
+2.0 %)."""


@dataclass(frozen=True, slots=True)
class Case:
    """One measured run: a scenario and its measured step time, or the reason it could not be built."""

    id: str
    source: str
    scenario: Scenario | None
    measured_step_time_s: float | None
    derived: bool
    error: str | None = None
    sweep: str | None = None
    """Group of cases that differ only in plan or precision (same model, hardware and batch)."""
    corpus: str = ""
    """File name of the corpus the case came from."""
    measured_flop_per_token: float | None = None
    """Model FLOPs per token the case's own figures imply (validate.flop_check), when it publishes them."""


def corpus_schema(path: str | Path) -> str | None:
    """The `schema:` a corpus file declares (None when it has none or is not a mapping): which reader it takes."""
    data = read_data_file(path)
    return data.get("schema") if isinstance(data, Mapping) else None


def shipped_corpus_path(name: str = SHIPPED[0]) -> Path:
    return Path(str(resources.files("narrowpath.validate").joinpath("corpora", name)))


def shipped_corpus_paths() -> list[Path]:
    return [shipped_corpus_path(n) for n in SHIPPED]


def _measured_time(measured: Any) -> float:
    if not isinstance(measured, Mapping) or measured.get("step_time_s") is None:
        raise NarrowpathError("measured.step_time_s: is required (or measured.tokens_per_s_per_gpu, which implies it)")
    t = measured["step_time_s"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
        raise NarrowpathError(f"measured.step_time_s: must be a positive finite number, got {t!r}")
    return float(t)


def step_time_from_rate(tokens_per_s_per_gpu: Any, scn: Scenario) -> float:
    """The step time a published training rate implies when the source gives no time: the global batch's tokens
    over the rate of all GPUs (gbs · seq_len / (tokens/s/GPU · GPUs)); arithmetic on the case, not a model."""
    r = tokens_per_s_per_gpu
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= 0:
        raise NarrowpathError(f"measured.tokens_per_s_per_gpu: must be a positive finite number, got {r!r}")
    return scn.plan.gbs * scn.model.seq_len / (float(r) * scn.num_gpus)


def _check_required(data: Mapping, scn: Scenario) -> None:
    """A plan field the case leaves out is refused unless something said fills it: its software stack's default
    (catalog/stacks.yaml, noted in `chosen`) or, for an engine no stack names, the chooser (its open knobs)."""
    plan = data.get("plan")
    if not isinstance(plan, Mapping):  # the scenario reader named a missing or wrong section already
        return
    said = set(dict(scn.chosen)) | set(scn.open_knobs)
    for k in REQUIRED["plan"]:
        if k not in plan and k not in said:
            raise NarrowpathError(f"plan.{k}: is required (write null where the source does not publish it: it is "
                                  "then chosen and said)")


def _case(raw: Any, index: int, corpus: str) -> Case:
    if not isinstance(raw, Mapping):
        return Case(f"case[{index}]", "", None, None, False, f"case[{index}] is not a mapping", corpus=corpus)
    cid = str(raw.get("id", f"case[{index}]"))
    source = str(raw.get("source", ""))
    sweep = raw.get("sweep")
    sweep = str(sweep) if sweep is not None else None
    t_ok = None
    try:
        measured = raw.get("measured")
        from_rate = isinstance(measured, Mapping) and measured.get("step_time_s") is None \
            and measured.get("tokens_per_s_per_gpu") is not None
        if not from_rate:
            t_ok = _measured_time(measured)
        kind = raw.get("kind") or "training"
        if kind != "training":
            raise NarrowpathError(f"kind: only `training` cases are priced here, got {kind!r}")
        data = {k: v for k, v in raw.items() if k not in _CASE_META}
        scn = scenario_from_dict(data, name=cid, allow_null=True, corpus="training")
        _check_required(data, scn)
        if from_rate:
            t_ok = step_time_from_rate(measured["tokens_per_s_per_gpu"], scn)
        return Case(cid, source, scn, t_ok, from_rate or bool(measured.get("step_time_derived", False)),
                    sweep=sweep, corpus=corpus, measured_flop_per_token=measured_flop_per_token(measured))
    except NarrowpathError as exc:
        return Case(cid, source, None, t_ok, False, str(exc), sweep=sweep, corpus=corpus)


def load_corpus(path: str | Path | None = None) -> list[Case]:
    """Cases of one corpus file (default: every shipped training corpus)."""
    if path is None:
        return [c for p in shipped_corpus_paths() for c in load_corpus(p)]
    p = Path(path)
    data = read_data_file(p)
    if not isinstance(data, Mapping) or not isinstance(data.get("cases"), list):
        raise NarrowpathError(f"{p}: not a {SCHEMA} file (needs a top-level `cases` list)")
    if "schema" not in data:
        raise NarrowpathError(f"{p}: no `schema:` line (expected {SCHEMA!r})")
    if data["schema"] != SCHEMA:
        hint = " (a collective corpus: check it with `narrowpath collective --corpus FILE`)" \
            if data["schema"] == "collective-corpus/1" else ""
        raise NarrowpathError(f"{p}: schema {data['schema']!r} is not {SCHEMA!r} or 'inference-corpus/1'{hint}")
    cases = [_case(raw, i, p.name) for i, raw in enumerate(data["cases"])]
    seen: set[str] = set()
    for c in cases:
        if c.id in seen:
            raise NarrowpathError(f"{p}: duplicate case id {c.id!r}")
        seen.add(c.id)
    return cases
