"""An error band on every predicted step time, from the validation residuals of the most similar validated runs.

Similarity: each validated case and the scenario are described by a few regime features (`features`); the distance
is a weighted L1 sum over them (`distance`: hardware generation, matrix format, MoE, ZeRO-3, context and pipeline
parallelism, tensor parallelism across nodes, and the log of model size, GPU count, sequence length and
micro-batch). The band is the spread of the residuals r = ln(predicted / measured) of the K nearest cases: the
measured time is expected in [t·e^(−q_hi), t·e^(−q_lo)] where q_lo, q_hi are their 10th and 90th percentiles
(an 80 % band), widened by the distance to those cases (an unfamiliar plan gets a wider band). A plan outside
anything validated (a generation, device, format or regime no case covers — tensor parallelism across scale-up
domains judged by where the plan's placement puts the tp group —, or farther than OUTSIDE_DISTANCE from its nearest
case) says so and why, and its band is widened further.

The residuals ship as data (catalog/residuals.json), regenerated with docs/validation.md by
`python -m narrowpath.validate.regenerate` and checked for drift in CI. The spread is that of the out-of-fold
residuals (`residual_oof`: each case predicted with the device profiles refitted without its source,
benchmarks/loso_refit.py) where they are stored: the profiles were fitted on these cases, so their in-sample
residuals understate the error on a plan the fit never saw (conformal prediction calibrates on held-out errors;
in-sample, 80.4 % of held-out cases fell in the band with the neighbours held out, 69.5 % once the fit was too).
The half-widths are then scaled by `band_scale`, the factor at which 80 % of held-out cases fall inside their band
(split-conformal calibration of the width, validate.regenerate.band_scale; the leave-one-source-out figure in
docs/validation.md calibrates it without the held-out source).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from narrowpath.network.placement import group_span
from narrowpath.spec.scenario import Scenario
from narrowpath.workload.counts import parameter_count

LEVEL = 0.8
K_NEAREST = 10
OUTSIDE_DISTANCE = 2.0
"""A scenario farther than this from its nearest validated case is outside what was validated."""
FEATURE_WEIGHTS = {"generation": 2.0, "format": 1.0, "moe": 1.5, "zero3": 0.8, "cp": 0.6, "pp": 0.3,
                   "tp_nodes": 1.5, "log_params": 0.6, "log_gpus": 0.15, "log_seq": 0.5, "log_mbs": 0.2}
"""Distance per unit of difference of each feature (categorical features differ by 0 or 1; logs are base 2 for
GPUs, sequence and micro-batch, base 10 for parameters)."""
_FORMAT = {"fp32": "fp32", "fp16": "16-bit", "bf16": "16-bit", "fp8": "fp8", "mxfp8": "mxfp8", "nvfp4": "nvfp4"}


def features(scn: Scenario) -> dict:
    """The regime features the similarity compares."""
    p, m = scn.plan, scn.model
    return {"generation": scn.system.device.generation or scn.system.device.name, "device": scn.system.device.name,
            "format": _FORMAT.get(p.precision, p.precision), "moe": m.moe is not None, "zero3": p.zero_stage == 3,
            "cp": p.cp > 1, "pp": p.pp > 1, "tp_nodes": tp_crosses_scale_out(scn),
            "log_params": math.log10(parameter_count(m)), "log_gpus": math.log2(scn.num_gpus),
            "log_seq": math.log2(m.seq_len), "log_mbs": math.log2(p.mbs), "seq_len": m.seq_len}


def tp_crosses_scale_out(scn: Scenario) -> bool:
    """Whether a tensor-parallel group's collectives leave the scale-up domain — by the plan's placement as the
    collectives are priced (network.placement.group_span), not by tp > domain alone: tp 8 placed outermost on
    8-GPU servers spans eight of them."""
    if scn.plan.tp <= 1:
        return False
    span = group_span(scn.plan, scn.system, "tp")
    return span.crosses_scale_out or any(o.crosses_scale_out for o in span.others)


def distance(a: dict, b: dict) -> float:
    d = 0.0
    for k, w in FEATURE_WEIGHTS.items():
        if k.startswith("log_"):
            d += w * abs(a[k] - b[k])
        else:
            d += w * (a[k] != b[k])
    return d


@dataclass(frozen=True, slots=True)
class Band:
    low_s: float
    high_s: float
    level: float
    inside: bool
    nearest: tuple[str, ...]
    reason: str

    def to_json(self) -> tuple[dict, dict]:
        return ({"low_s": self.low_s, "high_s": self.high_s, "level": self.level},
                {"inside": self.inside, "nearest": list(self.nearest), "reason": self.reason})


@lru_cache(maxsize=1)
def _shipped() -> dict:
    return json.loads(resources.files("narrowpath.catalog").joinpath("residuals.json").read_text())


@lru_cache(maxsize=1)
def residual_cases() -> tuple[dict, ...]:
    """The shipped residuals: one record per priced validation case (id, source, features, residual)."""
    return tuple(_shipped()["cases"])


def band_scale() -> float:
    """The shipped scale of every band's half-widths (validate.regenerate.band_scale: the smallest at which LEVEL of
    the validated cases fall inside their band built from the other sources' cases — split-conformal calibration
    on held-out errors); 1 where none is stored."""
    return float(_shipped().get("band_scale", 1.0))


def _outside_reasons(f: dict, cases) -> list[str]:
    """Why a scenario lies outside what the corpora validated (empty when nothing stands out)."""
    reasons = []
    same_gen = [c for c in cases if c["features"]["generation"] == f["generation"]]
    if not same_gen:
        reasons.append(f"no validated run on {f['generation']} hardware")
    else:
        if not any(c["features"]["format"] == f["format"] for c in same_gen):
            reasons.append(f"no validated {f['format']} run on {f['generation']} hardware")
        if "device" in f and not any(c["features"].get("device") == f["device"] for c in same_gen):
            # same generation, another part: its memory, clocks or links are not what any run measured
            reasons.append(f"no validated run on {f['device']} (only other {f['generation']} parts)")
    if f["cp"]:
        cp_seq = [c["features"]["seq_len"] for c in cases if c["features"]["cp"]]
        if not cp_seq or f["seq_len"] < min(cp_seq):
            reasons.append(f"context parallelism at sequence {f['seq_len']:,} (validated CP runs use "
                           f"{min(cp_seq):,} tokens or more)" if cp_seq else "no validated context-parallel run")
    if f["tp_nodes"] and not any(c["features"]["tp_nodes"] for c in cases):
        reasons.append("tensor parallelism across scale-up domains (no validated run does it)")
    if f["moe"] and not any(c["features"]["moe"] and c["features"]["generation"] == f["generation"] for c in cases):
        reasons.append(f"no validated MoE run on {f['generation']} hardware")
    return reasons


def spread_residual(case: dict) -> float:
    """The residual a validated case lends a band: its out-of-fold one where stored, else its in-sample one."""
    return case.get("residual_oof", case["residual"])


@dataclass(frozen=True, slots=True)
class BandParts:
    """A band before its scale: the residuals' median and their widened 10th / 90th percentiles."""

    centre: float
    q_lo: float
    q_hi: float
    nearest: tuple[str, ...]
    reasons: tuple[str, ...]
    n: int

    def bounds(self, scale: float) -> tuple[float, float]:
        """(q_lo, q_hi) of the band at `scale` (its half-widths about the median times the scale), never tighter
        than ±1 %."""
        lo = self.centre + (self.q_lo - self.centre) * scale
        hi = self.centre + (self.q_hi - self.centre) * scale
        return min(lo, -0.01), max(hi, 0.01)


def band_parts(f: dict, cases, level: float = LEVEL, k: int = K_NEAREST) -> BandParts:
    """The unscaled band of features `f` from residual records `cases` (see module docstring; `cases` not empty)."""
    d = np.array([distance(f, c["features"]) for c in cases])
    order = np.argsort(d, kind="stable")[:k]
    r = np.array([spread_residual(cases[i]) for i in order])
    lo_q, hi_q = (1 - level) / 2, 1 - (1 - level) / 2
    q_lo, q_hi = np.quantile(r, lo_q), np.quantile(r, hi_q)
    reasons = _outside_reasons(f, cases)
    near = float(d[order].mean())
    if d[order[0]] > OUTSIDE_DISTANCE:
        reasons.append(f"far from every validated run (distance {d[order[0]]:.1f} to the nearest)")
    # widen with the distance to the neighbours: a residual spread only speaks for plans like its cases
    widen = 1.0 + 0.25 * near + (1.0 if reasons else 0.0)
    centre = float(np.median(r))
    return BandParts(centre, centre + (q_lo - centre) * widen, centre + (q_hi - centre) * widen,
                     tuple(cases[i]["id"] for i in order[:5]), tuple(reasons), len(order))


def band_from_cases(step_time_s: float, f: dict, cases, level: float = LEVEL, k: int = K_NEAREST,
                    scale: float | None = None) -> Band:
    """The band of a prediction with features `f` from residual records `cases` (see module docstring), its
    half-widths times `scale` (None: the shipped `band_scale`)."""
    if not cases:
        return Band(step_time_s * 0.5, step_time_s * 2.0, level, False, (), "no validated case to compare with")
    parts = band_parts(f, cases, level, k)
    q_lo, q_hi = parts.bounds(band_scale() if scale is None else scale)
    return Band(step_time_s * math.exp(-q_hi), step_time_s * math.exp(-q_lo), level, not parts.reasons,
                parts.nearest, "; ".join(parts.reasons) or
                f"within the validated regimes; band from the {parts.n} nearest of {len(cases)} validated runs")


def error_band(scn: Scenario, step_time_s: float) -> Band:
    """The 80 % error band of a predicted step time of `scn` (see module docstring)."""
    return band_from_cases(step_time_s, features(scn), residual_cases())
