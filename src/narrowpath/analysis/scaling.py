"""Account 5 — scaling: step time, efficiency, energy and interruptions as the device count grows.

Strong scaling keeps the global batch fixed (the data-parallel degree grows, each replica gets fewer
micro-batches; when a replica would get less than one micro-batch, the micro-batch shrinks to fit); weak scaling
keeps the batch per replica fixed (the global batch grows with dp). A point whose plan breaks a divisibility rule
is repaired like a what-if (analysis.repair: fewer virtual stages first, then a smaller micro-batch) and says so in
its `note`; a point no repair makes valid is still listed, with no step time and the spec's reason in `note`.
Efficiency: strong = (T₀·N₀)/(T·N) — the same work on more devices; weak = (T₀/T) — the same work per device.
Interruptions per day = N × per-device failure rate × 24 h (analysis.failures).
The seed example of the issue is `communication_share`: 100 ms compute + 5 ms communication is 5 ms / 105 ms
≈ 5 % of the step; strong-scaling the compute down to 10 ms with communication unchanged makes it 5/15 = 1/3.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from narrowpath.analysis.context import build_context
from narrowpath.analysis.energy import build_energy
from narrowpath.analysis.ledger import build_ledger
from narrowpath.analysis.repair import repaired
from narrowpath.errors import NarrowpathError
from narrowpath.schedule.step import StepPrediction, predict


def communication_share(compute_s: float, comm_s: float) -> float:
    """Share of a serial step that is communication: comm / (compute + comm)."""
    return comm_s / (compute_s + comm_s)


def strong_scaled_share(compute_s: float, comm_s: float, factor: float) -> float:
    """Communication share after spreading the compute over `factor`× the devices, communication unchanged."""
    return communication_share(compute_s / factor, comm_s)


@dataclass(frozen=True, slots=True)
class ScalingPoint:
    mode: str
    """`strong` or `weak`."""
    num_gpus: int
    dp: int
    gbs: int
    mbs: int
    step_s: float | None
    """None when no valid plan exists at this size (`note` says why)."""
    efficiency: float | None
    communication_share: float | None
    """Exposed communication / step."""
    energy_per_step_j: float | None
    tokens_per_s: float | None
    interruptions_per_day: float
    fits: bool
    note: str = ""
    """What was repaired to make the point valid, or why it has no valid plan ('' for the plan as scaled)."""


def ledger_energy_j(pred: StepPrediction) -> float:
    """Energy per step from the ledger without the amortised checkpoint (default when no energy function is given)."""
    ctx = build_context(pred)
    return build_energy(ctx, build_ledger(ctx)).total_j


def _point(mode: str, pred: StepPrediction, base: StepPrediction, rate_per_gpu_hour: float,
           energy_of: Callable[[StepPrediction], float], note: str = "") -> ScalingPoint:
    scn = pred.scenario
    n, n0 = scn.num_gpus, base.scenario.num_gpus
    t, t0 = pred.step_time_s, base.step_time_s
    eff = (t0 * n0) / (t * n) if mode == "strong" else t0 / t
    comm = sum(v for k, v in pred.breakdown_s.items() if k.startswith("exposed_"))
    return ScalingPoint(mode, n, scn.plan.dp, scn.plan.gbs, scn.plan.mbs, t, eff, communication_share(t - comm, comm),
                        energy_of(pred), pred.tokens_per_s,
                        n * rate_per_gpu_hour * 24.0, pred.memory.fits, note)


def scaling_sweep(base: StepPrediction, factors: tuple[float, ...], rate_per_gpu_hour: float,
                  energy_of: Callable[[StepPrediction], float] = ledger_energy_j) -> tuple[ScalingPoint, ...]:
    scn = base.scenario
    p = scn.plan
    out = []
    for mode in ("strong", "weak"):
        for f in factors:
            dp = p.dp * f
            if dp < 1 or dp != int(dp):
                continue  # not a device count of this plan's shape
            dp = int(dp)
            n = scn.num_gpus // p.dp * dp
            gbs = p.gbs if mode == "strong" else p.gbs * dp // p.dp
            mbs = math.gcd(p.mbs, gbs // dp) if mode == "strong" and gbs % dp == 0 else p.mbs
            if dp == p.dp:
                out.append(_point(mode, base, base, rate_per_gpu_hour, energy_of))
                continue
            try:
                changed, repairs = repaired(scn, dp=dp, gbs=gbs, mbs=mbs)
                pred = predict(changed, base.calibration)
            except NarrowpathError as exc:
                out.append(ScalingPoint(mode, n, dp, gbs, mbs, None, None, None, None, None,
                                        n * rate_per_gpu_hour * 24.0, False, f"no valid plan: {exc}"))
                continue
            note = "; ".join(([f"micro-batch {p.mbs} -> {mbs} (fewer sequences per replica)"] if mbs != p.mbs
                              else []) + list(repairs))
            out.append(_point(mode, pred, base, rate_per_gpu_hour, energy_of, note))
    return tuple(out)
