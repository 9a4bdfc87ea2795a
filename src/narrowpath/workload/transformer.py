"""Per-layer operations of a decoder-only transformer on one rank, for one micro-batch (Megatron-Core layout):
the attention block (workload.attention) then the MLP block, dense or mixture of experts (workload.moe).

FLOPs follow Narayanan et al. SC'21 §5.1 / Korthikanti et al. 2022 App. A: per layer forward
24·b·s·h² + 4·b·s²·h for f = 4h (QKV 6bsh², scores 2bs²h, AV 2bs²h, projection 2bsh², MLP 16bsh²);
backward is twice the forward. Element-wise byte counts follow the kernels Megatron-Core runs (fused
bias-GeLU/SwiGLU, fused bias-dropout-add, fused scale-mask-softmax, fused rotary, fused permute) — our own
accounting, stated per op.
"""
from __future__ import annotations

from narrowpath.spec.model import Model
from narrowpath.spec.plan import Plan
from narrowpath.workload.attention import (FLASH_BLOCK, attention_block_ops, attention_ops, attention_params,
                                           kv_width_per_rank, mla_gathered_width, residual_op)
from narrowpath.workload.moe import dense_mlp_block_ops, expert_params, moe_block_ops, moe_layer_params
from narrowpath.workload.ops import (ATTENTION_CORE_OPS, as_phase, backward_ops, gemm, is_attention_core, linear,
                                     vector)
from narrowpath.workload.precision import act_bytes
from narrowpath.workload.items import Op

__all__ = ["FLASH_BLOCK", "ATTENTION_CORE_OPS", "act_bytes", "as_phase", "attention_ops", "backward_ops", "gemm",
           "is_attention_core", "kv_width_per_rank", "layer_expert_params", "layer_forward_ops", "layer_params",
           "linear", "mla_gathered_width", "residual_op", "vector"]


def layer_forward_ops(model: Model, plan: Plan, attention_kernel: str, *, moe_layer: bool = False,
                      window: bool = False) -> list[Op]:
    """Forward ops of one transformer layer on one rank for one micro-batch: an MoE layer when `moe_layer` (and
    the model has experts), a sliding-window attention layer when `window`."""
    ops = attention_block_ops(model, plan, attention_kernel, window=window)
    if moe_layer and model.moe is not None:
        return ops + moe_block_ops(model, plan)
    if model.parallel_attn_mlp:
        return parallel_block_ops(ops, dense_mlp_block_ops(model, plan), model, plan)
    return ops + dense_mlp_block_ops(model, plan)


def parallel_block_ops(attention: list[Op], mlp: list[Op], model: Model, plan: Plan) -> list[Op]:
    """A parallel block's forward ops (model.parallel_attn_mlp: y = x + attn(norm(x)) + mlp(norm(x)); GPT-J; PaLM,
    Chowdhery et al. 2022 §2 'Parallel Layers'): the MLP reads the attention's norm — no second norm — and one
    residual adds both outputs to the input in place of the two sequential adds."""
    norm2 = mlp[0]  # ln2; attention[-1] and mlp[-1] are the blocks' residual ops (residual_op)
    A = act_bytes(plan)
    return attention[:-1] + mlp[1:-1] + [residual_op(model, norm2.saved_bytes / A, A, plan.precision, branches=2)]


def layer_params(model: Model, plan: Plan, *, moe_layer: bool = False) -> float:
    """Parameters of one layer held by one rank (tp/ep/etp-sharded matrices; norms replicated: one in a parallel
    block)."""
    norms = (1 if model.parallel_attn_mlp else 2) * model.hidden  # parallel blocks have no experts (spec.model)
    attn = attention_params(model, plan)
    if moe_layer and model.moe is not None:
        return attn + norms + moe_layer_params(model, plan)
    return attn + norms + model.mlp_matrices * model.hidden * model.ffn / plan.tp


def layer_expert_params(model: Model, plan: Plan) -> float:
    """Routed-expert parameters of one MoE layer held by one rank (num_experts/ep experts, split etp ways)."""
    return expert_params(model, plan)
