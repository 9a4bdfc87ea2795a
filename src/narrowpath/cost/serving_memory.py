"""Serving capacity of one GPU: what the weights, the activation workspace and the runtime take, what the KV cache
gets, and so how many tokens of context (and sequences) an attention data-parallel rank can hold.

    KV pool = fraction · (device memory − weights − activation workspace − runtime reserve)
(TensorRT-LLM `kv_cache_free_gpu_mem_fraction` of the memory free after the model is loaded and a forward pass of
`max_num_tokens` profiled), or, for a stack whose fraction is of the whole device (`fraction_of_total`),
    KV pool = fraction · device memory − weights − activation workspace − runtime reserve
(vLLM `gpu_memory_utilization`: the worker's determine_available_memory takes the requested memory, total ×
utilization, less the non-KV memory it profiled — weights, peak activations, graphs and NCCL buffers; Kwon et
al. 2023 §4 profile the same way; 0.1 of the weights less than the first form holds). Every
stage of a pipeline holds the KV of all in-flight sequences for its own layers, so the tokens an instance can
hold are the fewest over its stages. Paged KV allocates whole blocks: a sequence of n tokens takes
⌈n / block⌉ blocks (the last one partly empty: internal fragmentation, vLLM §4.2).

Sliding-window layers (GPT-OSS: every other layer, 128 tokens) keep only the window's blocks: vLLM's hybrid KV
cache manager frees a sliding-window group's blocks that fall out of the window (docs, 'Hybrid KV Cache Manager',
which names gpt-oss), TensorRT-LLM keeps one pool per attention window, SGLang a separate SWA pool. A sequence of n
tokens then holds the KV of `kv_footprint_tokens(n)` full-context tokens: n on the full layers' share, at most the
window plus one partly filled block on the windowed share.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from narrowpath.cost.memory import RUNTIME_RESERVE_BYTES
from narrowpath.errors import InfeasibleError
from narrowpath.spec.model import Model
from narrowpath.spec.serving import ServingPlan
from narrowpath.spec.system import System
from narrowpath.workload.serving import (ACT_BYTES, Formats, kv_bytes_per_token, layer_kind, layer_token_ops,
                                         stage_layers, stage_weight_bytes, window_kv_share)


@dataclass(frozen=True, slots=True)
class ServingMemory:
    """Memory of one GPU of the most constrained stage."""

    capacity_bytes: float
    weights_bytes: float
    activation_bytes: float
    """Workspace of a forward pass of `max_num_tokens` tokens (largest op's inputs + outputs) plus the logits of
    `max_batch` sequences."""
    runtime_bytes: float
    kv_pool_bytes: float
    kv_bytes_per_token: float
    """KV bytes per token of context on one GPU of that stage (all its layers)."""
    kv_tokens: int
    """Tokens of context one attention-DP rank can hold (all its in-flight sequences together), counted as full
    context on every layer (`kv_footprint_tokens` turns a windowed sequence's length into these)."""
    block_tokens: int
    window_share: float = 0.0
    """Share of the stage's per-token KV bytes on sliding-window layers (0: none)."""
    window_tokens: int = 0
    """Tokens a sliding-window layer keeps per sequence: the window and one partly filled block."""

    def footprint(self, tokens):
        """Full-context tokens' worth of KV a sequence of `tokens` tokens holds (scalar or array)."""
        return kv_footprint_tokens(tokens, self.window_share, self.window_tokens)

    @property
    def kv_blocks(self) -> int:
        return self.kv_tokens // self.block_tokens

    @property
    def free_bytes(self) -> float:
        return self.capacity_bytes - self.weights_bytes - self.activation_bytes - self.runtime_bytes


def kv_footprint_tokens(tokens, window_share: float, window_tokens: int):
    """Full-context tokens' worth of KV one sequence of `tokens` tokens holds (module docstring): tokens on the full
    layers' share, min(tokens, window_tokens) on the windowed share; `tokens` itself without windows. Scalars stay
    Python numbers, arrays arrays."""
    if not window_share:
        return tokens
    kept = np.minimum(tokens, window_tokens) if isinstance(tokens, np.ndarray) else min(tokens, window_tokens)
    return tokens * (1.0 - window_share) + kept * window_share


def blocks_for(tokens: float, block_tokens: int) -> int:
    """Paged-KV blocks a sequence of `tokens` tokens holds."""
    return int(math.ceil(tokens / block_tokens))


def activation_workspace_bytes(model: Model, plan: ServingPlan, f: Formats, max_num_tokens: int,
                               max_batch: int) -> float:
    """Peak activation bytes of one forward pass: the largest op's non-weight traffic (its inputs and outputs
    live at once) at `max_num_tokens` tokens, plus fp32 logits of `max_batch` rows over the vocabulary shard."""
    peak = 0.0
    for moe_layer in {layer_kind(model, i)[0] for i in range(model.layers)}:
        for op in layer_token_ops(model, plan, f, float(max_num_tokens), moe_layer):
            peak = max(peak, op.hbm_bytes - op.weight_bytes)
    return peak + max_batch * model.vocab / plan.tp * 4 + max_num_tokens * model.hidden * ACT_BYTES * 2


def serving_memory(model: Model, plan: ServingPlan, system: System, f: Formats, *, max_num_tokens: int,
                   max_batch: int, kv_fraction: float, block_tokens: int,
                   fraction_of_total: bool = False) -> ServingMemory:
    """Memory of the most constrained stage (fewest KV tokens); InfeasibleError when the weights and workspace
    leave nothing for the KV cache."""
    cap = system.device.hbm.capacity_bytes
    act = activation_workspace_bytes(model, plan, f, max_num_tokens, max_batch)
    stages = stage_layers(model, plan.pp)
    best = None
    for s, layers in enumerate(stages):
        w = stage_weight_bytes(model, plan, f, layers, s == 0, s == len(stages) - 1)
        free = cap - w - act - RUNTIME_RESERVE_BYTES
        if free <= 0:
            raise InfeasibleError(
                f"{model.name} does not fit for serving: stage {s} needs {w / 1e9:.1f} GB of weights + "
                f"{act / 1e9:.1f} GB of activations + {RUNTIME_RESERVE_BYTES / 1e9:.1f} GB runtime per GPU, more "
                f"than the {cap / 1e9:.1f} GB of one {system.device.name} (tp {plan.tp}, pp {plan.pp}, ep {plan.ep}, "
                f"{plan.weight_precision} weights)")
        per_tok = kv_bytes_per_token(model, plan, layers)
        pool = kv_fraction * cap - (cap - free) if fraction_of_total else kv_fraction * free
        if pool <= 0:
            raise InfeasibleError(
                f"{model.name} does not fit for serving: stage {s} needs {(cap - free) / 1e9:.1f} GB of weights, "
                f"activations and runtime per GPU, more than the {kv_fraction:g} of the {cap / 1e9:.1f} GB of one "
                f"{system.device.name} the stack lets it use (vLLM gpu_memory_utilization; tp {plan.tp}, pp "
                f"{plan.pp}, ep {plan.ep}, {plan.weight_precision} weights)")
        tokens = int(pool / per_tok) if per_tok > 0 else 1 << 40
        share = window_kv_share(model, layers)
        mem = ServingMemory(cap, w, act, RUNTIME_RESERVE_BYTES, pool, per_tok, tokens, block_tokens, share,
                            model.sliding_window + block_tokens if share else 0)
        if best is None or mem.kv_tokens < best.kv_tokens:
            best = mem
    if best.kv_tokens < block_tokens:
        raise InfeasibleError(f"{model.name} does not fit for serving: {best.kv_pool_bytes / 1e9:.2f} GB of KV cache "
                              f"per GPU holds {best.kv_tokens} tokens, less than one {block_tokens}-token block")
    return best
