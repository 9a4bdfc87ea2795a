"""Serving work items: KV bytes per token, decode reads every weight, MoE active experts, capacity."""
from __future__ import annotations

import math

import pytest

from narrowpath.catalog import model, system
from narrowpath.cost.serving_memory import blocks_for, serving_memory
from narrowpath.errors import InfeasibleError
from narrowpath.spec.parse import model_from_dict
from narrowpath.spec.serving import ServingPlan
from narrowpath.workload.serving import (Formats, element_bytes, expected_active_experts, kv_bytes_per_token,
                                         kv_bytes_per_token_layer, layer_token_ops, layer_weight_bytes,
                                         stage_weight_bytes)
from narrowpath.workload.serving_comm import distinct_expert_ranks, layer_transfers


def test_kv_bytes_per_token_gqa_by_precision_and_tp():
    """GQA caches 2·kv_heads·head_dim per layer: Llama-3 70B (8 kv heads of 128) holds 320 KiB per token in bf16
    over 80 layers, half in fp8; tp 8 leaves one kv head per GPU, tp 16 replicates it."""
    m = model("llama3-70b")
    layers = list(range(m.layers))
    assert kv_bytes_per_token(m, ServingPlan(kv_precision="bf16"), layers) == 2 * 8 * 128 * 2 * 80
    assert kv_bytes_per_token(m, ServingPlan(kv_precision="fp8"), layers) == 2 * 8 * 128 * 1 * 80
    assert kv_bytes_per_token_layer(m, ServingPlan(tp=8)) == 2 * 1 * 128 * 2
    assert kv_bytes_per_token_layer(m, ServingPlan(tp=16)) == 2 * 1 * 128 * 2


DSV3 = dict(name="deepseek-v3", layers=61, hidden=7168, heads=128, kv_heads=128, ffn=2048, vocab=129280,
            experts=256, top_k=8, ffn_act="swiglu", shared_experts=1, dense_layers=3, dense_ffn=18432,
            attention="mla", q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
            v_head_dim=128, seq_len=4096)


def test_kv_bytes_per_token_mla_is_the_latent_on_every_rank():
    """MLA caches kv_lora_rank + qk_rope_head_dim per layer (DeepSeek-V3: 512 + 64), whole on every tp rank."""
    m = model_from_dict(DSV3)
    for tp in (1, 8):
        assert kv_bytes_per_token_layer(m, ServingPlan(tp=tp, kv_precision="bf16")) == (512 + 64) * 2


def test_nvfp4_carries_its_block_scales():
    assert element_bytes("fp4") == pytest.approx(0.5 + 1 / 16)
    assert element_bytes("fp8") == 1.0 and element_bytes("bf16") == 2.0


def test_decode_reads_every_weight_once_whatever_the_batch():
    """A dense layer's GEMMs read exactly the layer's matrix weights at T = 1 and at T = 512; FLOPs are 2 per
    weight per token."""
    m, p = model("llama3-8b"), ServingPlan(tp=2, weight_precision="fp8")
    f = Formats.of(p, True)
    w_layer = layer_weight_bytes(m, p, f, False) - 2 * m.hidden * 2  # minus the norms
    for T in (1.0, 512.0):
        ops = layer_token_ops(m, p, f, T, False)
        assert sum(o.weight_bytes for o in ops) == pytest.approx(w_layer)
        gemm_flop = sum(o.flop for o in ops if o.kind == "matrix")
        assert gemm_flop == pytest.approx(2 * T * w_layer / f.W)


def test_moe_decode_reads_only_the_chosen_experts():
    """At one token a layer reads top_k of its experts (expected occupancy), all of them at a large batch."""
    E, k = 128, 8
    assert expected_active_experts(E, E, k) == pytest.approx(E * (1 - (1 - 1 / E) ** k))
    assert expected_active_experts(E, E, k) == pytest.approx(k, rel=0.03)
    assert expected_active_experts(E, E, 1e6) == pytest.approx(E)
    assert expected_active_experts(E / 8, E, 1e6) == pytest.approx(E / 8)


def test_distinct_expert_ranks():
    """A token's k experts without replacement land on ep·(1 − C(E − E/ep, k)/C(E, k)) ranks: 1 for k = 1, all
    ranks when k is large, ~5.3 of 8 for DeepSeek-V3 (256 experts, top 8)."""
    assert distinct_expert_ranks(256, 1, 8) == pytest.approx(1.0)
    assert distinct_expert_ranks(256, 8, 1) == 1.0
    assert distinct_expert_ranks(16, 15, 8) == pytest.approx(8.0)
    assert 5.0 < distinct_expert_ranks(256, 8, 8) < 5.5


def test_tensor_parallel_layer_has_two_all_reduces_and_parallel_blocks_one():
    m, p = model("llama3-70b"), ServingPlan(tp=8)
    f = Formats.of(p, True)
    (tr, n), = layer_transfers(m, p, f, 64.0, False)
    assert tr.op == "all_reduce" and n == 2 and tr.message_bytes == 64 * m.hidden * 2


def test_capacity_and_blocks():
    """Free memory after weights, workspace and runtime, times the fraction, over KV bytes per token; a model
    that does not fit is refused with one line."""
    m, s = model("llama3-8b"), system("dgx-h100")
    p = ServingPlan(weight_precision="bf16", kv_precision="bf16")
    f = Formats.of(p, True)
    mem = serving_memory(m, p, s, f, max_num_tokens=2048, max_batch=64, kv_fraction=0.9, block_tokens=16)
    w = stage_weight_bytes(m, p, f, list(range(m.layers)), True, True)
    assert mem.weights_bytes == w
    assert mem.kv_pool_bytes == pytest.approx(0.9 * (s.device.hbm.capacity_bytes - w - mem.activation_bytes
                                                     - mem.runtime_bytes))
    assert mem.kv_tokens == int(mem.kv_pool_bytes / kv_bytes_per_token(m, p, list(range(m.layers))))
    assert blocks_for(17, 16) == 2 and blocks_for(16, 16) == 1
    with pytest.raises(InfeasibleError, match="does not fit for serving"):
        serving_memory(model("llama3-405b"), p, s, f, max_num_tokens=2048, max_batch=64, kv_fraction=0.9,
                       block_tokens=16)
    assert math.isfinite(mem.free_bytes)
