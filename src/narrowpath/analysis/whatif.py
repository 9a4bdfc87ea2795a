"""What-if evaluation: a changed copy of the scenario (dataclasses.replace), re-run through the core model.

A change that the spec rejects is reported as skipped with the spec's message; one whose most loaded stage does
not fit in HBM is skipped as "does not fit" — its step time is still shown, but it is never ranked.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from narrowpath.errors import NarrowpathError
from narrowpath.schedule.step import StepPrediction, predict
from narrowpath.spec.scenario import Scenario
from narrowpath.spec.system import System


@dataclass(frozen=True, slots=True)
class WhatIf:
    change: str
    """Short id, e.g. `dp_overlap`."""
    description: str
    step_s: float | None
    """Predicted step time of the changed plan (None when the change is invalid)."""
    gain_s: float
    """Base step − changed step (positive = faster)."""
    gain_fraction: float
    fits: bool
    skipped: str
    """Why it is not ranked ('' when evaluated and feasible)."""
    scenario: Scenario | None = None


def with_plan(scn: Scenario, **changes) -> Scenario:
    """The scenario with plan fields changed (and num_gpus following the degrees)."""
    plan = dataclasses.replace(scn.plan, **changes)
    return dataclasses.replace(scn, plan=plan, num_gpus=plan.num_gpus)


def with_tier(system: System, tier: str, **changes) -> System:
    tiers = tuple(dataclasses.replace(t, **changes) if t.name == tier else t for t in system.tiers)
    return dataclasses.replace(system, tiers=tiers)


def evaluate(base: StepPrediction, change: str, description: str, make: Callable[[], Scenario]) -> WhatIf:
    try:
        scn = make()
        pred = predict(scn, base.calibration)
    except NarrowpathError as exc:
        return WhatIf(change, description, None, 0.0, 0.0, False, f"invalid: {exc}")
    gain = base.step_time_s - pred.step_time_s
    fits = pred.memory.fits
    skipped = "" if fits else (f"does not fit: needs {pred.memory.total_bytes / 1e9:.1f} GB of "
                               f"{pred.memory.capacity_bytes / 1e9:.1f} GB")
    return WhatIf(change, description, pred.step_time_s, gain, gain / base.step_time_s, fits, skipped, scn)
