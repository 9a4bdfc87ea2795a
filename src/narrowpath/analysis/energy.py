"""Energy per step and per token: FLOPs × pJ/FLOP + bytes × pJ/byte per level and tier + static power × time.

Shape after Horowitz, 'Computing's energy problem (and what we can do about it)', ISSCC 2014: arithmetic is
cheap, moving a byte farther costs orders of magnitude more. Coefficients (and their sources) come only from the
catalog device entry (`energy_pj_per_flop`, `energy_pj_per_byte`, `idle_w`, `tdp_w`).
Assumptions: every GPU moves what the critical stage's rank moves (the ledger); static power is `idle_w` for the
whole step on every GPU; element-wise work is charged through its bytes (its FLOPs are counted in the matrix
dtype's coefficient only when it has any).
"""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.analysis.context import Context
from narrowpath.analysis.ledger import LedgerRow


@dataclass(frozen=True, slots=True)
class EnergyAccount:
    flop_j: float
    """Dynamic arithmetic energy of the whole job per step."""
    bytes_j: dict[str, float]
    """Dynamic data-movement energy per level/tier of the whole job per step."""
    static_j: float
    total_j: float
    per_token_j: float
    avg_power_per_gpu_w: float
    tdp_w: float
    pj_per_flop: float
    """Effective coefficient (FLOP-weighted over the step's ops)."""
    missing: tuple[str, ...]
    """Coefficients the catalog lacks (counted as 0)."""
    source: str


def pj_per_flop(coeffs, dtype: str) -> float | None:
    """Catalog coefficient for `dtype`, falling back like Device.matrix_peak (fp8→fp16, bf16↔fp16, tf32↔fp32)."""
    if dtype in coeffs:
        return coeffs[dtype]
    fb = {"fp8": "fp16", "bf16": "fp16", "fp16": "bf16", "tf32": "fp32", "fp32": "tf32"}.get(dtype)
    return coeffs.get(fb)


def energy_j(flop: float, pj_flop: float, bytes_by_level: dict[str, float], pj_byte: dict[str, float],
             static_w: float, time_s: float) -> tuple[float, dict[str, float], float]:
    """(flop J, bytes J per level, static J) — Horowitz ISSCC 2014 decomposition."""
    return (flop * pj_flop * 1e-12, {k: b * pj_byte.get(k, 0.0) * 1e-12 for k, b in bytes_by_level.items()},
            static_w * time_s)


def build_energy(ctx: Context, ledger: tuple[LedgerRow, ...]) -> EnergyAccount:
    pred = ctx.pred
    dev = pred.scenario.system.device
    n = ctx.num_gpus
    missing = []
    num, den = 0.0, 0.0
    for r in ctx.ops:
        if r.op.flop <= 0:
            continue
        c = pj_per_flop(dev.energy_pj_per_flop, r.op.dtype)
        if c is None:
            missing.append(f"pj_per_flop.{r.op.dtype}")
            c = 0.0
        num += r.op.flop * r.count_per_step * c
        den += r.op.flop * r.count_per_step
    eff = num / den if den else 0.0
    for row in ledger:
        if row.bytes_per_step > 0 and row.level not in dev.energy_pj_per_byte:
            missing.append(f"pj_per_byte.{row.level}")
    if not dev.idle_w:
        missing.append("idle_w")
    fj, bj, sj = energy_j(pred.hardware_flop_per_step, eff,
                          {r.level: r.bytes_per_step * n for r in ledger}, dict(dev.energy_pj_per_byte),
                          dev.idle_w * n, pred.step_time_s)
    total = fj + sum(bj.values()) + sj
    return EnergyAccount(fj, bj, sj, total, total / pred.workload.tokens_per_step,
                         total / (n * pred.step_time_s), dev.tdp_w, eff, tuple(dict.fromkeys(missing)),
                         dev.sources.get("energy", "catalog devices.yaml"))
