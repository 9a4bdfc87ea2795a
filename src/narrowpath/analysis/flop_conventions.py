"""MFU and HFU under the conventions readers meet, each named, so that HFU below MFU stops reading as an error.

- MFU, full attention (the prediction's `mfu`): model FLOPs = 3 × forward matrix and attention FLOPs, no
  recompute, every score of the attention matrix counted — PaLM (Chowdhery et al. 2022, App. B: 6N + 12·L·H·Q·T)
  and Megatron (Korthikanti et al. 2022 §6).
- MFU, causal attention: the same with the attention-core FLOPs halved, since a causal mask leaves half the score
  matrix to compute (the convention of FlashAttention-2's benchmarks, Dao 2023 §4.1, and of several training
  stacks' MFU counters).
- HFU: FLOPs the GPUs execute — recompute included, causal flash attention counting only the blocks it computes
  (workload.transformer: ½·(1 + block/s) of the scores). With selective or no recompute and causal flash
  attention, HFU can be *below* the full-attention MFU: the model FLOPs count work the kernel never does.
All three against the plan precision's dense matrix peak.
"""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.schedule.step import StepPrediction
from narrowpath.workload.transformer import is_attention_core

CONVENTIONS = {
    "mfu": "model FLOPs with every attention score counted (PaLM App. B / Megatron, Korthikanti et al. 2022 §6)",
    "mfu_causal": "model FLOPs with the attention scores halved for the causal mask (FlashAttention-2, Dao 2023)",
    "hfu": "FLOPs executed: recompute included, causal flash attention counting only the blocks it computes",
}


@dataclass(frozen=True, slots=True)
class FlopConventions:
    mfu: float
    mfu_causal: float
    hfu: float
    attention_model_flop_per_step: float
    """Attention-core FLOPs inside the model FLOPs (full-score convention), whole job per step."""


def attention_model_flop_per_step(pred: StepPrediction) -> float:
    """3 × forward attention-core model FLOPs of every rank and micro-batch (the part of model FLOPs that the
    causal convention halves), counted like workload.build's model FLOPs."""
    plan = pred.scenario.plan
    per_rank_mb = sum(op.useful_flop * c for st in pred.workload.stages for op, c in st.ops
                      if op.phase == "fwd" and op.kind in ("matrix", "flash") and is_attention_core(op))
    return 3.0 * per_rank_mb * plan.tp * plan.cp * plan.dp * pred.workload.num_microbatches


def flop_conventions(pred: StepPrediction) -> FlopConventions:
    attn = attention_model_flop_per_step(pred)
    causal = pred.mfu * (pred.model_flop_per_step - 0.5 * attn) / pred.model_flop_per_step \
        if pred.model_flop_per_step > 0 else 0.0
    return FlopConventions(pred.mfu, causal, pred.hfu, attn)
