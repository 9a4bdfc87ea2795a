"""Per-layer operations of a decoder-only transformer on one rank, for one micro-batch (Megatron-LM layout).

Legend: b micro-batch (sequences), s local sequence (seq_len/cp), h hidden, t tensor-parallel degree,
a_t = heads/t local heads, d head dim, f ffn inner size, A activation bytes per element, E = b·s·h.

FLOPs follow Narayanan et al. SC'21 §5.1 / Korthikanti et al. 2022 App. A: per layer forward
24·b·s·h² + 4·b·s²·h for f = 4h (QKV 6bsh², scores 2bs²h, AV 2bs²h, projection 2bsh², MLP 16bsh²);
backward is twice the forward. Element-wise byte counts follow the kernels Megatron-LM runs (fused
bias-GeLU, fused bias-dropout-add, fused scale-mask-softmax) — our own accounting, stated per op below.
"""
from __future__ import annotations

from narrowpath.spec.model import Model
from narrowpath.spec.plan import Plan
from narrowpath.workload.items import Op

FLASH_BLOCK = 128  # FlashAttention tile size along the sequence (Dao 2023), for the causal work fraction


def act_bytes(plan: Plan) -> int:
    """Bytes per activation element: FP8 runs keep BF16 activations (Transformer Engine); fp32 runs use 4."""
    return 4 if plan.precision == "fp32" else 2


def gemm(name: str, phase: str, m: float, k: float, n: float, dtype: str, a_bytes: int, w_bytes: int,
         *, weights: bool = True, batch: float = 1.0, groups: int = 1) -> Op:
    """A (batched) GEMM [m×k]·[k×n]: 2mkn FLOPs; reads both inputs and writes the output once. `groups` > 1: a
    grouped GEMM of that many [m/groups × k]·[k×n] products, each with its own weights (MoE experts)."""
    flop = 2.0 * m * k * n * batch
    wb = k * n * w_bytes * groups if weights else k * n * a_bytes * batch
    hbm = (m * k * a_bytes) * batch + wb + (m * n * a_bytes) * batch
    return Op(name, "matrix", phase, flop, hbm, dtype, 1, wb if weights else 0.0, groups=groups)


def vector(name: str, phase: str, nbytes: float, dtype: str, kernels: int = 1) -> Op:
    return Op(name, "vector", phase, 0.0, nbytes, dtype, kernels)


def _backward(op: Op) -> list[Op]:
    """Backward of a forward op: a GEMM becomes dgrad + wgrad (2× FLOPs); element-wise ops move ~2× the bytes."""
    if op.kind == "matrix":
        half = Op(op.name + ".dgrad", "matrix", "bwd", op.flop, op.hbm_bytes, op.dtype, 1, op.weight_bytes,
                  groups=op.groups)
        return [half, Op(op.name + ".wgrad", "matrix", "bwd", op.flop, op.hbm_bytes, op.dtype, 1, 0.0,
                         groups=op.groups)]
    if op.kind == "flash":
        # FlashAttention-2 backward: 5 GEMM-like products vs 2 forward (Dao 2023 §3.1.2) -> 2.5× FLOPs.
        return [Op(op.name, "flash", "bwd", 2.5 * op.flop, 2.5 * op.hbm_bytes, op.dtype, 1, 0.0,
                   model_flop=2.0 * op.useful_flop)]
    return [Op(op.name, "vector", "bwd", 0.0, 2.0 * op.hbm_bytes, op.dtype, op.kernels)]


def kv_width_per_rank(model: Model, tp: int) -> float:
    """K (or V) projection width one tensor-parallel rank holds: kv_heads/tp heads, or one whole (replicated)
    head when tp exceeds the kv heads (GQA with more tp ranks than key/value groups)."""
    return max(1.0, model.kv_heads / tp) * model.head_dim


ATTENTION_CORE_OPS = frozenset({"flash_attn", "attn_scores", "softmax", "attn_dropout", "attn_av"})
"""Names of the attention-core ops `attention_ops` makes (backward GEMMs add a `.dgrad`/`.wgrad` suffix)."""


def is_attention_core(op: Op) -> bool:
    return op.name.split(".", 1)[0] in ATTENTION_CORE_OPS


def attention_ops(model: Model, plan: Plan, kernel: str, phase: str = "fwd") -> list[Op]:
    """The attention core (scores, softmax, dropout, weighted sum) for one micro-batch and layer."""
    A = act_bytes(plan)
    dt = "bf16" if plan.precision == "fp8" else plan.precision  # attention math stays in 16-bit
    b, s, t = plan.mbs, model.seq_len // plan.cp, plan.tp
    s_kv = model.seq_len if plan.cp > 1 else s  # with context parallelism each query block sees all keys (ring)
    a_t = model.heads / t
    kv_t = max(1.0, model.kv_heads / t)
    d = model.head_dim
    if kernel == "flash":
        full = 4.0 * b * a_t * s * s_kv * d
        causal = min(1.0, 0.5 * (1.0 + FLASH_BLOCK / s_kv))
        io = b * s * (a_t + 2 * kv_t) * d * A + b * s * a_t * d * A
        return [Op("flash_attn", "flash", phase, full * causal, io, dt, 1, 0.0, model_flop=full)]
    S2 = b * a_t * s * s_kv  # score elements
    scores = Op("attn_scores", "matrix", phase, 2.0 * S2 * d,
                b * s * a_t * d * A + b * s_kv * kv_t * d * A + S2 * A, dt, 1, 0.0)
    softmax = vector("softmax", phase, 2.0 * S2 * A, dt)            # fused scale-mask-softmax: read + write
    dropout = vector("attn_dropout", phase, 2.0 * S2 * A + S2, dt)  # read, write, 1-byte mask
    core = [scores, softmax] + ([dropout] if model.dropout else [])
    av = Op("attn_av", "matrix", phase, 2.0 * S2 * d,
            S2 * A + b * s_kv * kv_t * d * A + b * s * a_t * d * A, dt, 1, 0.0)
    return core + [av]


def layer_forward_ops(model: Model, plan: Plan, attention_kernel: str) -> list[Op]:
    """Forward ops of one transformer layer on one rank for one micro-batch."""
    A = act_bytes(plan)
    W = 1 if plan.precision == "fp8" else A
    dt = plan.precision
    b, s, t, h = plan.mbs, model.seq_len // plan.cp, plan.tp, model.hidden
    m = b * s
    E = b * s * h
    E_norm = E / t if plan.sequence_parallel else E  # norms/dropout split over tp only with sequence parallel
    qkv_n = model.q_dim / t + 2 * kv_width_per_rank(model, t)
    ops = [vector("ln1", "fwd", 2 * E_norm * A, dt)]
    ops.append(gemm("qkv", "fwd", m, h, qkv_n, dt, A, W))
    ops += attention_ops(model, plan, attention_kernel)
    ops.append(gemm("attn_proj", "fwd", m, model.q_dim / t, h, dt, A, W))
    residual = residual_op(model, E_norm, A, dt)
    ops.append(residual)
    ops.append(vector("ln2", "fwd", 2 * E_norm * A, dt))
    ops += mlp_forward_ops(model, plan, model.ffn)
    ops.append(residual)
    return ops


def residual_op(model: Model, elements: float, a_bytes: int, dtype: str) -> Op:
    """Fused bias-dropout-add (read 2 tensors, write 1, 1-byte mask) or, without dropout, the residual add."""
    if model.dropout:
        return vector("bias_dropout_add", "fwd", elements * (3 * a_bytes + 1), dtype)
    return vector("residual_add", "fwd", elements * 3 * a_bytes, dtype)


def mlp_forward_ops(model: Model, plan: Plan, ffn: int, tokens_scale: float = 1.0, prefix: str = "mlp",
                    groups: int = 1) -> list[Op]:
    """Dense MLP (GeLU: up, act, down; SwiGLU: fused gate+up, act, down). `tokens_scale` scales the tokens (MoE);
    `groups` experts share them, each with its own weights (a grouped GEMM per matrix)."""
    A = act_bytes(plan)
    W = 1 if plan.precision == "fp8" else A
    dt = plan.precision
    m = plan.mbs * (model.seq_len // plan.cp) * tokens_scale
    h, t = model.hidden, plan.tp
    F = m * ffn / t
    g = groups
    if model.ffn_act == "swiglu":
        return [gemm(f"{prefix}_gate_up", "fwd", m, h, 2 * ffn / t, dt, A, W, groups=g),
                vector(f"{prefix}_swiglu", "fwd", 3 * F * A, dt),
                gemm(f"{prefix}_down", "fwd", m, ffn / t, h, dt, A, W, groups=g)]
    return [gemm(f"{prefix}_up", "fwd", m, h, ffn / t, dt, A, W, groups=g),
            vector(f"{prefix}_bias_gelu", "fwd", 2 * F * A, dt),
            gemm(f"{prefix}_down", "fwd", m, ffn / t, h, dt, A, W, groups=g)]


def backward_ops(fwd: list[Op]) -> list[Op]:
    out: list[Op] = []
    for op in fwd:
        out += _backward(op)
    return out


def as_phase(ops: list[Op], phase: str) -> list[Op]:
    return [Op(o.name, o.kind, phase, o.flop, o.hbm_bytes, o.dtype, o.kernels, o.weight_bytes, o.model_flop, o.groups)
            for o in ops]


def layer_params(model: Model, plan: Plan, *, moe_layer: bool = False) -> float:
    """Parameters of one layer held by one rank (tp-sharded matrices; norms replicated)."""
    h, t = model.hidden, plan.tp
    attn = h * (model.q_dim / t + 2 * kv_width_per_rank(model, t)) + model.q_dim * h / t
    norms = 2 * h
    if moe_layer and model.moe is not None:
        moe = model.moe
        experts = layer_expert_params(model, plan)
        shared = moe.shared_experts * model.mlp_matrices * h * moe.expert_ffn / t
        return attn + norms + experts + shared + h * moe.num_experts
    return attn + norms + model.mlp_matrices * h * model.ffn / t


def layer_expert_params(model: Model, plan: Plan) -> float:
    """Routed-expert parameters of one MoE layer held by one rank (num_experts/ep experts, tp-sharded)."""
    if model.moe is None:
        return 0.0
    moe = model.moe
    return (moe.num_experts / plan.ep) * model.mlp_matrices * model.hidden * moe.expert_ffn / plan.tp
