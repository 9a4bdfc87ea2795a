"""Constructors of the work items every model is built from: GEMMs, linear layers (with low-precision
quantization), element-wise kernels, and the backward and recompute passes derived from a forward op.

Each forward op also states the bytes it keeps for its backward (`Op.saved_bytes`), so activation memory is the sum
of what the ops keep — the same op list prices time and memory (Korthikanti et al. 2022 §4 count the same tensors
component by component; tests/workload check the sum reproduces their closed forms).
"""
from __future__ import annotations

from narrowpath.spec.plan import Plan
from narrowpath.workload.items import Op
from narrowpath.workload.precision import QuantizeCost, act_bytes, matrix_dtype, operand_bytes, quantize_cost


def gemm(name: str, phase: str, m: float, k: float, n: float, dtype: str, a_bytes: float, w_bytes: float,
         *, weights: bool = True, batch: float = 1.0, groups: int = 1, out_bytes: float | None = None,
         saved_bytes: float = 0.0, grad_elements: float = 0.0, grad_gathered: float = 0.0) -> Op:
    """A (batched) GEMM [m×k]·[k×n]: 2mkn FLOPs; reads both inputs and writes the output once. `groups` > 1: a
    grouped GEMM of that many [m/groups × k]·[k×n] products, each with its own weights (MoE experts).
    `weights=False`: the second operand is an activation (attention scores), read at `a_bytes`."""
    flop = 2.0 * m * k * n * batch
    wb = k * n * w_bytes * groups if weights else k * n * a_bytes * batch
    out = a_bytes if out_bytes is None else out_bytes
    hbm = (m * k * a_bytes) * batch + wb + (m * n * out) * batch
    # a grouped GEMM is issued per group (Transformer Engine's GroupedLinear runs one cuBLAS GEMM per expert)
    return Op(name, "matrix", phase, flop, hbm, dtype, groups, wb if weights else 0.0, groups=groups,
              saved_bytes=saved_bytes, grad_elements=grad_elements, grad_gathered=grad_gathered, rows=m / groups)


def vector(name: str, phase: str, nbytes: float, dtype: str, kernels: int = 1, saved_bytes: float = 0.0,
           bwd_bytes: float | None = None, bwd_kernels: int | None = None) -> Op:
    """An element-wise / bandwidth-bound kernel moving `nbytes` at HBM (`bwd_bytes`, `bwd_kernels`: its backward's,
    where the element-wise rule's twice the forward would misprice it)."""
    return Op(name, "vector", phase, 0.0, nbytes, dtype, kernels, saved_bytes=saved_bytes, bwd_bytes=bwd_bytes,
              bwd_kernels=bwd_kernels)


def quantize_op(name: str, phase: str, elements: float, q: QuantizeCost, *, fused: bool = False,
                kernels: int | None = None, gathered: float = 0.0) -> Op:
    """Quantizing `elements` BF16 values into a low-precision recipe's copies (workload.precision.QuantizeCost):
    a kernel of its own, or fused into the kernel that produces the tensor (`fused`: no launch of its own). The
    bytes of the transposed FP8 copy are marked (Op.transpose_bytes), which devices whose FP8 GEMMs take any layout
    do not write.

    `gathered` > 0: the quantized values are then all-gathered into that many elements. A per-tensor FP8 tensor is
    cast row-wise only before the gather and its transpose made from the gathered tensor (read and write 1 byte per
    gathered element: Transformer Engine's `fp8_transpose` of the gathered input and output gradient; TE 2.x
    `_all_gather_fp8` gathers row-wise data and transposes after); block-scaled formats gather their column-wise
    copy with its own scales, as quantized locally. The transpose's launch is not counted."""
    per = q.fused_bytes if fused else q.standalone_bytes
    launches = (0 if fused else q.kernels) if kernels is None else kernels
    tb = q.transpose_bytes
    if gathered and tb:
        transpose = 2.0 * tb * gathered
        return Op(name, "vector", phase, 0.0, elements * (per - tb) + transpose, "bf16", launches,
                  transpose_bytes=transpose)
    return Op(name, "vector", phase, 0.0, elements * per, "bf16", launches, transpose_bytes=elements * tb)


def grouped_quantize_kernels(q: QuantizeCost, groups: int, sync_free: bool) -> int:
    """Launches quantizing the input (or output gradient) of a grouped GEMM of `groups` experts: Transformer Engine's
    `split_quantize` (transformer_engine/pytorch/csrc/extensions/cast.cpp, multi_tensor_quantize_impl) runs one
    fused multi-tensor cast only for FP8 delayed scaling and otherwise quantizes the splits individually — each
    expert's rows its own amax and cast for per-tensor current scaling, its own cast for MXFP8; NVFP4's split
    quantize is grouped (one amax and one cast kernel over all splits, split_quantize_nvfp4_impl). A sync-free
    expert path (`sync_free`: plan.moe_sync_free) has no split sizes on the host to loop over: it quantizes the
    grouped tensor in one launch set (cast.cpp `group_quantize`, "cuda graph safe with shapes stored in device")."""
    return q.kernels * (groups if q.per_split and not sync_free else 1)


def linear(name: str, plan: Plan, m: float, k: float, n: float, *, groups: int = 1, fused_input: bool = False,
           saved_rows: float | None = None, gathered_in: float = 1, scattered_out: float = 1) -> list[Op]:
    """A linear layer's forward on one rank: [quantize the input →] GEMM [m×k]·[k×n] in the plan's format.

    Low-precision recipes (workload.precision) first quantize the BF16 input — in the norm kernel when it is
    fused (`fused_input`, TE LayerNormLinear) — then read the quantized operands; the output is BF16. The layer
    keeps its (quantized) input for the weight gradient: `saved_rows` of it (the sequence-parallel shard when the
    GEMM reads an all-gathered input, which backward re-gathers; default m). A grouped GEMM's input and output
    gradient are quantized expert by expert (`grouped_quantize_kernels`): the bytes of one cast, the launches of
    `groups`.

    An input all-gathered over `gathered_in` sequence-parallel ranks is quantized on the local m/gathered_in rows
    before the gather, and an output reduce-scattered over `scattered_out` ranks gets its gradient back by a
    gather of the m/scattered_out local rows quantized first (precision.gather_bytes); an expert GEMM fed by an
    FP8 dispatch passes the copies per token sent as both (workload.moe.fp8_dispatch_ways). Either is one cast,
    not one per expert."""
    A = act_bytes(plan)
    ob = operand_bytes(plan)
    q = quantize_cost(plan.precision)
    ops: list[Op] = []
    if q is not None:
        # quantized before a gather or an exchange: one tensor, not expert by expert
        ops.append(quantize_op(f"{name}.quantize", "fwd", m / gathered_in * k, q, fused=fused_input,
                               kernels=None if fused_input else grouped_quantize_kernels(
                                   q, groups if gathered_in == 1 else 1, plan.moe_sync_free),
                               gathered=m * k if gathered_in > 1 else 0.0))
    rows = m if saved_rows is None else saved_rows
    low = q is not None
    ops.append(gemm(name, "fwd", m, k, n, matrix_dtype(plan), ob, ob, groups=groups, out_bytes=A,
                    saved_bytes=rows * k * ob, grad_elements=m / scattered_out * n if low else 0.0,
                    grad_gathered=m * n if low and scattered_out > 1 else 0.0))
    return ops


def _backward(op: Op, plan: Plan | None) -> list[Op]:
    """Backward of a forward op: a GEMM becomes dgrad + wgrad (2× FLOPs), preceded for a low-precision GEMM by the
    quantization of its output gradient; flash attention 2.5× (Dao 2023 §3.1.2: five GEMM-like products vs two);
    element-wise ops move ~2× the bytes, unless the op states its own backward (`Op.bwd_bytes`, `Op.bwd_kernels`: an
    autograd graph the source gives, where the 2× rule would misprice it)."""
    if op.kind == "matrix":
        out = []
        if op.grad_elements and plan is not None:
            q = quantize_cost(plan.precision)
            out.append(quantize_op(op.name + ".grad_quantize", "bwd", op.grad_elements, q,
                                   kernels=grouped_quantize_kernels(q, 1 if op.grad_gathered else op.groups,
                                                                    plan.moe_sync_free),
                                   gathered=op.grad_gathered))
        # dgrad multiplies the output gradient's m rows by the weights, as the forward; wgrad reduces over the m
        # rows into a k×n output that fills the GPU however few the rows are (no rows: the size ramp)
        out.append(Op(op.name + ".dgrad", "matrix", "bwd", op.flop, op.hbm_bytes, op.dtype, op.kernels,
                      op.weight_bytes, groups=op.groups, rows=op.rows))
        out.append(Op(op.name + ".wgrad", "matrix", "bwd", op.flop, op.hbm_bytes, op.dtype, op.kernels, 0.0,
                      groups=op.groups))
        return out
    if op.kind == "flash":
        return [Op(op.name, "flash", "bwd", 2.5 * op.flop, 2.5 * op.hbm_bytes, op.dtype, 1, 0.0,
                   model_flop=2.0 * op.useful_flop, exps=op.exps, head_dim=op.head_dim, impl=op.impl)]
    if op.kernels == 0 and op.hbm_bytes == 0:
        return []
    nbytes = 2.0 * op.hbm_bytes if op.bwd_bytes is None else op.bwd_bytes
    kernels = max(1, op.kernels) if op.bwd_kernels is None else op.bwd_kernels
    return [Op(op.name, "vector", "bwd", 0.0, nbytes, op.dtype, kernels)]


def backward_ops(fwd: list[Op], plan: Plan | None = None) -> list[Op]:
    """Backward ops of a forward op list (`plan` prices the low-precision gradient quantization)."""
    out: list[Op] = []
    for op in fwd:
        if op.name.endswith(".quantize"):
            continue  # the input quantization has no backward of its own (the grad quantize is the GEMM's)
        out += _backward(op, plan)
    return out


def as_phase(ops: list[Op], phase: str) -> list[Op]:
    """The same ops re-run in another phase (a recompute pass keeps nothing for backward)."""
    return [Op(o.name, o.kind, phase, o.flop, o.hbm_bytes, o.dtype, o.kernels, o.weight_bytes, o.model_flop,
               o.groups, transpose_bytes=o.transpose_bytes, host_kernels=o.host_kernels, host_syncs=o.host_syncs,
               rows=o.rows, exps=o.exps, head_dim=o.head_dim, impl=o.impl)
            for o in ops]


ATTENTION_CORE_OPS = frozenset({"flash_attn", "attn_scores", "softmax", "attn_dropout", "attn_av"})
"""Names of the attention-core ops (backward GEMMs add a `.dgrad`/`.wgrad` suffix)."""


def is_attention_core(op: Op) -> bool:
    return op.name.split(".", 1)[0] in ATTENTION_CORE_OPS


def is_weight_gradient(op: Op) -> bool:
    """A weight-gradient GEMM of a linear layer: the W pass a zero-bubble schedule defers (the attention core's
    backward GEMMs have no weights)."""
    return op.name.endswith(".wgrad") and not is_attention_core(op)
