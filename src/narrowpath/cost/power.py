"""A board run under a power cap: the sustained clock, and with it the arithmetic rate, follow the cap.

CMOS dynamic power is P_dyn ∝ C·V²·f (e.g. Weste & Harris, 'CMOS VLSI Design', §5.1), and above the voltage floor
the DVFS controller raises V with f, so P_dyn grows faster than f (V ∝ f would make it f³). We take P − P_idle ∝ f²
over the range a cap moves the clock in — an exponent chosen between the two, not fitted to a clock-versus-cap
curve (none is published for these boards): capping an H100 SXM from 700 W to 600 W then costs 1 − √(480/580) =
9 % of the clock, within the 10–15 % step-time loss reported for transformer pre-training at that cap (Factryze
Scale Atlas, 'Power capping') and the SM-frequency scaling measured under caps for DGEMM on H100/H200
(arXiv:2604.11391). The HBM clock
is not throttled, so bandwidth-bound work keeps its speed; boards are assumed to run at their rated power under
sustained GEMM load without a cap (the calibration's efficiencies are measured there).
"""
from __future__ import annotations

import dataclasses
import math
from types import MappingProxyType

from narrowpath.spec.device import Device
from narrowpath.spec.system import System

POWER_EXPONENT = 2.0
"""P − P_idle ∝ f^POWER_EXPONENT (see module docstring)."""


def clock_fraction(tdp_w: float, idle_w: float, cap_w: float) -> float:
    """Sustained clock under `cap_w` as a fraction of the clock at the rated `tdp_w` (1 when uncapped, unknown or
    above the rating; the cap cannot go below idle)."""
    if not cap_w or not tdp_w or cap_w >= tdp_w:
        return 1.0
    dyn, dyn_rated = max(cap_w - idle_w, 1e-9), max(tdp_w - idle_w, 1e-9)
    return min(1.0, math.pow(dyn / dyn_rated, 1.0 / POWER_EXPONENT))


def capped_device(system: System) -> Device:
    """The system's device with its arithmetic peaks scaled by the clock its power cap allows (unchanged
    without a cap)."""
    dev = system.device
    f = clock_fraction(dev.tdp_w, dev.idle_w, system.power_limit_w)
    if f >= 1.0:
        return dev
    scale = lambda table: MappingProxyType({k: v * f for k, v in table.items()})  # noqa: E731
    return dataclasses.replace(dev, peak_matrix_flop_per_s=scale(dev.peak_matrix_flop_per_s),
                               peak_vector_flop_per_s=scale(dev.peak_vector_flop_per_s),
                               peak_exp_per_s=dev.peak_exp_per_s * f)
