"""narrowpath: where the time goes in distributed AI training — the narrowest path, and what would widen it.

Public API:
    load_scenario(name_or_path)  -> Scenario      (catalog id, YAML/JSON file, or mapping)
    predict(scenario)            -> StepPrediction (closed-form training step)
    run_validation(corpus_path)  -> ValidationReport

The names are imported on first use (PEP 562 `__getattr__`), so `import narrowpath` — and with it every
`narrowpath.<stage>` import and the CLI's start-up — loads neither numpy nor the catalog until they are needed.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "load_scenario": "narrowpath.catalog", "predict": "narrowpath.schedule.step",
    "StepPrediction": "narrowpath.schedule.step", "run_validation": "narrowpath.validate.run",
    "NarrowpathError": "narrowpath.errors", "Calibration": "narrowpath.spec", "Device": "narrowpath.spec",
    "Model": "narrowpath.spec", "Plan": "narrowpath.spec", "Scenario": "narrowpath.spec",
    "System": "narrowpath.spec", "Tier": "narrowpath.spec",
}
__all__ = [*_LAZY, "__version__"]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names arrive through __getattr__
    from narrowpath.catalog import load_scenario
    from narrowpath.errors import NarrowpathError
    from narrowpath.schedule.step import StepPrediction, predict
    from narrowpath.spec import Calibration, Device, Model, Plan, Scenario, System, Tier
    from narrowpath.validate.run import run_validation


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'narrowpath' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
