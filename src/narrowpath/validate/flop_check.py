"""Does a case's stated model match its own measurement? Many published tables give, beside tokens/s per GPU, the
model FLOP/s per GPU their source computed from the model it ran; their ratio is the FLOPs per token of that model.
The stated model's count (workload.counts) must agree with it, under either attention convention sources use —
every score counted (Korthikanti et al. 2022 §6, NeMo 2's formulas) or a causal half (Megatron-Bridge's newer
formulas). A case outside both, by more than TOLERANCE, states a model other than the one that ran, or its source
counts FLOPs some third way: either way the case's error is not the model's alone, and the report says so.

Found this way (fourteenth session): the corpora's Llama 4 `shared_ffn: 16384` — NeMo 25.07's Scout rows imply 108.9
GFLOP per token, the stated model 145–157; Hugging Face's Llama4TextMoe builds the shared expert with
`intermediate_size` (8192), which gives 108.8 with causal attention.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from narrowpath.spec.model import Model
from narrowpath.workload.counts import causal_model_flop_per_token, model_flop_per_token

TOLERANCE = 0.05
"""Relative slack beyond the two conventions' range: what rounding of published figures and small terms left out
of either count (norms, router, embeddings) leave."""


@dataclass(frozen=True, slots=True)
class FlopCheck:
    measured_flop_per_token: float
    """Model TFLOP/s per GPU × 1e12 / tokens/s per GPU, as the source published them."""
    model_low: float
    """The stated model's FLOPs per token with causal attention (half the scores of full-attention layers)."""
    model_high: float
    """The same with every score counted."""

    @property
    def deviation(self) -> float:
        """Signed fraction by which the measurement lies outside [low, high] (0 inside)."""
        m = self.measured_flop_per_token
        if m < self.model_low:
            return m / self.model_low - 1.0
        if m > self.model_high:
            return m / self.model_high - 1.0
        return 0.0

    @property
    def consistent(self) -> bool:
        return abs(self.deviation) <= TOLERANCE

    def to_json(self) -> dict:
        return {"measured_gflop_per_token": self.measured_flop_per_token / 1e9,
                "model_gflop_per_token": [self.model_low / 1e9, self.model_high / 1e9],
                "deviation": self.deviation, "consistent": self.consistent}


def measured_flop_per_token(measured: Any) -> float | None:
    """FLOPs per token a case's own figures imply, or None when it does not publish both (or publishes them as
    something other than positive finite numbers: they are then documentation, not checked)."""
    if not isinstance(measured, Mapping):
        return None
    tflops, tps = measured.get("model_tflops_per_gpu"), measured.get("tokens_per_s_per_gpu")
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0
               for x in (tflops, tps)):
        return None
    return float(tflops) * 1e12 / float(tps)


def flop_check(model: Model, measured: float | None) -> FlopCheck | None:
    """The stated model's FLOPs per token under both conventions beside the measured ones (None: nothing to check)."""
    if measured is None:
        return None
    return FlopCheck(measured, causal_model_flop_per_token(model), model_flop_per_token(model))


def summary_lines(checked: int, flagged: list[tuple[str, FlopCheck]], shown: int = 4) -> list[str]:
    """Plain lines for the console and docs/validation.md: how many cases publish model FLOP/s, how many disagree
    with their stated model, and the largest disagreements (one per distinct model size)."""
    if not checked:
        return []
    head = (f"{len(flagged)} of {checked} cases that publish model TFLOP/s beside tokens/s imply other FLOPs per "
            f"token than their stated model does under either attention convention (by more than "
            f"{TOLERANCE * 100:.0f} %): their source ran another model, or counts FLOPs some third way")
    seen, worst = set(), []
    for cid, fc in sorted(flagged, key=lambda kv: -abs(kv[1].deviation)):
        key = round(fc.model_high / 1e9, 1)
        if key not in seen:
            seen.add(key)
            worst.append(f"{cid}: measured {fc.measured_flop_per_token / 1e9:.1f} GFLOP/token, stated model "
                         f"{fc.model_low / 1e9:.1f}–{fc.model_high / 1e9:.1f} ({fc.deviation * 100:+.0f} %)")
    return [head] + worst[:shown]
