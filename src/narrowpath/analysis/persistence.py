"""The persistent-RNN cliff: the hidden size at which a recurrent layer's FP16 weights stop fitting on-chip SRAM.

Diamos et al., 'Persistent RNNs: Stashing Recurrent Weights On-Chip', ICML 2016: when one layer's weights fit
in the registers/shared memory of all SMs, a persistent kernel reads them from SRAM at every time step instead
of from HBM. Here: the workload's recurrent GEMM (`lstm_gates`, repeated every time step) carries its
`weight_bytes`; if they fit in `sram_usable_fraction` × SRAM capacity, the persistent step time re-prices that
GEMM (and its backward GEMMs that read the same weights) with the weight bytes removed from HBM traffic
(cost.roofline.op_time_s) and without a per-time-step launch (one persistent kernel runs the whole sequence,
Diamos et al. §3). Above the limit the core model's step stands. The cliff is the jump in time per
useful FLOP at the limit.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from narrowpath.cost.roofline import op_time_s
from narrowpath.schedule.step import StepPrediction, predict
from narrowpath.spec.scenario import Scenario

RECURRENT_OP = "lstm_gates"


@dataclass(frozen=True, slots=True)
class PersistencePoint:
    hidden: int
    layer_weight_bytes: float
    fits_sram: bool
    step_s: float
    """Step time with persistence where the weights fit (core model otherwise)."""
    core_step_s: float
    """Core model step time (weights re-read from HBM every time step)."""
    useful_flop_per_s_per_gpu: float


@dataclass(frozen=True, slots=True)
class PersistenceCliff:
    sram_bytes: float
    usable_fraction: float
    hidden_limit: int
    """Largest hidden size whose layer weights fit (per tp rank)."""
    points: tuple[PersistencePoint, ...]
    cliff_ratio: float
    """Useful FLOP/s just below the limit / just above it (> 1 means a cliff)."""


def recurrent_weight_bytes(pred: StepPrediction) -> float:
    ops = [op for st in pred.workload.stages for op, _ in st.ops if op.name == RECURRENT_OP and op.phase == "fwd"]
    return max((op.weight_bytes for op in ops), default=0.0)


def persistent_step_s(pred: StepPrediction) -> float:
    """Step time when the recurrent weights stay in SRAM (only meaningful if they fit)."""
    dev, cal = pred.scenario.system.device, pred.calibration
    m = pred.workload.num_microbatches
    saved = 0.0
    for st in pred.workload.stages[:1]:
        for op, c in st.ops:
            if op.name.startswith(RECURRENT_OP) and op.weight_bytes > 0:
                lean = dataclasses.replace(op, hbm_bytes=op.hbm_bytes - op.weight_bytes, weight_bytes=0.0, kernels=0)
                saved += (op_time_s(op, dev, cal) - op_time_s(lean, dev, cal)) * c * m
    return pred.step_time_s - saved


def hidden_limit(sram_bytes: float, usable: float, tp: int, bytes_per_param: int = 2) -> int:
    """Largest h with 8·h²·bytes/tp ≤ usable·SRAM (fused [2h × 4h] input+recurrent weights, workload.lstm)."""
    return int(math.floor(math.sqrt(usable * sram_bytes * tp / (8.0 * bytes_per_param))))


def persistence_cliff(scn: Scenario, usable_fraction: float, hiddens: tuple[int, ...] | None = None) -> PersistenceCliff:
    sram = scn.system.device.level("sram").capacity_bytes
    limit = hidden_limit(sram, usable_fraction, scn.plan.tp)
    if hiddens is None:
        step = 128
        lo = max(step, (limit // 2) // step * step)
        hiddens = tuple(sorted(set(range(lo, 2 * limit + step, step)) | {limit, limit + 1}))
    points = []
    for h in hiddens:
        s = dataclasses.replace(scn, model=dataclasses.replace(scn.model, hidden=h))
        pred = predict(s)
        wb = recurrent_weight_bytes(pred)
        fits = wb <= usable_fraction * sram
        t = persistent_step_s(pred) if fits else pred.step_time_s
        points.append(PersistencePoint(h, wb, fits, t, pred.step_time_s,
                                       pred.model_flop_per_step / t / s.num_gpus))
    below = [p for p in points if p.fits_sram]
    above = [p for p in points if not p.fits_sram]
    ratio = (below[-1].useful_flop_per_s_per_gpu / above[0].useful_flop_per_s_per_gpu) if below and above else 1.0
    return PersistenceCliff(sram, usable_fraction, limit, tuple(points), ratio)
