"""What-if evaluation: a changed copy of the scenario (dataclasses.replace), re-run through the core model.

A change is a plan knob (repaired to the nearest valid plan, analysis.repair), the hardware or the fabric (a
changed `System`; a new device brings its own calibration profile) or the software stack (attention kernel,
precision, overlap switches). Status of a row:
- `faster`: evaluated, fits in HBM, and gains more than NO_GAIN_FRACTION of the step — only these are ranked;
- `no gain`: evaluated and fits, but gains less than that (or nothing at all; when the re-predicted step is
  identical to the base's in every component, the row says that the model's step does not respond to the change);
- `slower`: evaluated and fits, and the step gets longer by more than that;
- `does not fit`: its step time is shown, it is never ranked;
- `invalid`: the spec refuses the change even after repair (its message is kept);
- `not applicable`: the change cannot apply to this scenario (the reason says why).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Mapping

from narrowpath.analysis.context import build_context, components
from narrowpath.analysis.energy import facility_energy_per_token_j
from narrowpath.analysis.repair import repaired
from narrowpath.errors import NarrowpathError
from narrowpath.schedule.step import StepPrediction, predict
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.scenario import Scenario
from narrowpath.spec.system import System, with_tier

NO_GAIN_FRACTION = 1e-3
"""A change moving the step by less than 0.1 % is reported as `no gain` (below the model's resolution)."""
KINDS = ("plan", "hardware", "fabric", "software")
STATUSES = ("faster", "no gain", "slower", "does not fit", "invalid", "not applicable")


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
    """Why it is not ranked ('' when it is ranked, i.e. status `faster`)."""
    scenario: Scenario | None = None
    kind: str = "plan"
    """`plan`, `hardware`, `fabric` or `software`."""
    targets: tuple[str, ...] = ()
    """Verdict components (analysis.verdict.components keys) the change is meant to shrink."""
    repairs: tuple[str, ...] = ()
    """Dependent knobs changed to keep the plan valid (analysis.repair), each with its reason."""
    status: str = "faster"
    """One of STATUSES (module docstring)."""
    energy_per_token_j: float | None = None
    """Facility-level energy per token of the changed scenario (analysis.energy, without the amortised checkpoint);
    None when not re-predicted."""
    components_s: Mapping[str, float] | None = None
    """The changed step split into the verdict's paths (analysis.context.components); None when not re-predicted."""


Make = Callable[[], "Scenario | tuple[Scenario, tuple[str, ...]]"]


def with_plan(scn: Scenario, **changes) -> Scenario:
    """The scenario with plan fields changed (and num_gpus following the degrees), without repair."""
    plan = dataclasses.replace(scn.plan, **changes)
    return dataclasses.replace(scn, plan=plan, num_gpus=plan.num_gpus)


def with_plan_repaired(scn: Scenario, **changes) -> tuple[Scenario, tuple[str, ...]]:
    """The scenario with plan fields changed and the dependent knobs repaired (analysis.repair)."""
    return repaired(scn, **changes)


def status_of(gain_s: float, step_s: float, fits: bool) -> str:
    if not fits:
        return "does not fit"
    if gain_s > NO_GAIN_FRACTION * step_s:
        return "faster"
    if gain_s < -NO_GAIN_FRACTION * step_s:
        return "slower"
    return "no gain"


def not_applicable(change: str, description: str, reason: str, kind: str = "plan",
                   targets: tuple[str, ...] = ()) -> WhatIf:
    return WhatIf(change, description, None, 0.0, 0.0, False, f"not applicable: {reason}", None, kind, targets, (),
                  "not applicable")


def evaluate(base: StepPrediction, change: str, description: str, make: Make, *, kind: str = "plan",
             targets: tuple[str, ...] = (), calibration: Calibration | None | str = "same") -> WhatIf:
    """Re-predict the changed scenario. `calibration`: "same" keeps the base prediction's profile (plan, fabric
    and software changes); None lets the changed scenario take its own (a new device brings its profile)."""
    try:
        made = make()
        scn, repairs = made if isinstance(made, tuple) else (made, ())
        pred = predict(scn, base.calibration if calibration == "same" else calibration)
    except NarrowpathError as exc:
        return WhatIf(change, description, None, 0.0, 0.0, False, f"invalid: {exc}", None, kind, targets, (),
                      "invalid")
    return from_prediction(base, change, description, pred, kind=kind, targets=targets, repairs=repairs)


def from_prediction(base: StepPrediction, change: str, description: str, pred: StepPrediction | None = None, *,
                    step_s: float | None = None, kind: str = "plan", targets: tuple[str, ...] = (),
                    repairs: tuple[str, ...] = ()) -> WhatIf:
    """A what-if row from a re-prediction (or, for a change the core model has no knob for, a re-priced step)."""
    step = pred.step_time_s if pred is not None else step_s
    gain = base.step_time_s - step
    fits = pred.memory.fits if pred is not None else base.memory.fits
    status = status_of(gain, base.step_time_s, fits)
    if status == "faster":
        skipped = ""
    elif status == "does not fit":
        mem = pred.memory if pred is not None else base.memory
        skipped = (f"does not fit: needs {mem.total_bytes / 1e9:.1f} GB of {mem.capacity_bytes / 1e9:.1f} GB")
    elif status == "no gain" and pred is not None and dict(pred.breakdown_s) == dict(base.breakdown_s):
        skipped = "no gain: the model's step does not respond to this change"
    else:
        skipped = status
    energy = facility_energy_per_token_j(pred) if pred is not None else None
    parts = components(build_context(pred)) if pred is not None else None
    return WhatIf(change, description, step, gain, gain / base.step_time_s, fits, skipped,
                  pred.scenario if pred is not None else None, kind, targets, repairs, status, energy, parts)
