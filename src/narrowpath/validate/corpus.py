"""Read `validation-corpus/1` files (see shared/validation/README.md) into cases, tolerating bad ones per case."""
from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from narrowpath.catalog.resolve import read_data_file, scenario_from_dict
from narrowpath.errors import NarrowpathError
from narrowpath.spec.scenario import Scenario

SCHEMA = "validation-corpus/1"
SHIPPED = "training-public.yaml"


@dataclass(frozen=True, slots=True)
class Case:
    """One measured run: a scenario and its measured step time, or the reason it could not be built."""

    id: str
    source: str
    scenario: Scenario | None
    measured_step_time_s: float | None
    derived: bool
    error: str | None = None


def shipped_corpus_path() -> Path:
    return Path(str(resources.files("narrowpath.validate").joinpath("corpora", SHIPPED)))


def _case(raw: Any, index: int) -> Case:
    if not isinstance(raw, Mapping):
        return Case(f"case[{index}]", "", None, None, False, f"case[{index}] is not a mapping")
    cid = str(raw.get("id", f"case[{index}]"))
    source = str(raw.get("source", ""))
    measured = raw.get("measured")
    t_ok = None
    try:
        if not isinstance(measured, Mapping) or "step_time_s" not in measured:
            raise NarrowpathError("measured.step_time_s: is required")
        t = measured["step_time_s"]
        if isinstance(t, bool) or not isinstance(t, (int, float)) or t <= 0:
            raise NarrowpathError(f"measured.step_time_s: must be a positive number, got {t!r}")
        t_ok = float(t)
        kind = raw.get("kind", "training")
        if kind != "training":
            raise NarrowpathError(f"kind: only `training` cases are supported, got {kind!r}")
        data = {k: v for k, v in raw.items() if k not in ("id", "source", "measured", "kind", "assumed")}
        assumed = raw.get("assumed") or {}
        if isinstance(assumed, Mapping) and assumed and isinstance(data.get("plan") or {}, Mapping):
            plan = dict(data.get("plan") or {})
            for k, v in assumed.items():
                plan.setdefault(k, v)
            data["plan"] = plan
        scn = scenario_from_dict(data, name=cid)
        return Case(cid, source, scn, float(t), bool(measured.get("step_time_derived", False)))
    except NarrowpathError as exc:
        return Case(cid, source, None, t_ok, False, str(exc))  # the measurement stays visible in the report


def load_corpus(path: str | Path | None = None) -> list[Case]:
    """Cases of a corpus file (default: the copy of the public corpus shipped with the package)."""
    p = Path(path) if path is not None else shipped_corpus_path()
    data = read_data_file(p)
    if not isinstance(data, Mapping) or not isinstance(data.get("cases"), list):
        raise NarrowpathError(f"{p}: not a {SCHEMA} file (needs a top-level `cases` list)")
    schema = data.get("schema", SCHEMA)
    if schema != SCHEMA:
        raise NarrowpathError(f"{p}: schema {schema!r} is not {SCHEMA!r}")
    return [_case(raw, i) for i, raw in enumerate(data["cases"])]
