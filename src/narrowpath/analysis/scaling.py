"""Account 5 — scaling: step time, efficiency, energy and interruptions as the device count grows.

Strong scaling keeps the global batch fixed (the data-parallel degree grows, each replica gets fewer
micro-batches; when a replica would get less than one micro-batch, the micro-batch shrinks to fit); weak scaling keeps the batch per replica fixed (the global batch grows with dp).
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
from narrowpath.analysis.whatif import with_plan
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
    step_s: float
    efficiency: float
    communication_share: float
    """Exposed communication / step."""
    energy_per_step_j: float
    tokens_per_s: float
    interruptions_per_day: float
    fits: bool


def ledger_energy_j(pred: StepPrediction) -> float:
    """Energy per step from the ledger without the amortised checkpoint (default when no energy function is given)."""
    ctx = build_context(pred)
    return build_energy(ctx, build_ledger(ctx)).total_j


def _point(mode: str, pred: StepPrediction, base: StepPrediction, rate_per_gpu_hour: float,
           energy_of: Callable[[StepPrediction], float]) -> ScalingPoint:
    scn = pred.scenario
    n, n0 = scn.num_gpus, base.scenario.num_gpus
    t, t0 = pred.step_time_s, base.step_time_s
    eff = (t0 * n0) / (t * n) if mode == "strong" else t0 / t
    comm = sum(v for k, v in pred.breakdown_s.items() if k.startswith("exposed_"))
    return ScalingPoint(mode, n, scn.plan.dp, scn.plan.gbs, scn.plan.mbs, t, eff, communication_share(t - comm, comm),
                        energy_of(pred), pred.tokens_per_s,
                        n * rate_per_gpu_hour * 24.0, pred.memory.fits)


def scaling_sweep(base: StepPrediction, factors: tuple[float, ...], rate_per_gpu_hour: float,
                  energy_of: Callable[[StepPrediction], float] = ledger_energy_j) -> tuple[ScalingPoint, ...]:
    scn = base.scenario
    p = scn.plan
    out = []
    for mode in ("strong", "weak"):
        for f in factors:
            dp = p.dp * f
            if dp < 1 or dp != int(dp):
                continue
            dp = int(dp)
            gbs = p.gbs if mode == "strong" else p.gbs * dp // p.dp
            mbs = p.mbs
            if mode == "strong" and gbs % (dp * mbs) == 0 and gbs % dp == 0:
                pass
            elif mode == "strong" and gbs % dp == 0:
                mbs = math.gcd(mbs, gbs // dp)  # fewer sequences per replica: shrink the micro-batch to fit
            if gbs % (dp * mbs) or (p.gbs * dp) % p.dp:
                continue
            try:
                pred = base if (dp == p.dp) else predict(with_plan(scn, dp=dp, gbs=gbs, mbs=mbs), base.calibration)
            except NarrowpathError:
                continue
            out.append(_point(mode, pred, base, rate_per_gpu_hour, energy_of))
    return tuple(out)
