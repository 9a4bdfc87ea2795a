"""Model: what is trained — a dense or MoE decoder-only transformer, or a stacked LSTM (GNMT-style).

Legend: l layers, h hidden, a heads, kv kv_heads, d = h/a head dim, f ffn inner size, V vocab, s sequence.
Multi-head latent attention (MLA, DeepSeek-V2/V3): queries and keys/values pass through low-rank latents
(q_lora_rank, kv_lora_rank); each head's query/key has a position-free part (qk_nope_head_dim) and a rotary part
(qk_rope_head_dim, one rotary key shared by all heads); values have v_head_dim.
"""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.errors import SpecError, shown
from narrowpath.spec._check import as_int, boolean, choice, positive_float


MAX_LAYERS = 100_000
"""Sanity bounds far above any published model (the deepest: a few hundred layers; widest: hidden ~25k, vocab
~256k, context ~10M tokens), so that a typo cannot make the workload builder allocate per-layer lists or print
a step time of 1e31 s."""
MAX_WIDTH = 100_000_000
MAX_SEQ_LEN = 1 << 30


@dataclass(frozen=True, slots=True, kw_only=True)
class MoE:
    """Mixture-of-experts block: routed experts (optionally shared ones and leading dense layers), priced by
    workload.moe and the expert-parallel traffic of network/."""

    num_experts: int
    """Routed experts per MoE layer."""
    top_k: int
    """Experts each token is routed to."""
    expert_ffn: int
    """Inner size of one expert's MLP."""
    shared_experts: int = 0
    """Always-active experts per MoE layer (DeepSeek style); 0 = none."""
    first_dense_layers: int = 0
    """Leading layers that keep a dense MLP instead of experts."""
    capacity_factor: float = 1.0
    """Token capacity per expert relative to a perfect balance; 1 = no slack."""
    shared_ffn: int = 0
    """Inner size of one shared expert's MLP; 0 = expert_ffn (DeepSeek); Llama 4 and Qwen-MoE use a wider one."""
    layer_every: int = 1
    """After the leading dense layers, every `layer_every`-th layer is an MoE layer and the others dense (Llama 4
    Maverick interleaves with 2); 1 = all of them."""
    max_nodes: int = 0
    """Node-limited routing: each token's experts lie on at most this many nodes (DeepSeek-V3 §2.1.2: M = 4, by
    choosing the top experts within the top-M node groups); 0 = unlimited."""
    expert_bias: bool = False
    """The experts' linear layers carry biases (GPT-OSS; HF openai/gpt-oss-120b: biases on every expert
    projection): Megatron-Core adds the second one per local expert after the grouped GEMM (workload.moe)."""
    glu_clamp: float = 0.0
    """The experts' GLU clamps its halves at this limit and offsets the linear half by one (GPT-OSS's "swigluoai":
    `swiglu_limit` 7.0, gate clamped above, linear half to ±limit, (linear + 1)·gate·σ(1.702·gate)); 0 = a plain
    GLU. Megatron-Core runs it unfused (workload.moe)."""

    def __post_init__(self) -> None:
        as_int(self, "num_experts", "model.moe.num_experts")
        as_int(self, "top_k", "model.moe.top_k")
        as_int(self, "expert_ffn", "model.moe.expert_ffn")
        as_int(self, "shared_experts", "model.moe.shared_experts", minimum=0)
        as_int(self, "first_dense_layers", "model.moe.first_dense_layers", minimum=0)
        if self.top_k > self.num_experts:
            raise SpecError("model.moe.top_k", f"top_k {self.top_k} exceeds num_experts {self.num_experts}")
        as_int(self, "shared_ffn", "model.moe.shared_ffn", minimum=0, maximum=MAX_WIDTH)
        as_int(self, "layer_every", "model.moe.layer_every", maximum=MAX_LAYERS)
        as_int(self, "max_nodes", "model.moe.max_nodes", minimum=0, maximum=MAX_LAYERS)
        if self.shared_ffn == 0:
            object.__setattr__(self, "shared_ffn", self.expert_ffn)
        boolean("model.moe.expert_bias", self.expert_bias)
        object.__setattr__(self, "glu_clamp", positive_float("model.moe.glu_clamp", self.glu_clamp, allow_zero=True))
        positive_float("model.moe.capacity_factor", self.capacity_factor)
        if self.capacity_factor < 1.0:
            raise SpecError("model.moe.capacity_factor", f"must be >= 1, got {self.capacity_factor}")


@dataclass(frozen=True, slots=True, kw_only=True)
class MLA:
    """Multi-head latent attention (DeepSeek-AI, 'DeepSeek-V2' 2024 §2.1; V3 Technical Report 2024 §2.1.1)."""

    kv_lora_rank: int
    """Width of the joint key/value latent c_KV (DeepSeek-V3: 512); this and the rotary key are what is cached."""
    qk_nope_head_dim: int
    """Per-head query/key width without rotary position (V3: 128)."""
    qk_rope_head_dim: int
    """Per-head rotary query/key width; the rotary key is one shared head (V3: 64)."""
    v_head_dim: int
    """Per-head value width (V3: 128)."""
    q_lora_rank: int = 0
    """Width of the query latent c_Q (V3: 1536); 0 = queries projected directly from the hidden state (V2-Lite)."""

    def __post_init__(self) -> None:
        for f in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            as_int(self, f, f"model.{f}", maximum=MAX_WIDTH)
        as_int(self, "q_lora_rank", "model.q_lora_rank", minimum=0, maximum=MAX_WIDTH)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True, slots=True, kw_only=True)
class Model:
    """A model architecture. Sizes are element counts; bytes come from the plan's precision."""

    name: str = "custom"
    arch: str = "transformer"
    """`transformer` (decoder-only) or `lstm` (stacked LSTM, GNMT-style)."""
    layers: int
    """Transformer blocks or LSTM layers."""
    hidden: int
    """Model (residual stream) width h; for an LSTM, the hidden state size."""
    heads: int = 1
    """Attention heads a (query heads)."""
    kv_heads: int = 0
    """Key/value heads (GQA/MQA); 0 means equal to `heads` (plain multi-head attention)."""
    head_dim: int = 0
    """Per-head size; 0 means hidden / heads."""
    ffn: int = 0
    """Inner size of the dense MLP; 0 means 4·hidden."""
    ffn_act: str = "gelu"
    """`gelu`, `relu` or `squared-relu` (two matrices h→f→h; squared ReLU: Nemotron) or `swiglu` (three: gate,
    up, down)."""
    vocab: int
    """Vocabulary size V."""
    seq_len: int
    """Training sequence length s (tokens per sample)."""
    tied_embeddings: bool = False
    """Input embedding and output projection share one matrix."""
    norm: str = "layernorm"
    """`layernorm` or `rmsnorm`."""
    qk_norm: bool = False
    """A norm over each query and each key head before the rotary embedding (Qwen3, OLMo 2, Gemma 3: HF
    `q_norm` / `k_norm`; Megatron-Core `qk_layernorm`): two more norm kernels a layer, their inputs kept."""
    moe: MoE | None = None
    """Mixture-of-experts block; None = dense."""
    mla: MLA | None = None
    """Multi-head latent attention; None = standard (grouped-query) attention with `head_dim`."""
    sliding_window: int = 0
    """Tokens a query attends to on sliding-window layers (GPT-OSS: 128); 0 = full causal attention everywhere."""
    sliding_window_every: int = 1
    """Every `sliding_window_every`-th layer uses the window (GPT-OSS: 2, alternating with full attention)."""
    mtp_layers: int = 0
    """Multi-token-prediction modules trained alongside (DeepSeek-V3 §2.2: one extra transformer block plus a
    projection per predicted depth, sharing embedding and output head); they run on the last pipeline stage."""
    parallel_attn_mlp: bool = False
    """Attention and MLP read the same normed input and their outputs are summed (GPT-J, PaLM, Falcon): one norm,
    one residual add and one tensor-parallel reduction per layer pass (workload.transformer.parallel_block_ops); dense
    transformers only."""
    context_len: int = 0
    """Longest sequence (prompt + output tokens) the model is served at: its position limit (HuggingFace
    `max_position_embeddings`; vLLM's max_model_len default). 0 = not stated. Serving engines size their token
    budget from it (schedule.serving_defaults); training never reads it."""
    dropout: bool | None = None
    """Dropout in attention and residual paths (masks kept for backward). None = by family: GPT-style models
    (layernorm, GeLU) train with dropout (Megatron default 0.1); SwiGLU/RMSNorm models (Llama, Mistral, Qwen,
    DeepSeek) train without."""

    def __post_init__(self) -> None:
        if isinstance(self.name, (int, float)) and not isinstance(self.name, bool):
            object.__setattr__(self, "name", str(self.name))  # `name: 405` reads as a number in YAML
        if not isinstance(self.name, str):
            raise SpecError("model.name", f"must be a string, got {shown(self.name)}")
        choice("model.arch", self.arch, ("transformer", "lstm"))
        as_int(self, "layers", "model.layers", maximum=MAX_LAYERS)
        as_int(self, "hidden", "model.hidden", maximum=MAX_WIDTH)
        as_int(self, "heads", "model.heads", maximum=MAX_WIDTH)
        as_int(self, "kv_heads", "model.kv_heads", minimum=0, maximum=MAX_WIDTH)
        as_int(self, "head_dim", "model.head_dim", minimum=0, maximum=MAX_WIDTH)
        as_int(self, "ffn", "model.ffn", minimum=0, maximum=MAX_WIDTH)
        as_int(self, "vocab", "model.vocab", maximum=MAX_WIDTH)
        as_int(self, "seq_len", "model.seq_len", maximum=MAX_SEQ_LEN)
        as_int(self, "context_len", "model.context_len", minimum=0, maximum=MAX_SEQ_LEN)
        choice("model.ffn_act", self.ffn_act, ("gelu", "swiglu", "relu", "squared-relu"))
        if self.moe is not None and self.moe.glu_clamp and self.ffn_act != "swiglu":
            raise SpecError("model.moe.glu_clamp", f"clamps the halves of a gated (swiglu) MLP; ffn_act is "
                            f"{self.ffn_act!r}")
        as_int(self, "sliding_window", "model.sliding_window", minimum=0, maximum=MAX_SEQ_LEN)
        as_int(self, "sliding_window_every", "model.sliding_window_every", maximum=MAX_LAYERS)
        as_int(self, "mtp_layers", "model.mtp_layers", minimum=0, maximum=MAX_LAYERS)
        boolean("model.parallel_attn_mlp", self.parallel_attn_mlp)
        if self.parallel_attn_mlp and (self.moe is not None or self.mla is not None or self.arch != "transformer"):
            raise SpecError("model.parallel_attn_mlp", "parallel attention and MLP blocks are modelled for dense "
                            "transformers with grouped-query attention only (GPT-J, PaLM, Falcon); this model has " +
                            ("experts" if self.moe is not None else "multi-head latent attention" if self.mla
                             is not None else f"arch {self.arch!r}"))
        boolean("model.tied_embeddings", self.tied_embeddings)
        choice("model.norm", self.norm, ("layernorm", "rmsnorm"))
        boolean("model.qk_norm", self.qk_norm)
        if self.qk_norm and self.mla is not None:
            raise SpecError("model.qk_norm", "multi-head latent attention normalises its latents (q_norm, kv_norm), "
                            "not query and key heads: leave qk_norm out")
        if self.dropout is None:
            object.__setattr__(self, "dropout", not (self.ffn_act == "swiglu" or self.norm == "rmsnorm"))
        else:
            boolean("model.dropout", self.dropout)
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.ffn == 0:
            object.__setattr__(self, "ffn", 4 * self.hidden)
        if self.arch == "transformer":
            if self.head_dim == 0:
                if self.hidden % self.heads:
                    raise SpecError("model.heads", f"hidden {self.hidden} is not divisible by heads {self.heads} "
                                    "(set head_dim explicitly)")
                object.__setattr__(self, "head_dim", self.hidden // self.heads)
            if self.kv_heads > self.heads:
                raise SpecError("model.kv_heads", f"kv_heads {self.kv_heads} exceeds heads {self.heads}")
            if self.heads % self.kv_heads:
                raise SpecError("model.kv_heads", f"heads {self.heads} is not a multiple of kv_heads {self.kv_heads}")
        elif self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden)
        if self.mla is not None and self.arch != "transformer":
            raise SpecError("model.attention", "multi-head latent attention needs a transformer")
        if self.moe is not None and self.moe.first_dense_layers > self.layers:
            raise SpecError("model.moe.first_dense_layers",
                            f"{self.moe.first_dense_layers} exceeds layers {self.layers}")

    @property
    def q_dim(self) -> int:
        """Width of the query projection (and of the attention output), heads · head_dim; with MLA, the
        concatenated value heads heads · v_head_dim that the output projection reads."""
        if self.mla is not None:
            return self.heads * self.mla.v_head_dim
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the key (or value) projection, kv_heads · head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def qk_head_dim(self) -> int:
        """Per-head width of the query·key product: head_dim, or MLA's nope + rope width."""
        return self.mla.qk_head_dim if self.mla is not None else self.head_dim

    @property
    def v_head_dim(self) -> int:
        """Per-head width of the values: head_dim, or MLA's v_head_dim."""
        return self.mla.v_head_dim if self.mla is not None else self.head_dim

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer `index` (0-based) has routed experts: after the leading dense layers, every
        `moe.layer_every`-th layer (Llama 4: the odd ones for an interleave step of 2)."""
        moe = self.moe
        if moe is None or index < moe.first_dense_layers:
            return False
        return (index - moe.first_dense_layers + 1) % moe.layer_every == 0

    def is_window_layer(self, index: int) -> bool:
        """Whether layer `index` attends over a sliding window (GPT-OSS: even layers, starting with the first)."""
        return self.sliding_window > 0 and index % self.sliding_window_every == 0

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.ffn_act == "swiglu" else 2
