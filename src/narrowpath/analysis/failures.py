"""Failures and checkpoints: job MTBF, checkpoint write time, Young/Daly optimal interval, goodput.

Young, 'A first order approximation to the optimum checkpoint interval', CACM 17(9) 1974: τ = √(2δM).
Daly, 'A higher order estimate of the optimum checkpoint interval for restart dumps', FGCS 22(3) 2006, eq. 37:
τ = √(2δM)·[1 + ⅓√(δ/2M) + (1/9)(δ/2M)] − δ for δ < 2M, else τ = M.
Waste fraction (Daly 2006 first-order form): δ/τ (writing) + (τ + δ)/(2M) (rework after a failure, half an
interval on average) + R/M (restart: detect and reschedule, then restore the checkpoint). Goodput = 1 − waste.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


def job_mtbf_s(num_gpus: int, failures_per_gpu_hour: float) -> float:
    """Mean time between interruptions of a job on `num_gpus` independent devices (exponential failures)."""
    rate = num_gpus * failures_per_gpu_hour
    return math.inf if rate <= 0 else 3600.0 / rate


def young_interval_s(write_s: float, mtbf_s: float) -> float:
    """Young 1974."""
    return math.sqrt(2.0 * write_s * mtbf_s)


def daly_interval_s(write_s: float, mtbf_s: float) -> float:
    """Daly 2006 eq. 37."""
    if write_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = write_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * write_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - write_s


def waste_fraction(interval_s: float, write_s: float, mtbf_s: float, restart_s: float) -> float:
    """Fraction of wall time not spent on useful steps (module docstring)."""
    if math.isinf(mtbf_s):
        return write_s / interval_s if interval_s > 0 and not math.isinf(interval_s) else 0.0
    return min(1.0, write_s / interval_s + (interval_s + write_s) / (2.0 * mtbf_s) + restart_s / mtbf_s)


@dataclass(frozen=True, slots=True)
class FailureBudget:
    checkpoint_bytes: float
    """Whole job: 16-bit weights + fp32 master weights and two Adam moments."""
    write_bw_bytes_per_s: float
    """Bandwidth the checkpoint transfer gets (storage shared by all writers, front-end network)."""
    write_s: float
    """δ: serialisation + transfer (analysis.checkpoint)."""
    restore_s: float
    """Reading the checkpoint back after a failure (part of the restart R)."""
    mtbf_s: float
    interruptions_per_day: float
    young_interval_s: float
    daly_interval_s: float
    waste_fraction: float
    goodput: float


def failure_budget(num_gpus: int, checkpoint_bytes: float, write_bw_bytes_per_s: float, write_s: float,
                   restore_s: float, failures_per_gpu_hour: float, restart_s: float) -> FailureBudget:
    """`restart_s` is detection and rescheduling; the restart R of the waste adds `restore_s` to it."""
    mtbf = job_mtbf_s(num_gpus, failures_per_gpu_hour)
    young = young_interval_s(write_s, mtbf) if not math.isinf(mtbf) else math.inf
    daly = daly_interval_s(write_s, mtbf) if not math.isinf(mtbf) else math.inf
    waste = waste_fraction(daly, write_s, mtbf, restart_s + restore_s)
    return FailureBudget(checkpoint_bytes, write_bw_bytes_per_s, write_s, restore_s, mtbf, 86400.0 / mtbf, young,
                         daly, waste, 1.0 - waste)
