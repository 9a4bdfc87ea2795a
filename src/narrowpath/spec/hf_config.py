"""Read a HuggingFace `config.json` (Llama, Mistral, Mixtral, Qwen, GPT-NeoX, GPT-2 key styles) into a Model."""
from __future__ import annotations

from typing import Any, Mapping

from narrowpath.errors import SpecError
from narrowpath.spec.model import Model, MoE

# Each model field and the keys the HF families use for it, in order of preference.
_KEYS = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head", "num_heads"),
    "kv_heads": ("num_key_value_heads", "multi_query_group_num"),
    "head_dim": ("head_dim",),
    "ffn": ("intermediate_size", "n_inner", "ffn_hidden_size"),
    "vocab": ("vocab_size", "padded_vocab_size"),
    "seq_len": ("max_position_embeddings", "n_positions", "n_ctx", "seq_length"),
}


def _get(cfg: Mapping[str, Any], field: str) -> Any:
    for key in _KEYS[field]:
        if cfg.get(key) is not None:
            return cfg[key]
    return None


def looks_like_hf_config(cfg: Mapping[str, Any]) -> bool:
    return any(k in cfg for k in ("model_type", "architectures", "num_hidden_layers", "n_layer"))


def model_from_hf_config(cfg: Mapping[str, Any], *, name: str | None = None, seq_len: int | None = None) -> Model:
    """Map HF keys to a Model. `seq_len` overrides max_position_embeddings (the training length is often shorter)."""
    if not isinstance(cfg, Mapping):
        raise SpecError("config.json", "must be a JSON object")
    values = {f: _get(cfg, f) for f in _KEYS}
    for required in ("layers", "hidden", "heads", "vocab"):
        if values[required] is None:
            raise SpecError(f"config.json.{_KEYS[required][0]}", "is required to build a model")
    mtype = str(cfg.get("model_type", "")).lower()
    act = str(cfg.get("hidden_act", cfg.get("activation_function", "gelu"))).lower()
    gated = mtype in ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
                      "deepseek_v2", "deepseek_v3") or act in ("silu", "swiglu")
    ffn = values["ffn"] or 4 * int(values["hidden"])
    model: dict[str, Any] = {
        "name": name or cfg.get("_name_or_path") or mtype or "hf-model",
        "layers": int(values["layers"]), "hidden": int(values["hidden"]), "heads": int(values["heads"]),
        "kv_heads": int(values["kv_heads"] or values["heads"]), "ffn": int(ffn),
        "ffn_act": "swiglu" if gated else ("relu" if act == "relu" else "gelu"),
        "vocab": int(values["vocab"]),
        "seq_len": int(seq_len or values["seq_len"] or 2048),
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", mtype in ("gpt2",))),
        "norm": "rmsnorm" if "rms_norm_eps" in cfg else "layernorm",
    }
    drop_keys = ("attention_dropout", "hidden_dropout", "resid_pdrop", "attn_pdrop", "hidden_dropout_prob",
                 "attention_probs_dropout_prob")
    present = [float(cfg[k]) for k in drop_keys if isinstance(cfg.get(k), (int, float))]
    if present:
        model["dropout"] = any(v > 0 for v in present)
    if values["head_dim"]:
        model["head_dim"] = int(values["head_dim"])
    n_exp = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts")
    if n_exp:
        top_k = cfg.get("num_experts_per_tok") or cfg.get("num_experts_per_token") or 2
        expert_ffn = cfg.get("moe_intermediate_size") or ffn
        model["moe"] = MoE(num_experts=int(n_exp), top_k=int(top_k), expert_ffn=int(expert_ffn),
                           shared_experts=int(cfg.get("n_shared_experts") or 0),
                           first_dense_layers=int(cfg.get("first_k_dense_replace") or 0))
    return Model(**model)
