"""Parameter and model-FLOP counts (pure functions of the model, independent of the plan; the two whole-model
counts are cached per model — a Model is frozen and hashable — since a search or a validation run prices many plans
of one model)."""
from __future__ import annotations

from functools import lru_cache

from narrowpath.spec.model import Model


def attention_parameters(model: Model) -> float:
    """Attention matrices of one layer (no biases or norms): Q, K, V and output projections, or MLA's down- and
    up-projections (DeepSeek-V3 §2.1.1)."""
    h = model.hidden
    if model.mla is None:
        return h * (model.q_dim + 2 * model.kv_dim) + model.q_dim * h
    mla, a = model.mla, model.heads
    q = h * mla.q_lora_rank + mla.q_lora_rank * a * mla.qk_head_dim if mla.q_lora_rank else h * a * mla.qk_head_dim
    kv = h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank * a * (mla.qk_nope_head_dim
                                                                               + mla.v_head_dim)
    return q + kv + a * mla.v_head_dim * h


def qk_norm_parameters(model: Model) -> float:
    """The query- and key-head norms' parameters of a layer (`qk_norm`): one scale of head width each, shared by
    the heads, and a bias beside each scale with LayerNorm."""
    return 2 * model.head_dim * (2 if model.norm == "layernorm" else 1) if model.qk_norm else 0


def _norm_parameters(model: Model) -> float:
    """The norms of a layer (LayerNorm: weight and bias) — two, one in a parallel block — plus MLA's latent norms or
    the query- and key-head norms (`qk_norm`: one scale of head width each, shared by the heads)."""
    per = 2 * model.hidden if model.norm == "layernorm" else model.hidden
    mla = model.mla
    extra = (mla.q_lora_rank + mla.kv_lora_rank) if mla is not None else qk_norm_parameters(model)
    return (1 if model.parallel_attn_mlp else 2) * per + extra


@lru_cache(maxsize=256)
def parameter_count(model: Model) -> float:
    """Total parameters (multi-token-prediction modules excluded, as DeepSeek-V3's 671 B excludes its 14 B MTP).

    Dense GPT with f = 4h, MHA: Narayanan et al. SC'21 eq. (2): P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)),
    which counts biases, two layer norms and learned position embeddings (s·h). We count the general
    form (GQA, MLA, SwiGLU, MoE with shared experts and leading dense layers, untied output) and include position
    embeddings only for layernorm (GPT-style) models.
    """
    h, l, V = model.hidden, model.layers, model.vocab
    if model.arch == "lstm":
        # per layer: 4 gates × (input h + recurrent h) × h weights + 2 × 4h biases; embedding + softmax
        return l * (8 * h * h + 8 * h) + 2 * V * h
    attn = attention_parameters(model)
    biases = (model.q_dim + 2 * model.kv_dim + h) + (model.ffn + h) if model.norm == "layernorm" else 0
    norms = _norm_parameters(model)
    per_dense = attn + model.mlp_matrices * h * model.ffn + biases + norms
    total = 0.0
    for li in range(l):
        if model.is_moe_layer(li):
            moe = model.moe
            experts = moe.num_experts * model.mlp_matrices * h * moe.expert_ffn
            shared = moe.shared_experts * model.mlp_matrices * h * moe.shared_ffn
            total += attn + biases + norms + experts + shared + h * moe.num_experts
        else:
            total += per_dense
    emb = V * h * (1 if model.tied_embeddings else 2)
    pos = model.seq_len * h if model.norm == "layernorm" else 0
    final_norm = 2 * h if model.norm == "layernorm" else h
    return float(total + emb + pos + final_norm)


def active_parameter_count(model: Model) -> float:
    """Parameters touched per token (MoE: top_k routed + shared experts only)."""
    if model.moe is None:
        return parameter_count(model)
    moe = model.moe
    expert = model.mlp_matrices * model.hidden * moe.expert_ffn
    moe_layers = sum(1 for li in range(model.layers) if model.is_moe_layer(li))
    return parameter_count(model) - moe_layers * (moe.num_experts - moe.top_k) * expert


def _score_flop_per_token(model: Model, li: int) -> float:
    """Forward FLOPs of layer `li`'s attention scores and weighted sum for one token over every key it may attend
    to (non-causal: Korthikanti et al. 2022 §6, 4·s·h for MHA)."""
    keys = min(model.seq_len, model.sliding_window) if model.is_window_layer(li) else model.seq_len
    return 2 * model.heads * keys * (model.qk_head_dim + model.v_head_dim)


def _layer_forward_flop_per_token(model: Model, li: int) -> float:
    """Model FLOPs of layer `li` for one token's forward: 2 per matrix parameter it multiplies (routed experts:
    top_k of them, plus the router) and the attention scores and weighted sum over the keys it attends to, counted
    non-causally (Korthikanti et al. 2022 §6: 4·s·h for MHA)."""
    h = model.hidden
    attn = 2 * attention_parameters(model) + _score_flop_per_token(model, li)
    if model.is_moe_layer(li):
        moe = model.moe
        mlp = 2 * model.mlp_matrices * h * (moe.top_k * moe.expert_ffn + moe.shared_experts * moe.shared_ffn) \
            + 2 * h * moe.num_experts
    else:
        mlp = 2 * model.mlp_matrices * h * model.ffn
    return attn + mlp


@lru_cache(maxsize=256)
def model_flop_per_token(model: Model) -> float:
    """Model FLOPs per trained token (forward + backward = 3 × forward; no recompute): every layer, the output
    layer (2·h·V), and each multi-token-prediction module (a 2h → h projection, one more layer and the output
    layer again). The MFU convention of Korthikanti et al. 2022 §6 and Narayanan et al. SC'21 eq. (3) for GPT."""
    h, V = model.hidden, model.vocab
    if model.arch == "lstm":  # each layer's gates: [x_t, h_(t-1)] (2h) by the 4h gate weights, 2·2h·4h a token
        return 3.0 * (model.layers * 16 * h * h + 2 * h * V)
    fwd = sum(_layer_forward_flop_per_token(model, li) for li in range(model.layers)) + 2 * h * V
    if model.mtp_layers:
        last = model.layers - 1
        fwd += model.mtp_layers * (2 * 2 * h * h + _layer_forward_flop_per_token(model, last) + 2 * h * V)
    return 3.0 * fwd


def causal_model_flop_per_token(model: Model) -> float:
    """model_flop_per_token with half the attention scores of full-attention layers counted (a causal mask: the
    convention of Megatron-Bridge's newer FLOP formulas and of the causal MFU figure); windowed layers' keys are
    already the window, counted whole."""
    if model.arch == "lstm":
        return model_flop_per_token(model)
    half = sum(_score_flop_per_token(model, li) for li in range(model.layers) if not model.is_window_layer(li)) / 2
    if model.mtp_layers and not model.is_window_layer(model.layers - 1):
        half += model.mtp_layers * _score_flop_per_token(model, model.layers - 1) / 2
    return model_flop_per_token(model) - 3.0 * half
