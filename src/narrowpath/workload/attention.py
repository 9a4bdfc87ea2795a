"""The attention block of one transformer layer on one rank, for one micro-batch (Megatron-Core layout).

Legend: b micro-batch (sequences), s local sequence (seq_len/cp), h hidden, t tensor-parallel degree, a_t = heads/t
local heads, d_qk / d_v per-head query-key and value widths, A activation bytes, E = b·s·h.

Grouped-query attention: norm → QKV projection → rotary embedding → attention core → output projection →
residual. Multi-head latent attention (DeepSeek-V2 §2.1, V3 §2.1.1, as Megatron-Core's MLASelfAttention runs it
for training): every tensor-parallel rank holds the down-projections to the query latent (q_lora_rank) and to the
joint key/value latent plus the shared rotary key (kv_lora_rank + qk_rope_head_dim) and, under sequence
parallelism, runs them and the latent norms on its own tokens; the column-parallel per-head up-projections gather
the latents; the core then is multi-head attention with query/key width qk_nope + qk_rope and value width
v_head_dim. Sliding-window layers are causal and attend to the last `window` keys (window_tile_fraction).
"""
from __future__ import annotations

import dataclasses
import math

from narrowpath.spec.model import Model
from narrowpath.spec.plan import Plan
from narrowpath.workload.counts import qk_norm_parameters
from narrowpath.workload.items import Op
from narrowpath.workload.ops import linear, vector
from narrowpath.workload.precision import act_bytes, cached_bytes, core_dtype

FLASH_BLOCK = 128  # FlashAttention tile size along the sequence (Dao 2023), for the causal work fraction


def kv_width_per_rank(model: Model, tp: int) -> float:
    """K (or V) projection width one tensor-parallel rank holds: kv_heads/tp heads, or one whole (replicated)
    head when tp exceeds the kv heads (GQA with more tp ranks than key/value groups)."""
    return max(1.0, model.kv_heads / tp) * model.head_dim


def kv_pair_width_per_rank(model: Model, tp: int) -> float:
    """Width of one token's K plus V on a tensor-parallel rank: 2·kv_width_per_rank, or with MLA the up-projected
    per-head keys (qk_nope + qk_rope) and values of heads/tp heads."""
    if model.mla is not None:
        return model.heads / tp * (model.mla.qk_head_dim + model.mla.v_head_dim)
    return 2 * kv_width_per_rank(model, tp)


def causal_tile_fraction(s_kv: float, block: float = FLASH_BLOCK) -> float:
    """Share of an s_kv × s_kv score matrix a causal flash kernel computes: the lower triangle and its diagonal
    tiles, Σ_q (q + 1) / n² = (n + 1) / (2n) over n = s_kv/block key tiles (Dao 2023: fully masked tiles skipped)."""
    return min(1.0, 0.5 * (1.0 + block / s_kv))


def window_tile_fraction(s_kv: float, window: float, block: float = FLASH_BLOCK) -> float:
    """Share of an s_kv × s_kv score matrix a flash kernel computes for causal sliding-window attention: query i
    sees keys max(0, i − window + 1) … i, so a query tile touches k = ⌈(window − 1)/block⌉ + 1 key tiles once the
    window has filled, and q + 1 tiles before (q its index): Σ_q min(q + 1, k) / n² = (k·n − k(k − 1)/2) / n² over
    n = s_kv/block tiles — about (window/s_kv)·(1 − window/(2·s_kv)), the band less the triangle at the start of
    the sequence (Mistral 7B, Jiang et al. 2023 §2; a window of the whole sequence is plain causal attention)."""
    n = s_kv / block
    k = min(n, math.ceil((window - 1) / block) + 1.0)
    return min(causal_tile_fraction(s_kv, block), (k * n - k * (k - 1) / 2) / (n * n))


def attended_keys(model: Model, plan: Plan, window: bool) -> tuple[float, float]:
    """(keys a query block sees, fraction of the query × key score matrix a causal flash kernel computes): with
    context parallelism each query block sees all keys (ring, load-balanced: every rank an equal share of the
    causal work); a sliding-window layer computes only the band of `window` keys behind each query
    (window_tile_fraction)."""
    s = model.seq_len // plan.cp
    s_kv = model.seq_len if plan.cp > 1 else s
    if window and model.sliding_window < s_kv:
        return float(s_kv), window_tile_fraction(s_kv, model.sliding_window)
    return float(s_kv), causal_tile_fraction(s_kv)


def kernel_of(attention: str, default: str) -> str:
    """The attention kernel's structure (`flash` or `unfused`) for plan.attention `attention`: `auto` takes the
    calibration's `default`; FlashAttention-2 (`flash2`) is a flash kernel (its ops carry `impl` fa2)."""
    if attention == "auto":
        return default
    return "flash" if attention == "flash2" else attention


def attention_ops(model: Model, plan: Plan, kernel: str, phase: str = "fwd", window: bool = False) -> list[Op]:
    """The attention core (scores, softmax, dropout, weighted sum) for one micro-batch and layer, in 16 bit.
    Saved for backward: Q, K, V and the output with the log-sum-exp statistics (flash), or the softmax output,
    the dropout mask and output (unfused; Korthikanti et al. 2022 §4)."""
    A = act_bytes(plan)
    dt = core_dtype(plan)
    b, s, t = plan.mbs, model.seq_len // plan.cp, plan.tp
    s_kv, frac = attended_keys(model, plan, window)
    a_t = model.heads / t
    d_qk, d_v = model.qk_head_dim, model.v_head_dim
    kv_t = a_t if model.mla is not None else max(1.0, model.kv_heads / t)
    q_bytes, k_bytes, v_bytes = b * s * a_t * d_qk * A, b * s * kv_t * d_qk * A, b * s * kv_t * d_v * A
    out_bytes = b * s * a_t * d_v * A
    if kernel == "flash":
        full = 2.0 * b * a_t * s * s_kv * (d_qk + d_v)
        io = q_bytes + k_bytes + v_bytes + out_bytes
        e5m6 = cached_bytes(plan, "attention_output")  # O kept once, in E5M6, for the core and the projection
        kept_out = out_bytes if e5m6 is None else b * s * a_t * d_v * e5m6
        saved = q_bytes + k_bytes + v_bytes + kept_out + 4 * b * a_t * s  # Q, K, V, O and the fp32 log-sum-exp
        return [Op("flash_attn", "flash", phase, full * frac, io, dt, 1, 0.0, model_flop=full * frac
                   if window else full, saved_bytes=saved, exps=b * a_t * s * s_kv * frac, head_dim=d_qk,
                   impl="fa2" if plan.attention == "flash2" else "")]
    S2 = b * a_t * s * s_kv  # score elements
    scores = Op("attn_scores", "matrix", phase, 2.0 * S2 * d_qk, q_bytes + b * s_kv * kv_t * d_qk * A + S2 * A, dt,
                1, 0.0, saved_bytes=q_bytes + k_bytes + v_bytes)  # the core's inputs Q, K (and V for AV)
    softmax = vector("softmax", phase, 2.0 * S2 * A, dt, saved_bytes=S2 * A)  # fused scale-mask-softmax
    dropout = vector("attn_dropout", phase, 2.0 * S2 * A + S2, dt, saved_bytes=S2)  # read, write, 1-byte mask
    av_saved = S2 * A if model.dropout else 0.0  # the dropped-out probabilities (else: the softmax output)
    core = [scores, softmax] + ([dropout] if model.dropout else [])
    av = Op("attn_av", "matrix", phase, 2.0 * S2 * d_v, S2 * A + b * s_kv * kv_t * d_v * A + out_bytes, dt, 1, 0.0,
            saved_bytes=av_saved)
    return core + [av]


def mla_gathered_width(model: Model, gemm_bytes: float, a_bytes: float) -> float:
    """Bytes per token MLA's attention block all-gathers over sequence-parallel ranks: the query latent (or, without
    one, the layer's input for the column-parallel q_proj) and the key/value latent in the GEMM operand format, the
    shared rotary key in 16 bit — 1,536 + 512 + 64 elements for DeepSeek-V3 instead of the 7,168 of its input."""
    mla = model.mla
    return (mla.q_lora_rank or model.hidden) * gemm_bytes + mla.kv_lora_rank * gemm_bytes \
        + mla.qk_rope_head_dim * a_bytes


def norm_op(name: str, plan: Plan, elements: float) -> Op:
    """LayerNorm/RMSNorm: read and write the tensor; keeps its input for backward. Its backward reads the input and
    the output's gradient and writes the input's (Transformer Engine's rmsnorm_bwd / layernorm_bwd; the scale's
    gradient is a per-column partial sum): 3 tensors, not the element-wise rule's twice the forward's 2."""
    A = act_bytes(plan)
    return vector(name, "fwd", 2 * elements * A, plan.precision, saved_bytes=elements * A, bwd_bytes=3 * elements * A)


def qk_norm_op(plan: Plan, elements: float) -> Op:
    """The query heads' norm and the key heads' (`model.qk_norm`: Megatron-Core's `q_layernorm` and `k_layernorm`,
    two Transformer Engine RMSNorm calls on the projection's q and k; HF Qwen3Attention's q_norm / k_norm) over the
    rank's `elements` query and key elements: `norm_op`'s bytes, kept input and backward, in two launches each way."""
    return dataclasses.replace(norm_op("qk_norm", plan, elements), kernels=2, bwd_kernels=2)


def attention_block_ops(model: Model, plan: Plan, kernel: str, window: bool = False) -> list[Op]:
    """Forward ops of the attention half of a layer: norm, projections, rotary, core, output projection."""
    A = act_bytes(plan)
    b, s, t, h = plan.mbs, model.seq_len // plan.cp, plan.tp, model.hidden
    m = b * s
    sp = plan.sequence_parallel
    g = t if sp else 1  # ranks a sequence-parallel input is gathered from (and an output scattered to)
    rows = m / g  # what a rank keeps of an all-gathered GEMM input (backward re-gathers it)
    E_norm = m * h / t if sp else m * h
    ops = [norm_op("ln1", plan, E_norm)]
    if model.mla is None:
        qkv_n = model.q_dim / t + 2 * kv_width_per_rank(model, t)
        ops += linear("qkv", plan, m, h, qkv_n, fused_input=True, saved_rows=rows, gathered_in=g)
        rope_elems = m * (model.heads / t + max(1.0, model.kv_heads / t)) * model.head_dim
        if model.qk_norm:
            ops.append(qk_norm_op(plan, rope_elems))
    else:
        # the duplicated down-projections and their latent norms run on the rank's sequence-parallel shard (`rows`);
        # the column-parallel up-projections gather the latents (Megatron-Core MLASelfAttention
        # get_query_key_value_tensors: TELinear down-projections, parallel_mode 'duplicated')
        mla, a_t = model.mla, model.heads / t
        if mla.q_lora_rank:
            ops += linear("q_down", plan, rows, h, mla.q_lora_rank, fused_input=True)
            ops.append(norm_op("q_norm", plan, rows * mla.q_lora_rank))
            ops += linear("q_up", plan, m, mla.q_lora_rank, a_t * mla.qk_head_dim, fused_input=True,
                          saved_rows=rows, gathered_in=g)
        else:
            ops += linear("q_proj", plan, m, h, a_t * mla.qk_head_dim, fused_input=True, saved_rows=rows,
                          gathered_in=g)
        ops += linear("kv_down", plan, rows, h, mla.kv_lora_rank + mla.qk_rope_head_dim, fused_input=True)
        ops.append(norm_op("kv_norm", plan, rows * mla.kv_lora_rank))
        ops += linear("kv_up", plan, m, mla.kv_lora_rank, a_t * (mla.qk_nope_head_dim + mla.v_head_dim),
                      fused_input=True, saved_rows=rows, gathered_in=g)
        rope_elems = m * (a_t + 1) * mla.qk_rope_head_dim
    ops.append(vector("rope", "fwd", 2 * rope_elems * A, plan.precision))
    ops += attention_ops(model, plan, kernel, window=window)
    # flash keeps its output O for its own backward; a 16-bit projection reads that same tensor, a low-precision
    # one keeps its quantized copy — or, with DeepSeek-V3's low-precision storage, both read the one E5M6 copy
    # (an unfused core does not keep O: its projection keeps its own quantized input either way)
    shared_o = kernel == "flash" and cached_bytes(plan, "attention_output") is not None
    keeps_input = (kernel != "flash" or plan.low_precision) and not shared_o
    ops += linear("attn_proj", plan, m, model.q_dim / t, h, saved_rows=m if keeps_input else 0.0,
                  scattered_out=g)
    ops.append(residual_op(model, E_norm, A, plan.precision))
    return ops


def residual_op(model: Model, elements: float, a_bytes: int, dtype: str, branches: int = 1) -> Op:
    """Fused bias-dropout-add or, without dropout, the residual add of `branches` block outputs to the input: read
    1 + branches tensors, write 1, keep a 1-byte dropout mask a branch (a parallel block adds its attention's and
    its MLP's outputs at once: 2)."""
    if model.dropout:  # backward: each branch's gradient masked, the bias's reduced, the residual's summed: the
        # element-wise rule's twice the forward stands for them
        return vector("bias_dropout_add", "fwd", elements * ((branches + 2) * a_bytes + branches), dtype,
                      saved_bytes=branches * elements)
    # backward: the add passes its output's gradient through unchanged (no kernel); where the input also fed the
    # block's norm, autograd sums the two gradients: read 2, write 1 in one kernel
    return vector("residual_add", "fwd", elements * (branches + 2) * a_bytes, dtype, bwd_bytes=3 * elements * a_bytes,
                  bwd_kernels=1)


def attention_params(model: Model, plan: Plan) -> float:
    """Attention parameters of one layer held by one rank (projections tp-sharded, MLA down-projections and norms
    replicated, as are the query- and key-head norms' scales)."""
    h, t = model.hidden, plan.tp
    if model.mla is None:
        return h * (model.q_dim / t + 2 * kv_width_per_rank(model, t)) + model.q_dim * h / t \
            + qk_norm_parameters(model)
    mla, a_t = model.mla, model.heads / t
    q = (h * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * a_t * mla.qk_head_dim) if mla.q_lora_rank \
        else h * a_t * mla.qk_head_dim
    kv = h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank \
        + mla.kv_lora_rank * a_t * (mla.qk_nope_head_dim + mla.v_head_dim)
    return q + kv + a_t * mla.v_head_dim * h
