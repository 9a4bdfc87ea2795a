"""Parameter counts (pure functions of the model)."""
from __future__ import annotations

from narrowpath.spec.model import Model


def parameter_count(model: Model) -> float:
    """Total parameters.

    Dense GPT with f = 4h, MHA: Narayanan et al. SC'21 eq. (2): P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)),
    which counts biases, two layer norms and learned position embeddings (s·h). We count the general
    form (GQA, SwiGLU, MoE, untied output) and include position embeddings only for layernorm (GPT-style) models.
    """
    h, l, V = model.hidden, model.layers, model.vocab
    if model.arch == "lstm":
        # per layer: 4 gates × (input h + recurrent h) × h weights + 2 × 4h biases; embedding + softmax
        return l * (8 * h * h + 8 * h) + 2 * V * h
    attn = h * (model.q_dim + 2 * model.kv_dim) + model.q_dim * h
    biases = (model.q_dim + 2 * model.kv_dim + h) + (model.ffn + h) if model.norm == "layernorm" else 0
    norms = 4 * h if model.norm == "layernorm" else 2 * h
    dense_mlp = model.mlp_matrices * h * model.ffn
    per_dense = attn + dense_mlp + biases + norms
    if model.moe is None:
        layers = l * per_dense
    else:
        moe = model.moe
        expert = model.mlp_matrices * h * moe.expert_ffn
        per_moe = attn + biases + norms + (moe.num_experts + moe.shared_experts) * expert + h * moe.num_experts
        layers = moe.first_dense_layers * per_dense + (l - moe.first_dense_layers) * per_moe
    emb = V * h * (1 if model.tied_embeddings else 2)
    pos = model.seq_len * h if model.norm == "layernorm" else 0
    final_norm = 2 * h if model.norm == "layernorm" else h
    return float(layers + emb + pos + final_norm)


def active_parameter_count(model: Model) -> float:
    """Parameters touched per token (MoE: top_k + shared experts only)."""
    if model.moe is None:
        return parameter_count(model)
    moe = model.moe
    expert = model.mlp_matrices * model.hidden * moe.expert_ffn
    inactive = (model.layers - moe.first_dense_layers) * (moe.num_experts - moe.top_k) * expert
    return parameter_count(model) - inactive
