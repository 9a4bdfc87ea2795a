"""FLOPs conventions for MFU / HFU and closed-form checks.

- Model FLOPs (MFU): forward + backward matrix and attention FLOPs of the model, no recompute, full
  (non-causal) attention scores — Korthikanti et al. 2022 §6 / Chowdhery et al. (PaLM) 2022 App. B.
- Hardware FLOPs (HFU): what the GPUs execute, including recompute and with causal flash attention halved.
"""
from __future__ import annotations


def narayanan_eq3_flop(batch: float, seq: float, layers: float, hidden: float, vocab: float) -> float:
    """Narayanan et al. SC'21 eq. (3): FLOPs per iteration with full activation recompute (4 passes):
    96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))."""
    return 96.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


def korthikanti_model_flop(batch: float, seq: float, layers: float, hidden: float, vocab: float) -> float:
    """Korthikanti et al. 2022 §6: model FLOPs per iteration without recompute:
    72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))."""
    return 72.0 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (12 * layers * hidden))


def mfu(model_flop_per_step: float, step_time_s: float, num_gpus: int, peak_flop_per_s: float) -> float:
    """Model FLOPs utilisation: useful FLOPs per second over the job's peak."""
    return model_flop_per_step / (step_time_s * num_gpus * peak_flop_per_s)
