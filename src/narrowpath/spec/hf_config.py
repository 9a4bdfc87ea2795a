"""Read a HuggingFace `config.json` (Llama, Mistral, Mixtral, Qwen, GPT-NeoX, GPT-2 key styles) into a Model.

A config.json states the position limit (`max_position_embeddings`: 131,072 for Llama 3.1), not the length the
model is trained at, so the training sequence length must be given (`--seq-len`, or `seq_len` beside
`hf_config` in a scenario file); only a config's own `seq_length` key (ChatGLM, Qwen-1: the training length)
supplies it. A config narrowpath cannot model is refused, not priced as something else: a `model_type` that is
not a decoder-only transformer (mamba, rwkv, t5, …) or one it does not know, a zero where a count must be
positive, an MoE type without experts.
"""
from __future__ import annotations

from typing import Any, Mapping

from narrowpath.errors import SpecError, shown
from narrowpath.spec._check import positive_int
from narrowpath.spec.model import MLA, Model, MoE

# Each model field and the keys the HF families use for it, in order of preference.
_KEYS = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head", "num_heads"),
    "kv_heads": ("num_key_value_heads", "multi_query_group_num", "num_kv_heads"),
    "head_dim": ("head_dim",),
    "ffn": ("intermediate_size", "n_inner", "ffn_hidden_size"),
    "vocab": ("vocab_size", "padded_vocab_size"),
    "seq_len": ("seq_length",),
    "positions": ("max_position_embeddings", "n_positions", "n_ctx"),
}

MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "dbrx", "olmoe", "granitemoe",
             "jetmoe", "phimoe", "minimax")
"""model_type values that are mixtures of experts: their expert count must be given and positive."""
DENSE_TYPES = ("llama", "mistral", "qwen", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "gpt2", "gpt_neox",
               "gptj", "gpt_bigcode", "opt", "bloom", "falcon", "phi", "phi3", "starcoder2", "olmo", "olmo2",
               "chatglm", "glm", "baichuan", "internlm", "internlm2", "stablelm", "cohere", "granite", "nemotron",
               "mpt", "codegen", "exaone", "smollm3")
"""Decoder-only transformer model_type values whose config keys this reader maps."""
NOT_TRANSFORMER = {"mamba": "a state-space model", "mamba2": "a state-space model", "falcon_mamba": "a state-space "
                   "model", "jamba": "a hybrid state-space/attention model", "zamba": "a hybrid state-space model",
                   "rwkv": "a recurrent (RWKV) model", "recurrent_gemma": "a recurrent model", "xlstm": "a recurrent "
                   "model", "t5": "an encoder-decoder", "mt5": "an encoder-decoder", "bart": "an encoder-decoder",
                   "whisper": "an encoder-decoder", "bert": "an encoder-only model", "roberta": "an encoder-only "
                   "model", "vit": "a vision encoder", "clip": "a vision-language encoder"}


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


def _model_type(cfg: Mapping[str, Any]) -> str:
    """The config's model_type, refused when it is not a decoder-only transformer this reader knows."""
    mtype = str(cfg.get("model_type", "")).lower()
    if mtype in NOT_TRANSFORMER:
        raise SpecError("config.json.model_type", f"{mtype!r} is {NOT_TRANSFORMER[mtype]}, not a decoder-only "
                        "transformer: narrowpath cannot model it")
    if mtype and mtype not in DENSE_TYPES + MOE_TYPES:
        raise SpecError("config.json.model_type", f"unknown model_type {shown(mtype, 40)}; narrowpath reads the "
                        f"decoder-only transformers {', '.join(sorted(DENSE_TYPES + MOE_TYPES))} (or write the model "
                        "as a mapping of spec fields)")
    return mtype


def _counts(cfg: Mapping[str, Any], values: dict[str, Any]) -> dict[str, int]:
    """The integer fields, each >= 1 (a zero head count or position limit is not a model)."""
    ints = {}
    for f, v in values.items():
        if v is None:
            continue
        ints[f] = _int(cfg, f, v)
        if ints[f] < 1:
            key = next(k for k in _KEYS[f] if cfg.get(k) is not None)
            raise SpecError(f"config.json.{key}", f"must be >= 1, got {ints[f]}")
    return ints


def _seq_len(cfg: Mapping[str, Any], ints: dict[str, int], seq_len: Any) -> int:
    """The training sequence length: the one given, else the config's `seq_length`; never the position limit."""
    limit = ints.get("positions")
    limit_key = next((k for k in _KEYS["positions"] if cfg.get(k) is not None), "max_position_embeddings")
    if seq_len is None:
        if "seq_len" in ints:
            return ints["seq_len"]
        stated = f" ({limit_key} {limit:,} is the position limit)" if limit else ""
        raise SpecError("model.seq_len", f"a HuggingFace config.json does not state the training sequence "
                        f"length{stated}: give --seq-len N (in a scenario file, model: {{hf_config: FILE, "
                        f"seq_len: N}})")
    seq_len = positive_int("model.seq_len", seq_len)
    if limit and seq_len > limit:
        raise SpecError("model.seq_len", f"{seq_len:,} exceeds the config's position limit {limit_key} {limit:,}")
    return seq_len


WINDOW_EVERY = {"gemma2": 2}
"""model_type values whose config states a window but not which layers use it: every k-th layer does (Gemma 2:
'we alternate between a local sliding window attention and global attention in every other layer', Gemma Team,
'Gemma 2: Improving Open Language Models at a Practical Size', 2024)."""


def _sliding_window(cfg: Mapping[str, Any], mtype: str) -> tuple[int, int]:
    """(window tokens, every k-th layer windowed) a config states, or (0, 1): `sliding_window` unless
    `use_sliding_window` is false (Qwen2 states a window it does not use); which layers from `layer_types` (the
    share of "sliding_attention" entries), a type's known interleave, else every layer (Mistral v0.1, Starcoder2,
    Phi-3). A share the model cannot hold (it holds a window on every layer or on 1 of every k) is left out — Gemma
    3's five local layers in six: the attention is then priced over the full context, as before the window was read."""
    if cfg.get("sliding_window") is None or cfg.get("use_sliding_window") is False:
        return 0, 1
    window = _int(cfg, "sliding_window", cfg["sliding_window"])
    if window < 1:
        raise SpecError("config.json.sliding_window", f"must be >= 1 (or null), got {window}")
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        windowed = sum(1 for t in types if t == "sliding_attention")
        if not windowed:
            return 0, 1
        every = len(types) // windowed
        return (window, every) if every * windowed == len(types) else (0, 1)
    if mtype == "gemma3_text" or cfg.get("sliding_window_pattern"):
        pattern = cfg.get("sliding_window_pattern") or 6  # every pattern-th layer global (Gemma 3: five local to one)
        return (window, 2) if pattern == 2 else (0, 1)
    return window, WINDOW_EVERY.get(mtype, 1)


def _top_k(cfg: Mapping[str, Any]) -> int:
    """Experts each token is routed to (`num_experts_per_tok`), 2 when the config does not state it (Mixtral's); a
    stated zero is refused (module docstring): it was read as unstated and priced as 2."""
    key = next((k for k in ("num_experts_per_tok", "num_experts_per_token") if cfg.get(k) is not None), None)
    if key is None:
        return 2
    top_k = _int(cfg, key, cfg[key])
    if top_k < 1:
        raise SpecError(f"config.json.{key}", f"must be >= 1 (experts each token is routed to), got {top_k}")
    return top_k


def _group_limit(cfg: Mapping[str, Any]) -> int:
    """Group-limited routing (DeepSeek-V3: n_group 8 node groups, topk_group 4): a token's experts lie on at most
    topk_group groups, which the deployment maps to nodes; 0 = no limit (topk_group not below n_group, or either
    unstated). Both are read as integers first: a quoted or listed value ended in a TypeError."""
    raw = cfg.get("n_group", 1)  # a null n_group states no groups
    n_group = _int(cfg, "n_group", raw) if raw is not None else 0
    topk = _int(cfg, "topk_group", cfg["topk_group"]) if cfg.get("topk_group") is not None else 0
    return topk if n_group and topk and topk < n_group else 0


PARALLEL_TYPES = ("gptj", "codegen", "phi", "cohere")
"""model_type values whose every layer is a parallel block, one norm feeding attention and MLP, both outputs added
to the residual (transformers' GPTJBlock, CodeGenBlock, PhiDecoderLayer, CohereDecoderLayer)."""
PARALLEL_KEYS = {"gpt_neox": ("use_parallel_residual", True), "falcon": ("parallel_attn", True),
                 "stablelm": ("use_parallel_residual", False)}
"""model_type values whose config says whether the blocks are parallel: the key and transformers' default for it
(GPTNeoXConfig, FalconConfig, StableLmConfig). GPT-NeoX's parallel residual and Falcon's new decoder architecture
norm the two branches separately; they are priced with one norm (a norm is a small vector op)."""


def _kv_heads(cfg: Mapping[str, Any], mtype: str, ints: dict[str, int]) -> int:
    """Key/value heads: the config's count, else one for a multi-query model (`multi_query`: Falcon-7B, GPT-BigCode),
    else every query head. Falcon reads its `num_kv_heads` only with the new decoder architecture (40B, 180B) and
    otherwise `multi_query` (transformers' FalconAttention)."""
    if mtype == "falcon" and not _bool(cfg, "new_decoder_architecture", False):
        return 1 if _bool(cfg, "multi_query", True) else ints["heads"]
    return ints.get("kv_heads") or (1 if _bool(cfg, "multi_query", False) else ints["heads"])


def _parallel_block(cfg: Mapping[str, Any], mtype: str) -> bool:
    """Whether the config's layers are parallel attention + MLP blocks (model.parallel_attn_mlp)."""
    if mtype in PARALLEL_TYPES:
        return True
    if mtype not in PARALLEL_KEYS:
        return False
    key, default = PARALLEL_KEYS[mtype]
    return _bool(cfg, key, default) or (mtype == "falcon" and _bool(cfg, "new_decoder_architecture", False))


QK_NORM_TYPES = ("qwen3", "qwen3_moe", "olmo2", "gemma3", "gemma3_text")
"""Model types whose attention normalises each query and key head (their HF modeling code builds `q_norm` and
`k_norm` unconditionally); other configs say so with `use_qk_norm` (Llama 4, GLM-4.5) or `qk_norm`."""


def model_from_hf_config(cfg: Mapping[str, Any], *, name: str | None = None, seq_len: int | None = None) -> Model:
    """Map HF keys to a Model. `seq_len` is the training sequence length (required unless the config states
    `seq_length`; max_position_embeddings is only the limit it must not exceed)."""
    if not isinstance(cfg, Mapping):
        raise SpecError("config.json", "must be a JSON object")
    values = {f: _get(cfg, f) for f in _KEYS}
    for required in ("layers", "hidden", "heads", "vocab"):
        if values[required] is None:
            raise SpecError(f"config.json.{_KEYS[required][0]}", "is required to build a model")
    mtype = _model_type(cfg)
    act = str(cfg.get("hidden_act", cfg.get("activation_function", "gelu"))).lower()
    gated = mtype in ("llama", "mistral", "mixtral", "qwen", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
                      "gemma2", "deepseek_v2", "deepseek_v3") or act in ("silu", "swiglu")
    ints = _counts(cfg, values)
    ffn = ints.get("ffn") or 4 * ints["hidden"]
    if mtype == "qwen":
        ffn //= 2  # Qwen-1 states the fused gate+up width: each SwiGLU branch is intermediate_size / 2
    model: dict[str, Any] = {
        "name": name or cfg.get("_name_or_path") or mtype or "hf-model",
        "layers": ints["layers"], "hidden": ints["hidden"], "heads": ints["heads"],
        "kv_heads": _kv_heads(cfg, mtype, ints), "ffn": ffn,
        "ffn_act": "swiglu" if gated else ("relu" if act == "relu" else "gelu"),
        "vocab": ints["vocab"],
        "tied_embeddings": _bool(cfg, "tie_word_embeddings", mtype in ("gpt2",)),
        # Qwen-1 names its RMSNorm epsilon layer_norm_epsilon
        "norm": "rmsnorm" if ("rms_norm_eps" in cfg or mtype == "qwen") else "layernorm",
        "qk_norm": _bool(cfg, "use_qk_norm", mtype in QK_NORM_TYPES) or _bool(cfg, "qk_norm", False),
    }
    drop_keys = ("attention_dropout", "hidden_dropout", "resid_pdrop", "attn_pdrop", "hidden_dropout_prob",
                 "attention_probs_dropout_prob")
    present = [float(cfg[k]) for k in drop_keys if isinstance(cfg.get(k), (int, float))]
    if present:
        model["dropout"] = any(v > 0 for v in present)
    if ints.get("head_dim"):
        model["head_dim"] = ints["head_dim"]
    if cfg.get("kv_lora_rank"):  # DeepSeek-V2/V3 multi-head latent attention
        mla = {k: _int(cfg, k, cfg[k]) for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                                  "v_head_dim") if cfg.get(k) is not None}
        missing = [k for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim") if k not in mla]
        if missing:
            raise SpecError(f"config.json.{missing[0]}", "is required with kv_lora_rank (multi-head latent attention)")
        mla["q_lora_rank"] = _int(cfg, "q_lora_rank", cfg.get("q_lora_rank") or 0)
        model["mla"] = MLA(**mla)
    elif cfg.get("v_head_dim"):
        model["head_dim"] = _int(cfg, "v_head_dim", cfg["v_head_dim"])
    if cfg.get("num_nextn_predict_layers"):  # DeepSeek-V3's multi-token-prediction modules
        model["mtp_layers"] = _int(cfg, "num_nextn_predict_layers", cfg["num_nextn_predict_layers"])
    exp_key = next((k for k in ("num_local_experts", "num_experts", "n_routed_experts") if cfg.get(k) is not None),
                   None)
    n_exp = _int(cfg, exp_key, cfg[exp_key]) if exp_key else 0
    if mtype in MOE_TYPES and n_exp < 1:
        raise SpecError(f"config.json.{exp_key or 'num_local_experts'}", f"a {mtype} model is a mixture of experts: "
                        f"the expert count must be >= 1, got {n_exp if exp_key else 'none'}")
    if n_exp < 0:
        raise SpecError(f"config.json.{exp_key}", f"must be >= 0, got {n_exp}")
    if n_exp:
        top_k = _top_k(cfg)
        expert_ffn = _int(cfg, "moe_intermediate_size", cfg.get("moe_intermediate_size") or ffn)
        shared = _int(cfg, "n_shared_experts", cfg.get("n_shared_experts") or 0)
        if not shared and cfg.get("shared_expert_intermediate_size"):  # Qwen-MoE: one wide shared expert
            shared = max(1, round(_int(cfg, "shared_expert_intermediate_size",
                                       cfg["shared_expert_intermediate_size"]) / expert_ffn))
        model["moe"] = MoE(num_experts=n_exp, top_k=top_k,
                           expert_ffn=expert_ffn, shared_experts=shared, max_nodes=_group_limit(cfg),
                           first_dense_layers=_int(cfg, "first_k_dense_replace", cfg.get("first_k_dense_replace") or 0))
    if _parallel_block(cfg, mtype):
        model["parallel_attn_mlp"] = True
    window, every = _sliding_window(cfg, mtype)
    if window:
        model["sliding_window"], model["sliding_window_every"] = window, every
    if ints.get("positions"):  # the position limit: the longest sequence a server accepts (vLLM's max_model_len)
        model["context_len"] = ints["positions"]
    model["seq_len"] = _seq_len(cfg, ints, seq_len)  # last: a broken config is named before a missing length
    return Model(**model)
