"""Serving work of one iteration on one GPU: the ops of a layer at T tokens, the attention core of decodes and
prompt chunks, the output head, and the sizes that set capacity (weights and KV cache per token).

Built from the same constructors as training (workload.ops `gemm`, `vector`; parameter counts of
workload.attention / workload.moe), forward only. Legend: T tokens of one attention data-parallel rank in the
iteration (decodes + prompt tokens), h hidden, t = plan.tp, a_t = heads/t, A activation bytes (16 bit), W weight
bytes per element (with block scales), K KV bytes per element, E experts, k top_k.

- Decode reads every weight once per iteration whatever T is, and the KV cache of every running sequence: it is
  memory-bound until T·(FLOP per weight byte) reaches the device's ridge (Pope et al. 2022, 'Efficiently Scaling
  Transformer Inference' §2; Kwon et al. 2023, vLLM §2).
- KV cache per token and layer (one GPU): 2·max(1, kv_heads/t)·head_dim·K for grouped-query attention (the
  kv heads split over tp, replicated when tp exceeds them); (kv_lora_rank + qk_rope_head_dim)·K for multi-head
  latent attention, whose latent is shared by all heads and kept whole on every tensor-parallel rank
  (DeepSeek-V2 §2.1.3; V3 §2.1.1).
- Multi-head latent attention decodes in the absorbed form (DeepSeek-V2 App. C; FlashMLA): the key up-projection
  folds into the query and the value up-projection into the output, so the core attends over the latent with
  query/key width kv_lora + rope and value width kv_lora; prompts run the plain form (per-head keys of width
  qk_nope + qk_rope, values v_head_dim). The absorbed and plain projections have the same weights and FLOPs.
- Quantized formats (fp8 W8A8 per-tensor, fp4 NVFP4 W4A4 with an E4M3 scale per 16 elements) quantize the GEMM
  input inside the kernel that produces it (norm, activation, attention epilogue: TensorRT-LLM fused
  quantization), so a quantized GEMM reads W-byte activations and no extra kernel runs. The output layer,
  router and embedding stay 16 bit (ModelOpt excludes lm_head from quantization). An NVFP4 checkpoint of a
  multi-head-latent-attention model quantizes its MLPs and experts and keeps the attention projections in 16 bit
  (`attention_weight_format`).
- A routed-expert GEMM reads only the experts some token chose: of E/ep experts on a GPU, with n token copies
  routed uniformly, E/ep·(1 − (1 − 1/E)^n) are expected to be active (occupancy of E bins by n balls).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Mapping

from narrowpath.spec.model import Model
from narrowpath.spec.plan import Plan
from narrowpath.spec.serving import ServingPlan
from narrowpath.workload.attention import attention_params, kv_width_per_rank
from narrowpath.workload.split import stage_layer_ranges
from narrowpath.workload.items import Op
from narrowpath.workload.moe import (busiest_rank_factor, distinct_expert_ranks, expert_params, learned_rank_cv2,
                                     router_load_cv)
from narrowpath.workload.ops import gemm, vector

ACT_BYTES = 2
"""Activations between layers, KV written before quantization, logits: 16 bit."""
BLOCK_SCALE = {"fp4": 1 / 16}
"""NVFP4: one E4M3 scale byte per 16 values (NVIDIA Blackwell architecture brief; TensorRT-LLM NVFP4 GEMMs)."""
VALUE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}


def element_bytes(fmt: str) -> float:
    """Bytes per stored element of a weight or KV format, block scales included."""
    return VALUE_BYTES[fmt] + BLOCK_SCALE.get(fmt, 0.0)


def gemm_dtype(fmt: str) -> str:
    """Tensor-core rate a linear layer runs at: the weight format (fp8 and fp4 quantize the activations too)."""
    return fmt


def core_dtype(plan: ServingPlan, fp8_capable: bool) -> str:
    """Arithmetic of the attention core: FP8 when the KV cache is quantized on a device with FP8 tensor cores
    (TensorRT-LLM's FP8 context FMHA and XQA with an FP8 cache), else 16 bit."""
    return "fp8" if plan.kv_precision in ("fp8", "fp4") and fp8_capable else "bf16"


def attention_weight_format(model: Model, weight_precision: str) -> str:
    """Format of the attention projections' weights in a checkpoint of `weight_precision`: the weights' format,
    except that an NVFP4 checkpoint of a multi-head-latent-attention model keeps them in 16 bit. NVIDIA's DeepSeek-R1
    NVFP4 checkpoint (TensorRT Model Optimizer) quantizes the dense and MoE FFN layers and leaves the attention
    modules in bf16 (TensorRT-LLM tech blog 1, 'Pushing Latency Boundaries: Optimizing DeepSeek-R1 Performance on
    NVIDIA B200 GPUs', Precision Strategy table: attention modules bf16, dense and MoE FFN nvfp4, router bf16;
    tech blog 3, 'Optimizing DeepSeek R1 Throughput on NVIDIA Blackwell GPUs': 'the MoE layers inside this
    checkpoint have been quantized into FP4', weights and activations ~80 GB per GPU under attention DP 8 / EP 8,
    which 16-bit attention projections give and FP4 ones would not). DeepSeek's own FP8 checkpoint quantizes them
    (DeepSeek-V3 §3.3: all linear layers of the blocks in block-scaled FP8)."""
    return "bf16" if weight_precision == "fp4" and model.mla is not None else weight_precision


def instance_plan(plan: ServingPlan) -> Plan:
    """The rank layout of one instance as a parallel Plan: tp, dp, pp, and the experts re-factored over the tp·dp
    GPUs of a stage as etp × ep (network.placement lays groups out from it; the parameter counters read it)."""
    return Plan(tp=plan.tp, dp=plan.dp, pp=plan.pp, ep=plan.ep, etp=plan.expert_tp, gbs=plan.dp)


def stage_layers(model: Model, pp: int) -> list[list[int]]:
    """Layer indices of each pipeline stage (the training split, embedding and head not counted as layers)."""
    out = []
    for chunks in stage_layer_ranges(model.layers, pp, 1):
        out.append([i for r in chunks for i in r])
    return out


def layer_kind(model: Model, index: int) -> tuple[bool, bool]:
    """(has routed experts, attends over a sliding window) of layer `index`."""
    return (model.moe is not None and model.is_moe_layer(index), model.is_window_layer(index))


def kv_bytes_per_token_layer(model: Model, plan: ServingPlan) -> float:
    """KV cache bytes one GPU keeps per token for one layer (module docstring)."""
    K = element_bytes(plan.kv_precision)
    if model.mla is not None:
        return (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * K
    return 2 * kv_width_per_rank(model, plan.tp) * K


def kv_bytes_per_token(model: Model, plan: ServingPlan, layers: list[int]) -> float:
    """KV cache bytes one GPU keeps per token of context over `layers` (a stage)."""
    return kv_bytes_per_token_layer(model, plan) * len(layers)


def window_kv_share(model: Model, layers: list[int]) -> float:
    """Share of a stage's per-token KV bytes held by sliding-window layers (every layer keeps the same bytes a token):
    those keep only the last `model.sliding_window` tokens of a sequence (`cost.serving_memory.kv_footprint_tokens`)."""
    if not model.sliding_window or not layers:
        return 0.0
    return sum(1 for i in layers if model.is_window_layer(i)) / len(layers)


def expected_active_experts(experts_here: float, num_experts: int, tokens: float, top_k: int = 1) -> float:
    """Experts of the `experts_here` on one GPU that at least one of `tokens` uniformly routed tokens chose, each
    token picking `top_k` distinct experts of E: experts_here · (1 − (1 − k/E)^tokens) — Mixtral (8 experts, top 2)
    at batch 1 reads exactly 2 experts, not the 8·(1 − (7/8)²) = 1.875 of 2 independent picks. With a balancer's
    redundant copies E counts expert slots (each hot expert's tokens split over its copies)."""
    if tokens <= 0:
        return 0.0
    if num_experts <= top_k:
        return experts_here
    return experts_here * -math.expm1(tokens * math.log1p(-top_k / num_experts))


@dataclass(frozen=True, slots=True)
class Formats:
    """Byte widths and tensor-core formats of one deployment."""

    w_dtype: str
    """Format of the quantized linear layers."""
    W: float
    """Bytes per weight element (and per quantized activation element) of those layers."""
    K: float
    """Bytes per KV cache element."""
    core: str
    """Attention-core arithmetic."""
    attn_dtype: str
    """Format of the attention projections (`attention_weight_format`)."""
    attn_W: float
    """Bytes per weight (and quantized input) element of the attention projections."""

    @staticmethod
    def of(plan: ServingPlan, fp8_capable: bool, model: Model) -> "Formats":
        attn = attention_weight_format(model, plan.weight_precision)
        return Formats(gemm_dtype(plan.weight_precision), element_bytes(plan.weight_precision),
                       element_bytes(plan.kv_precision), core_dtype(plan, fp8_capable),
                       gemm_dtype(attn), element_bytes(attn))

    def for_attention(self) -> "Formats":
        """These formats with the attention projections' format as the linear layers' one."""
        return Formats(self.attn_dtype, self.attn_W, self.K, self.core, self.attn_dtype, self.attn_W)


def _linear(name: str, f: Formats, m: float, k: float, n: float, groups: float = 1.0) -> Op:
    """A quantized linear layer's GEMM on m rows: reads W-byte inputs and weights, writes 16-bit outputs. With
    `groups` (active experts, possibly fractional in expectation) it is one grouped-GEMM launch over all of them
    (TensorRT-LLM / vLLM fused MoE kernels run every local expert in one CUTLASS / Triton launch): weights of
    `groups` experts, efficiency of the whole launch; its rows per expert (m / groups) decide whether it is a weight
    stream (cost.roofline: every expert's rows are tiled on their own)."""
    op = gemm(name, "fwd", m, k, n, f.w_dtype, f.W, f.W * groups, out_bytes=ACT_BYTES)
    return dataclasses.replace(op, rows=m / max(groups, 1.0)) if groups > 1.0 else op


def attention_token_ops(model: Model, plan: ServingPlan, f: Formats, T: float) -> list[Op]:
    """Attention half of a layer at T tokens, without the core: add+norm, projections, QKV preprocessing (rotary
    and the KV cache write), output projection."""
    A, h, t = ACT_BYTES, model.hidden, plan.tp
    f = f.for_attention()
    ops = [vector("add_norm", "fwd", 4 * T * h * A, "bf16")]  # fused residual add + RMSNorm (reads 2, writes 2)
    kv_tok = kv_bytes_per_token_layer(model, plan)
    if model.mla is None:
        q_n, kv_n = model.q_dim / t, 2 * kv_width_per_rank(model, t)
        ops.append(_linear("qkv", f, T, h, q_n + kv_n))
        ops.append(vector("qkv_preprocess", "fwd", T * ((q_n + kv_n) * A * 2) + T * kv_tok, "bf16"))
    else:
        mla, a_t = model.mla, model.heads / t
        if mla.q_lora_rank:
            ops.append(_linear("q_down", f, T, h, mla.q_lora_rank))
            ops.append(vector("q_norm", "fwd", 2 * T * mla.q_lora_rank * A, "bf16"))
            ops.append(_linear("q_up", f, T, mla.q_lora_rank, a_t * mla.qk_head_dim))
        else:
            ops.append(_linear("q_proj", f, T, h, a_t * mla.qk_head_dim))
        latent = mla.kv_lora_rank + mla.qk_rope_head_dim
        ops.append(_linear("kv_down", f, T, h, latent))
        ops.append(vector("kv_norm", "fwd", 2 * T * mla.kv_lora_rank * A, "bf16"))
        # absorbed (decode) or plain (prompt) up-projection: same weights, same FLOPs per token
        ops.append(_linear("kv_up", f, T, mla.kv_lora_rank, a_t * (mla.qk_nope_head_dim + mla.v_head_dim)))
        ops.append(vector("qkv_preprocess", "fwd", T * (a_t * mla.qk_head_dim + latent) * A + T * kv_tok, "bf16"))
    ops.append(_linear("o_proj", f, T, model.q_dim / t, h))
    return ops


def mlp_token_ops(model: Model, f: Formats, T: float, ffn: float, prefix: str = "mlp", groups: float = 1.0
                  ) -> list[Op]:
    """Up projection, activation, down projection on T rows of inner width `ffn` (per GPU)."""
    up = (2 if model.ffn_act == "swiglu" else 1) * ffn
    act = vector(f"{prefix}_act", "fwd", (3 if model.ffn_act == "swiglu" else 2) * T * ffn * ACT_BYTES, "bf16")
    return [_linear(f"{prefix}_up", f, T, model.hidden, up, groups), act,
            _linear(f"{prefix}_down", f, T, ffn, model.hidden, groups)]


def moe_token_ops(model: Model, plan: ServingPlan, f: Formats, T: float, exchange: str = "all_to_all") -> list[Op]:
    """MoE half of a layer on one GPU at T tokens per attention-DP rank: add+norm, router and top-k (16 bit,
    on the rank's own tokens), permute, the routed experts of this GPU as grouped GEMMs over the copies routed
    to it from all dp ranks, unpermute, shared experts. With experts spread over ep ranks the busiest rank's rows
    are priced (every rank waits for it in the combine): random assignment plus, unless an expert load balancer
    runs, a fine-grained trained router's skew (workload.moe.busiest_rank_factor, learned_rank_cv2,
    router_load_cv). The skew's other effect, fewer distinct experts (fewer weights read) in a small decode batch,
    is not applied: the one measurement of it is of rank loads at 256 sequences per rank, where every expert is
    active."""
    moe, A, h = model.moe, ACT_BYTES, model.hidden
    ops = [vector("add_norm", "fwd", 4 * T * h * A, "bf16"),
           gemm("router", "fwd", T, h, moe.num_experts, "bf16", A, A),
           vector("router_topk", "fwd", 3 * T * moe.num_experts * 4, "fp32", kernels=2)]
    copies_stage = T * plan.dp * moe.top_k  # token copies of all dp ranks entering this stage's experts
    skew = learned_rank_cv2(moe.num_experts, plan.ep, router_load_cv(moe.num_experts)) \
        if plan.expert_balance == "learned" else 0.0
    rows = copies_stage / plan.ep * busiest_rank_factor(plan.ep, copies_stage / plan.ep, skew)
    slots = plan.expert_slots(moe.num_experts)  # a balancer's extra copies share the load of hot experts
    active = expected_active_experts(slots / plan.ep, slots, T * plan.dp, moe.top_k)
    if rows > 0:
        # expand: read each token this GPU's experts see once, write its copies for them; finalize: read the copies'
        # outputs, write one weighted sum per token (TensorRT-LLM moe_kernels.cu expandInputRowsKernel,
        # finalizeMoeRoutingKernel: [tokens, h] in and out, [tokens·k, h] between). Gathered (`exchange` gather, or
        # experts not spread over ep) the GPU holds all T·dp tokens of the stage; by an all-to-all it receives those
        # with an expert on its ep rank, T·dp·d/ep for d = the ep ranks a token reaches (workload.serving_comm)
        tokens = T * plan.dp
        if exchange != "gather" and plan.ep > 1:
            tokens *= distinct_expert_ranks(moe.num_experts, moe.top_k, plan.ep) / plan.ep
        ops.append(vector("moe_permute", "fwd", (tokens + rows) * h * A, "bf16"))
        ops += mlp_token_ops(model, f, rows, moe.expert_ffn / plan.expert_tp, "expert", active)
        ops.append(vector("moe_unpermute", "fwd", (rows + tokens) * h * A, "bf16"))
    if moe.shared_experts:
        ops += mlp_token_ops(model, f, T, moe.shared_ffn * moe.shared_experts / plan.tp, "shared")
    return ops


def layer_token_ops(model: Model, plan: ServingPlan, f: Formats, T: float, moe_layer: bool,
                    exchange: str = "all_to_all") -> list[Op]:
    """Every op of one layer that depends only on the iteration's token count T (not the attention core); `exchange`:
    how routed tokens reach the experts (workload.serving_comm.EXCHANGES)."""
    ops = attention_token_ops(model, plan, f, T)
    if model.parallel_attn_mlp:  # GPT-J: attention and MLP read one norm; one residual add for both
        ops = ops[1:] + [vector("add_norm", "fwd", 5 * T * model.hidden * ACT_BYTES, "bf16")]
        return ops + mlp_token_ops(model, f, T, model.ffn / plan.tp)
    if moe_layer:
        return ops + moe_token_ops(model, plan, f, T, exchange)
    return ops + [vector("add_norm", "fwd", 4 * T * model.hidden * ACT_BYTES, "bf16")] \
        + mlp_token_ops(model, f, T, model.ffn / plan.tp)


def kv_group_size(model: Model, plan: ServingPlan) -> float:
    """Query heads per kv head on one GPU (heads/tp over kv_heads/tp, a replicated kv head counting once)."""
    return max(1.0, (model.heads / plan.tp) / max(1.0, model.kv_heads / plan.tp))


def decode_shares_kv(model: Model, plan: ServingPlan, shapes: Mapping | None) -> bool:
    """Whether an engine's generation-phase attention kernel loads each kv head's cache once for all the query heads
    of its group. `shapes` None: for every model (FlashDecoding-style kernels, TensorRT-LLM's XQA once it compiles
    kernels per model); else only for the query heads per kv head (on one GPU) in `shapes['groups']` and the head
    widths in `shapes['head_dims']` — TensorRT-LLM 0.7-0.9's precompiled XQA kernels, whose
    DecoderXQARunner::shouldUse takes 8 query heads per kv head (or 1) at head size 128 or 256 and sends every other
    grouped-query model to masked multi-head attention (cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/
    decoderXQARunner.h of those releases: `nbQHeadsPerKV != 8 && nbQHeadsPerKV != 1` -> false, `head_size != 128
    && head_size != 256` -> false). MLA decodes over one shared latent: always shared."""
    if shapes is None or model.mla is not None:
        return True
    group = kv_group_size(model, plan)
    return group in [float(g) for g in shapes.get("groups", ())] and \
        float(model.head_dim) in [float(d) for d in shapes.get("head_dims", ())]


def kv_group_reads(model: Model, plan: ServingPlan, shared: bool) -> float:
    """Times a decode step reads one kv head's cache on a GPU: once when every query head of its group shares the
    load (XQA / FlashDecoding tile all heads of a group together), else once per query head of the group —
    heads/kv_heads per kv head, the grouped-query ratio (a masked multi-head attention kernel with one thread block
    per (sequence, query head): TensorRT-LLM before 0.7, whose 'improved GQA kernels in the generation phase' gave
    up to 2.4x on Llama-70B over v0.5/0.6, NVIDIA TensorRT-LLM blog 'Falcon-180B on a single H200 ... 6.7x faster
    Llama-70B over A100', Dec 2023; and later releases for the models their XQA kernels do not take,
    `decode_shares_kv`); where the repeats come from, HBM or L2, is `decode_attention_op`'s `reread_from`. MLA
    decodes over one shared latent: always once."""
    if shared or model.mla is not None:
        return 1.0
    return kv_group_size(model, plan)


def decode_attention_op(model: Model, plan: ServingPlan, f: Formats, seqs: float, context_tokens: float,
                        queries_per_seq: float = 1.0, kv_reads: float = 1.0, reread_from: str = "hbm") -> Op:
    """Attention core of `seqs` decoding sequences holding `context_tokens` tokens of context in all, for one
    layer on one GPU: reads each sequence's KV cache `kv_reads` times (1: every query head of a kv group shares
    it, XQA / FlashDecoding; kv_group_reads otherwise), the repeats `reread_from` `hbm` (every query head's block
    fetches the cache from HBM) or `l2` (the group's blocks read it together: HBM once, L2 once per query head,
    `Op.l2_bytes`), `queries_per_seq` query tokens each (speculative verification > 1)."""
    a_t = model.heads / plan.tp
    if model.mla is not None:
        d_qk = model.mla.kv_lora_rank + model.mla.qk_rope_head_dim
        d_v = model.mla.kv_lora_rank
    else:
        d_qk = d_v = model.head_dim
    flop = 2.0 * a_t * (d_qk + d_v) * context_tokens * queries_per_seq
    kv = context_tokens * kv_bytes_per_token_layer(model, plan)
    q_io = seqs * queries_per_seq * a_t * (d_qk + d_v) * ACT_BYTES
    # read once per query head (kv_reads > 1): from HBM each time, or — the group's thread blocks running side by
    # side — from HBM once and through L2 to each of them (Op.l2_bytes: the L2 roof binds where reads × HBM
    # bandwidth exceed L2's)
    via_l2 = kv_reads > 1 and reread_from == "l2"
    # the rows of its tiles' MMAs: the query rows that share one load of a kv head's cache — the group's query heads
    # (XQA packs them into the MMA's M dimension; MLA's heads all share the latent) or one head (kv_reads > 1) — times
    # the query tokens; fewer than one MMA tile of them make it a stream of the cache (cost.roofline), not a GEMM
    # that ramps up over the whole batch's FLOPs as one kernel of that size would
    group = a_t if model.mla is not None else kv_group_size(model, plan) if kv_reads <= 1 else 1.0
    return Op("attn_decode", "flash", "fwd", flop, (kv if via_l2 else kv * kv_reads) + q_io, f.core,
              1 if seqs else 0, 0.0, exps=a_t * context_tokens * queries_per_seq,
              l2_bytes=kv * kv_reads if via_l2 else 0.0, rows=group * queries_per_seq)


def prefill_attention_op(model: Model, plan: ServingPlan, f: Formats, chunk_tokens: float, pair_tokens: float,
                         context_tokens: float) -> Op:
    """Attention core of the prompt chunks of one iteration, one layer on one GPU: `pair_tokens` = Σ c·(p + c/2)
    query-key pairs of causal attention (c chunk tokens after p cached ones), reading the K/V of
    `context_tokens` = Σ (p + c) once and writing each query's output (FlashAttention-2, Dao 2023)."""
    a_t = model.heads / plan.tp
    d_qk, d_v = model.qk_head_dim, model.v_head_dim
    flop = 2.0 * a_t * (d_qk + d_v) * pair_tokens
    if model.mla is not None:  # the plain form up-projects the cached latents to per-head K, V
        kv_read = context_tokens * a_t * (d_qk + d_v) * ACT_BYTES
    else:
        kv_read = context_tokens * kv_bytes_per_token_layer(model, plan)
    io = kv_read + chunk_tokens * a_t * (d_qk + d_v) * ACT_BYTES
    return Op("attn_prefill", "flash", "fwd", flop, io, f.core, 1 if chunk_tokens else 0, 0.0,
              exps=a_t * pair_tokens, head_dim=d_qk)


def prefix_rebuild_op(model: Model, plan: ServingPlan, f: Formats, prefix_tokens: float) -> Op | None:
    """Multi-head latent attention's prompt chunks after the first rebuild the per-head keys and values of their
    cached prefix: the cached latents of `prefix_tokens` = Σ p (p cached tokens ahead of a chunk) are gathered and
    up-projected again (`kv_b_proj`, kv_lora_rank → heads/tp · (qk_nope + v)) before the chunk attends to them —
    vLLM's MLA `_compute_prefill_context` (gather_cache, then kv_b_proj per context chunk), as TensorRT-LLM and
    SGLang run chunked MLA prefill; the chunk's own tokens are up-projected in `attention_token_ops`. None for other
    attention or no cached prefix. The output is the per-head K/V `prefill_attention_op` reads."""
    if model.mla is None or prefix_tokens <= 0:
        return None
    mla = model.mla
    return _linear("kv_up_prefix", f.for_attention(), prefix_tokens, mla.kv_lora_rank,
                   model.heads / plan.tp * (mla.qk_nope_head_dim + mla.v_head_dim))


def head_ops(model: Model, plan: ServingPlan, rows: float) -> list[Op]:
    """Output layer of the last stage on `rows` sequences that produce a token: final norm, the vocabulary-parallel
    logits GEMM (16 bit, vocab/tp per GPU), sampling over the logits (softmax / top-k in fp32)."""
    A, h, v_t = ACT_BYTES, model.hidden, model.vocab / plan.tp
    return [vector("final_norm", "fwd", 2 * rows * h * A, "bf16"),
            gemm("lm_head", "fwd", rows, h, v_t, "bf16", A, A),
            vector("sampling", "fwd", 3 * rows * v_t * 4, "fp32", kernels=2)]


def embedding_op(model: Model, T: float) -> Op:
    """Token embedding lookup on the first stage (gather T rows, write them)."""
    return vector("embedding", "fwd", 2 * T * model.hidden * ACT_BYTES, "bf16")


def layer_weight_bytes(model: Model, plan: ServingPlan, f: Formats, moe_layer: bool) -> float:
    """Weight bytes of one layer on one GPU: attention (tp-split; MLA down-projections replicated), dense MLP or
    routed experts ((E + redundant copies)/ep experts split etp ways) + shared experts + router, norms."""
    p = instance_plan(plan)
    w = attention_params(model, p) * f.attn_W + 2 * model.hidden * ACT_BYTES
    if moe_layer:
        moe = model.moe
        w += expert_params(model, p) * f.W * plan.expert_slots(moe.num_experts) / moe.num_experts
        w += moe.shared_experts * model.mlp_matrices * model.hidden * moe.shared_ffn / plan.tp * f.W
        w += model.hidden * moe.num_experts * ACT_BYTES
    else:
        w += model.mlp_matrices * model.hidden * model.ffn / plan.tp * f.W
    return w


def stage_weight_bytes(model: Model, plan: ServingPlan, f: Formats, layers: list[int], first: bool,
                       last: bool) -> float:
    """Weights one GPU of a stage holds: its layers, the vocabulary-parallel embedding on the first stage and the
    output layer on the last (untied, 16 bit; one shared matrix when tied and both sit on one stage)."""
    kinds: dict[bool, float] = {}
    total = 0.0
    for i in layers:
        moe_layer = layer_kind(model, i)[0]
        if moe_layer not in kinds:
            kinds[moe_layer] = layer_weight_bytes(model, plan, f, moe_layer)
        total += kinds[moe_layer]
    table = model.vocab * model.hidden / plan.tp * ACT_BYTES
    if first:
        total += table
    if last:  # the final norm, and the output layer unless it is the embedding's tied matrix on this GPU
        total += model.hidden * ACT_BYTES + (0.0 if first and model.tied_embeddings else table)
    return total
