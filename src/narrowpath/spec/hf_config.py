"""Read a HuggingFace `config.json` (Llama, Mistral, Mixtral, Qwen, GPT-NeoX, GPT-2 key styles) into a Model."""
from __future__ import annotations

from typing import Any, Mapping

from narrowpath.errors import SpecError, shown
from narrowpath.spec._check import positive_int
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


def _int(cfg: Mapping[str, Any], field: str, value: Any) -> int:
    """An integer config value; errors name the config.json key it came from."""
    key = next((k for k in _KEYS.get(field, (field,)) if cfg.get(k) is not None), field)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SpecError(f"config.json.{key}", f"must be an integer, got {shown(value)}")
    try:
        f = float(value)
    except ValueError:
        raise SpecError(f"config.json.{key}", f"must be an integer, got {shown(value)}") from None
    if not f.is_integer():
        raise SpecError(f"config.json.{key}", f"must be an integer, got {shown(value)}")
    return int(f)


def _bool(cfg: Mapping[str, Any], key: str, default: bool) -> bool:
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise SpecError(f"config.json.{key}", f"must be true or false, got {shown(value)}")
    return value


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
    gated = mtype in ("llama", "mistral", "mixtral", "qwen", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
                      "gemma2", "deepseek_v2", "deepseek_v3") or act in ("silu", "swiglu")
    ints = {f: _int(cfg, f, v) for f, v in values.items() if v is not None}
    ffn = ints.get("ffn") or 4 * ints["hidden"]
    if mtype == "qwen":
        ffn //= 2  # Qwen-1 states the fused gate+up width: each SwiGLU branch is intermediate_size / 2
    model: dict[str, Any] = {
        "name": name or cfg.get("_name_or_path") or mtype or "hf-model",
        "layers": ints["layers"], "hidden": ints["hidden"], "heads": ints["heads"],
        "kv_heads": ints.get("kv_heads") or ints["heads"], "ffn": ffn,
        "ffn_act": "swiglu" if gated else ("relu" if act == "relu" else "gelu"),
        "vocab": ints["vocab"],
        "seq_len": positive_int("model.seq_len", seq_len) if seq_len is not None else (ints.get("seq_len") or 2048),
        "tied_embeddings": _bool(cfg, "tie_word_embeddings", mtype in ("gpt2",)),
        # Qwen-1 names its RMSNorm epsilon layer_norm_epsilon
        "norm": "rmsnorm" if ("rms_norm_eps" in cfg or mtype == "qwen") else "layernorm",
    }
    drop_keys = ("attention_dropout", "hidden_dropout", "resid_pdrop", "attn_pdrop", "hidden_dropout_prob",
                 "attention_probs_dropout_prob")
    present = [float(cfg[k]) for k in drop_keys if isinstance(cfg.get(k), (int, float))]
    if present:
        model["dropout"] = any(v > 0 for v in present)
    if ints.get("head_dim"):
        model["head_dim"] = ints["head_dim"]
    elif cfg.get("v_head_dim"):  # DeepSeek MLA: approximated as heads of the value width (as in the catalog)
        model["head_dim"] = _int(cfg, "v_head_dim", cfg["v_head_dim"])
    exp_key = next((k for k in ("num_local_experts", "num_experts", "n_routed_experts") if cfg.get(k)), None)
    if exp_key:
        n_exp = _int(cfg, exp_key, cfg[exp_key])
        top_k_key = next((k for k in ("num_experts_per_tok", "num_experts_per_token") if cfg.get(k)), None)
        top_k = _int(cfg, top_k_key, cfg[top_k_key]) if top_k_key else 2
        expert_ffn = _int(cfg, "moe_intermediate_size", cfg.get("moe_intermediate_size") or ffn)
        shared = _int(cfg, "n_shared_experts", cfg.get("n_shared_experts") or 0)
        if not shared and cfg.get("shared_expert_intermediate_size"):  # Qwen-MoE: one wide shared expert
            shared = max(1, round(_int(cfg, "shared_expert_intermediate_size",
                                       cfg["shared_expert_intermediate_size"]) / expert_ffn))
        model["moe"] = MoE(num_experts=n_exp, top_k=top_k,
                           expert_ffn=expert_ffn, shared_experts=shared,
                           first_dense_layers=_int(cfg, "first_k_dense_replace", cfg.get("first_k_dense_replace") or 0))
    return Model(**model)
