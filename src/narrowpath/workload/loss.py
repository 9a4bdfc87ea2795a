"""The language-model loss on the output layer's logits: which cross-entropy kernel a stack runs (plan.cross_entropy).

- `unfused`: Megatron's vocab-parallel cross entropy in FP32 (megatron/core/tensor_parallel/cross_entropy.py): the
  16-bit logits cast to an FP32 copy, the row maxima, the exponentials in place, their sums and the loss — ~16 B a
  logit read and written forward (4 kernels); backward writes the softmax-minus-one-hot gradient and casts it —
  ~12 B (2 kernels); it keeps the 16-bit logits and their FP32 softmax (A + 4 B a logit) while it runs.
- `te`: Transformer Engine's parallel cross entropy (transformer_engine/pytorch/triton/cross_entropy.py, which
  Megatron-Core runs with cross_entropy_loss_fusion and cross_entropy_fusion_impl "te"): an online-softmax kernel
  reads the logits once for each row's maximum and sum (all-gathered over tensor parallelism), a second reads them
  again and writes the gradient into the logits' own buffer — 3 tensors of the logits' format forward (2 kernels);
  backward scales that gradient in place by the loss's (1 kernel: 2 tensors); no FP32 copy is held.
"""
from __future__ import annotations

from narrowpath.spec.plan import Plan
from narrowpath.workload.items import Op
from narrowpath.workload.ops import vector


def cross_entropy_ops(plan: Plan, logits: float, a_bytes: int) -> tuple[Op, Op]:
    """(forward, backward) of the loss over `logits` values on one rank, held in `a_bytes` a value."""
    if plan.cross_entropy == "te":
        return (vector("cross_entropy", "fwd", 3 * a_bytes * logits, plan.precision, kernels=2),
                vector("cross_entropy", "bwd", 2 * a_bytes * logits, plan.precision, kernels=1))
    return (vector("cross_entropy", "fwd", 16 * logits, "fp32", kernels=4),
            vector("cross_entropy", "bwd", 12 * logits, "fp32", kernels=2))


def loss_temporary_bytes(cross_entropy: str, logits, a_bytes: int):
    """What the loss holds at once beside the activations: the logits and, unfused, their FP32 softmax (numbers or
    arrays of `logits`)."""
    return logits * (a_bytes + (0 if cross_entropy == "te" else 4))
