"""Selective recompute by module (Megatron-Core `--recompute-granularity selective --recompute-modules`): which of a
layer's forward ops drop what they keep for backward and run again before it.

Megatron-Core's modules (TransformerConfig.recompute_modules) and what they mean on a layer's ops:
- `core_attn` (the default): the attention core runs again before its backward whatever the kernel (Megatron-Core
  Attention: `checkpoint_core_attention` for selective granularity with `core_attn`, `_checkpointed_attention_
  forward`); an unfused core drops its score-sized tensors (Korthikanti et al. 2022 §5), a flash core keeps Q, K, V
  as the checkpoint's inputs and its output O for the projection, so only its log-sum-exp goes (not counted).
- `layernorm`: a norm's output is discarded once the projections after it have read it (output-discarding
  checkpoint): they no longer keep their input, and the norm runs again. Only a norm that is a module of its own
  counts: Transformer Engine fuses the attention norm into the qkv projection and a dense MLP's norm into its
  up-projection (LayerNormLinear; Megatron-Core's spec then has no separate norm to recompute); MLA's input norm
  (read by two down-projections) and an MoE layer's pre-MLP norm (read by the router and the experts) are separate.
- `mla_up_proj`: the MLA up-projections (with their latent norms) and RoPE run without keeping anything: the query,
  key and value the attention core keeps are discarded and rebuilt from the latent vectors the norms keep.
- `moe_act`: the experts' activation function: its output, the down-projection's input, is discarded.
- `mlp`, `shared_experts`, `moe`: the dense MLP, the shared experts or the whole MoE layer (router, dispatch,
  experts, combine) are checkpointed from their input: everything inside them is dropped but that input, and the
  whole block runs again (the MoE layer's dispatch and combine with it). A dense MLP's input is the residual its
  fused norm keeps; the shared experts' is the MoE input the router keeps.
- `alternate_matmuls`: torchtitan's op-level selective activation checkpointing (`selective_ac_option = "op"`,
  torchtitan's parallelize_llama.py `_get_custom_policy`): of each layer's matrix multiplies in call
  order, the outputs of every second one are not saved (the 1st, 3rd, ... are, with attention's output and the
  amax reductions of low-precision casts), and everything not saved runs again before backward. On a dense layer
  (wq, wk, wv, wo, then w1, w3, w2 for SwiGLU or w1, w2 for GELU) the key projection, the attention output
  projection and the SwiGLU's second up-projection (GELU: the down-projection) run again — a share of the fused
  qkv and up-projection GEMMs (`alternate_matmul_shares`) — with the norms, RoPE, the activation and the residual
  adds; the attention core does not. Defined for dense, non-MLA layers; MoE and MLA layers are left as they are.
A module a layer does not have changes nothing on it.
"""
from __future__ import annotations

import dataclasses

from narrowpath.spec.model import Model
from narrowpath.spec.plan import Plan
from narrowpath.workload.attention import attention_ops
from narrowpath.workload.items import Op
from narrowpath.workload.ops import as_phase, is_attention_core
from narrowpath.workload.precision import act_bytes

SCORE_OPS = frozenset({"softmax", "attn_dropout", "attn_av"})
"""Ops of an unfused attention core whose saved tensors are score-sized (what `core_attn` recompute drops)."""
INPUT_NORM_CONSUMERS = frozenset({"q_down", "q_proj", "kv_down"})
"""Projections that read MLA's separate input norm (and keep its output for their weight gradient)."""
MLP_NORM_CONSUMERS = frozenset({"router", "shared_up"})
"""Projections that read an MoE layer's separate pre-MLP norm."""
PARALLEL_NORM_CONSUMERS = frozenset({"qkv", "mlp_up"})
"""Projections that read a parallel block's one norm (model.parallel_attn_mlp, workload.transformer)."""
UNQUANTIZED = frozenset({"bf16", "fp16", "fp32", "tf32"})
"""GEMM formats whose input is kept as the activation itself (no quantized copy)."""
UP_PROJ = frozenset({"q_up", "kv_up", "rope"})
DENSE_MLP = frozenset({"mlp_up", "mlp_act", "mlp_down"})
SHARED = frozenset({"shared_up", "shared_act", "shared_down"})
MOE_BLOCK = frozenset({"router", "router_topk", "moe_permute", "expert_up", "expert_act_clamp", "expert_act",
                       "expert_down", "expert_bias", "moe_unpermute"}) | SHARED


ALTERNATE_WHOLE = frozenset({"ln1", "rope", "residual_add", "bias_dropout_add", "ln2", "mlp_act"})
"""Element-wise ops of a dense layer that run again under `alternate_matmuls` (none of their outputs is saved;
dropout replays its random state)."""


def alternate_matmul_shares(model: Model) -> dict[str, float]:
    """Under torchtitan's op policy: the share of each (fused) GEMM of a dense layer whose matmuls run again — every
    second matmul in call order (wq, wk, wv, wo, w1[, w3], w2), counted from 1 (`_get_custom_policy`:
    `meta["forward_mm_count"] % 2 == 0` is not saved). qkv's share is wk's columns of wq | wk | wv."""
    q, kv = model.heads * model.qk_head_dim, model.kv_heads * model.qk_head_dim
    calls = [("qkv", q), ("qkv", kv), ("qkv", model.kv_heads * model.v_head_dim), ("attn_proj", None)]
    calls += [("mlp_up", 0.5), ("mlp_up", 0.5), ("mlp_down", None)] if model.ffn_act == "swiglu" else \
        [("mlp_up", None), ("mlp_down", None)]
    qkv_total = q + kv + model.kv_heads * model.v_head_dim
    shares: dict[str, float] = {}
    for i, (name, part) in enumerate(calls, start=1):
        if i % 2 == 0:
            share = 1.0 if part is None else (part / qkv_total if name == "qkv" else part)
            shares[name] = shares.get(name, 0.0) + share
    return shares


def _alternate_applies(model: Model, moe_layer: bool) -> bool:
    return not moe_layer and model.mla is None


def _base(op: Op) -> str:
    return op.name.split(".", 1)[0]


def modules_of(plan: Plan) -> frozenset[str]:
    """The modules a plan recomputes selectively (none unless `recompute: selective`; `core_attn` by default), and
    `moe_act` under DeepSeek-V3's low-precision storage (plan.activation_cache `fp8`: the experts' SwiGLU output
    is recomputed from the cached FP8 input, §3.3.2) unless the whole layer is recomputed anyway."""
    mods = set(plan.recompute_modules or ("core_attn",)) if plan.recompute == "selective" else set()
    if plan.activation_cache == "fp8" and plan.recompute != "full":
        mods.add("moe_act")
    return frozenset(mods)


def _qkv_bytes(model: Model, plan: Plan) -> float:
    """Query, key and value the attention core keeps for one micro-batch on one rank (MLA head sizes)."""
    mla = model.mla
    tokens = plan.mbs * model.seq_len / plan.cp
    return tokens * model.heads / plan.tp * (2 * mla.qk_head_dim + mla.v_head_dim) * act_bytes(plan)


def _separate_norms(model: Model, moe_layer: bool) -> tuple[set[str], set[str]]:
    """(norms, their consumers) of a layer that are modules of their own (not fused into a projection)."""
    norms, consumers = set(), set()
    if model.mla is not None:
        norms.add("ln1")
        consumers |= INPUT_NORM_CONSUMERS
    if moe_layer:
        norms.add("ln2")
        consumers |= MLP_NORM_CONSUMERS
    elif model.parallel_attn_mlp:  # one norm feeding both blocks' projections: fused into neither
        norms.add("ln1")
        consumers |= PARALLEL_NORM_CONSUMERS
    return norms, consumers


def _is_moe_layer(ops: list[Op]) -> bool:
    return any(_base(op) == "router" for op in ops)


def _effects(mods: frozenset[str], model: Model, moe_layer: bool) -> tuple[set[str], set[str], set[str]]:
    """What the modules do to a layer, by op base name: (ops whose kept tensors are discarded, ops that run again
    whole, projections whose input quantization runs again because a recomputed module rebuilds that input)."""
    drop: set[str] = set()
    whole: set[str] = set()
    quantize: set[str] = set()
    if "core_attn" in mods:
        drop |= SCORE_OPS  # the core itself runs again (attention_ops, unfused kernels only)
    if "layernorm" in mods:
        norms, consumers = _separate_norms(model, moe_layer)
        drop |= consumers
        whole |= norms
        quantize |= consumers
    if "mla_up_proj" in mods and model.mla is not None:
        drop |= {"q_up", "kv_up"}  # output-discarding: the up-projections run without autograd, keeping nothing
        whole |= UP_PROJ | {"q_norm", "kv_norm"}  # the latent norms run inside the checkpoint too
    if "moe_act" in mods:
        drop |= {"expert_down", "expert_act_clamp"}  # the checkpoint around the activation keeps only its input
        whole |= {"expert_act_clamp", "expert_act"}
        quantize.add("expert_down")
    if "mlp" in mods and not moe_layer:
        drop |= DENSE_MLP  # the checkpoint keeps the block's input, the residual the (fused) norm ln2 keeps
        whole |= DENSE_MLP | {"ln2"}  # from the residual: the fused norm runs again inside LayerNormLinear
    if "shared_experts" in mods:
        drop |= SHARED if moe_layer else SHARED - {"shared_up"}  # the router keeps the same input
        whole |= SHARED
    if "moe" in mods and moe_layer:
        drop |= MOE_BLOCK - {"router"}  # the router keeps the MoE block's input, which the shared experts read too
        whole |= MOE_BLOCK
    if "alternate_matmuls" in mods and _alternate_applies(model, moe_layer):
        # kept: the layer input (ln1's), attention's Q/K/V/O and the saved matmul outputs (w1 in mlp_act's inputs);
        # dropped: the norms' outputs the projections keep, the recomputed projections' inputs, the down-projection's
        # input (the activation runs again), dropout masks (replayed)
        drop |= {"qkv", "attn_proj", "ln2", "mlp_up", "mlp_down", "bias_dropout_add"}
        whole |= ALTERNATE_WHOLE
        quantize |= set(alternate_matmul_shares(model))
    return drop, whole, quantize


def kept_bytes(ops: list[Op], model: Model, plan: Plan) -> float:
    """Bytes a layer's forward `ops` keep for backward under the plan's selective recompute modules."""
    mods = modules_of(plan)
    moe_layer = _is_moe_layer(ops)
    drop = _effects(mods, model, moe_layer)[0]
    kept = sum(op.saved_bytes for op in ops if _base(op) not in drop)
    if "alternate_matmuls" in mods and _alternate_applies(model, moe_layer):
        # the SwiGLU activation keeps w1's output (saved) but not w3's (run again): half its saved inputs
        kept -= sum(op.saved_bytes for op in ops if _base(op) == "mlp_act" and "mlp_act" not in drop) * \
            alternate_matmul_shares(model).get("mlp_up", 0.0)
    if "mla_up_proj" in mods and model.mla is not None:
        core = sum(op.saved_bytes for op in ops if is_attention_core(op) and _base(op) not in drop)
        kept -= min(core, _qkv_bytes(model, plan))
    first = INPUT_NORM_CONSUMERS | PARALLEL_NORM_CONSUMERS if model.parallel_attn_mlp else \
        INPUT_NORM_CONSUMERS  # a parallel block's MLP reads the input norm's output too
    for consumers in (first, MLP_NORM_CONSUMERS):
        kept -= shared_input_double_count(ops, consumers, drop)
    return kept


def shared_input_double_count(ops: list[Op], consumers: frozenset[str], drop: set[str]) -> float:
    """Bytes counted twice when projections reading one separate norm each keep its output unquantized: one tensor
    (MLA's q_down and kv_down on ln1's output; an MoE layer's router and shared-expert up-projection on ln2's; a
    parallel block's qkv and MLP up-projection on its one norm's).
    Transformer Engine's BF16 Linear saves its input tensor itself, not a copy, and Megatron-Core's router saves
    its input before any cast (`RouterGatingLinearFunction.forward`: `ctx.save_for_backward(inp, weight, bias)`),
    so autograd holds it once; a low-precision projection keeps its own quantized copy, counted on its own."""
    held = [op.saved_bytes for op in ops
            if _base(op) in consumers and _base(op) not in drop and op.dtype in UNQUANTIZED and op.saved_bytes > 0]
    return sum(held) - max(held) if len(held) > 1 else 0.0


def recompute_ops(fwd: list[Op], model: Model, plan: Plan, kernel: str, window: bool) -> list[Op]:
    """The forward ops a layer runs again before its backward under selective recompute (phase `recompute`):
    whole ops of the recomputed modules, and the input quantization of a projection whose (discarded) input a
    recomputed module rebuilds."""
    mods = modules_of(plan)
    moe_layer = _is_moe_layer(fwd)
    _, whole, quantize = _effects(mods, model, moe_layer)
    again = [op for op in fwd
             if _base(op) in whole or (op.name.endswith(".quantize") and _base(op) in quantize)]
    if "alternate_matmuls" in mods and _alternate_applies(model, moe_layer):
        shares = alternate_matmul_shares(model)
        again += [_share(op, shares[op.name]) for op in fwd
                  if op.name in shares and op.kind == "matrix" and op.name not in whole]
    ops = as_phase(again, "recompute")
    if "core_attn" in mods:
        ops += attention_ops(model, plan, kernel, phase="recompute", window=window)
    return ops


def _share(op: Op, f: float) -> Op:
    """`f` of a GEMM's columns run again: the work a recompute op is priced by scaled (its FLOPs, HBM bytes and
    weight bytes; a GEMM writes no transposed copy — its input quantization does); shape fields kept. What a
    recompute op does not carry (kept bytes, output-gradient elements) is dropped by `as_phase`."""
    return dataclasses.replace(op, flop=op.flop * f, hbm_bytes=op.hbm_bytes * f, weight_bytes=op.weight_bytes * f)


def recomputes_dispatch(plan: Plan) -> bool:
    """Whether a MoE layer's dispatch and combine run again before its backward (full recompute, or the `moe`
    module)."""
    return plan.recompute == "full" or "moe" in modules_of(plan)


def alternate_matmuls_recomputed(model: Model, plan: Plan, moe_layer: bool) -> bool:
    """Whether torchtitan's op policy re-runs matmuls of both tp-sharded blocks of a layer (wk and wo in attention,
    w3 or w2 in the MLP), and with them both blocks' tp gather and scatter."""
    return "alternate_matmuls" in modules_of(plan) and _alternate_applies(model, moe_layer)


def tp_block_recomputed(model: Model, plan: Plan, moe_layer: bool) -> bool:
    """Whether selective recompute runs a layer's tp-sharded MLP block again (the dense MLP, or an MoE layer's shared
    experts), and with it the block's tp gather and scatter; routed experts, tensor-parallel or not, get their
    tokens from the dispatcher, which the `moe` module re-runs (recomputes_dispatch)."""
    mods = modules_of(plan)
    if not moe_layer:
        return "mlp" in mods
    return bool(model.moe.shared_experts and ("shared_experts" in mods or "moe" in mods))
