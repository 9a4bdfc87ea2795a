"""Model: what is trained — a dense or MoE decoder-only transformer, or a stacked LSTM (GNMT-style).

Legend: l layers, h hidden, a heads, kv kv_heads, d = h/a head dim, f ffn inner size, V vocab, s sequence.
"""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.errors import SpecError
from narrowpath.spec._check import boolean, choice, positive_float, positive_int


MAX_LAYERS = 100_000
"""Sanity bounds far above any published model (the deepest: a few hundred layers; widest: hidden ~25k, vocab
~256k, context ~10M tokens), so that a typo cannot make the workload builder allocate per-layer lists or print
a step time of 1e31 s."""
MAX_WIDTH = 100_000_000
MAX_SEQ_LEN = 1 << 30


@dataclass(frozen=True, slots=True, kw_only=True)
class MoE:
    """Mixture-of-experts block. Accepted and validated; costing lands in a later issue."""

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

    def __post_init__(self) -> None:
        positive_int("model.moe.num_experts", self.num_experts)
        positive_int("model.moe.top_k", self.top_k)
        positive_int("model.moe.expert_ffn", self.expert_ffn)
        positive_int("model.moe.shared_experts", self.shared_experts, minimum=0)
        positive_int("model.moe.first_dense_layers", self.first_dense_layers, minimum=0)
        if self.top_k > self.num_experts:
            raise SpecError("model.moe.top_k", f"top_k {self.top_k} exceeds num_experts {self.num_experts}")
        positive_float("model.moe.capacity_factor", self.capacity_factor)
        if self.capacity_factor < 1.0:
            raise SpecError("model.moe.capacity_factor", f"must be >= 1, got {self.capacity_factor}")


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
    """`gelu` (two matrices h→f→h) or `swiglu` (three: gate, up, down)."""
    vocab: int
    """Vocabulary size V."""
    seq_len: int
    """Training sequence length s (tokens per sample)."""
    tied_embeddings: bool = False
    """Input embedding and output projection share one matrix."""
    norm: str = "layernorm"
    """`layernorm` or `rmsnorm`."""
    moe: MoE | None = None
    """Mixture-of-experts block; None = dense."""
    dropout: bool | None = None
    """Dropout in attention and residual paths (masks kept for backward). None = by family: GPT-style models
    (layernorm, GeLU) train with dropout (Megatron default 0.1); SwiGLU/RMSNorm models (Llama, Mistral, Qwen,
    DeepSeek) train without."""

    def __post_init__(self) -> None:
        choice("model.arch", self.arch, ("transformer", "lstm"))
        positive_int("model.layers", self.layers, maximum=MAX_LAYERS)
        positive_int("model.hidden", self.hidden, maximum=MAX_WIDTH)
        positive_int("model.heads", self.heads, maximum=MAX_WIDTH)
        positive_int("model.kv_heads", self.kv_heads, minimum=0, maximum=MAX_WIDTH)
        positive_int("model.head_dim", self.head_dim, minimum=0, maximum=MAX_WIDTH)
        positive_int("model.ffn", self.ffn, minimum=0, maximum=MAX_WIDTH)
        positive_int("model.vocab", self.vocab, maximum=MAX_WIDTH)
        positive_int("model.seq_len", self.seq_len, maximum=MAX_SEQ_LEN)
        choice("model.ffn_act", self.ffn_act, ("gelu", "swiglu", "relu"))
        choice("model.norm", self.norm, ("layernorm", "rmsnorm"))
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
        if self.moe is not None and self.moe.first_dense_layers > self.layers:
            raise SpecError("model.moe.first_dense_layers",
                            f"{self.moe.first_dense_layers} exceeds layers {self.layers}")

    @property
    def q_dim(self) -> int:
        """Width of the query projection, heads · head_dim."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the key (or value) projection, kv_heads · head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.ffn_act == "swiglu" else 2
