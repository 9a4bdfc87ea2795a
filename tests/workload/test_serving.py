"""Serving work items: KV bytes per token, decode reads every weight, MoE active experts, capacity."""
from __future__ import annotations

import dataclasses
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
from narrowpath.workload.serving_comm import distinct_expert_ranks, layer_transfers, stage_boundary_transfer


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
    f = Formats.of(p, True, m)
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
    f = Formats.of(p, True, m)
    (tr, n), = layer_transfers(m, p, f, 64.0, False)
    assert tr.op == "all_reduce" and n == 2 and tr.message_bytes == 64 * m.hidden * 2


def test_capacity_and_blocks():
    """Free memory after weights, workspace and runtime, times the fraction, over KV bytes per token; a model
    that does not fit is refused with one line."""
    m, s = model("llama3-8b"), system("dgx-h100")
    p = ServingPlan(weight_precision="bf16", kv_precision="bf16")
    f = Formats.of(p, True, m)
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


def test_moe_layer_ops_of_mixtral_by_hand():
    """Mixtral 8x7B (h 4096, 8 experts of ffn 14336, top 2, 32 q heads and 8 kv heads of 128), FP8 weights, tp 1,
    ep 2 over 2 attention-DP ranks, one decode token per rank (T = 1):
    - tokens entering the stage's experts: T·dp = 2, each choosing top_k = 2 distinct experts of 8 (4 copies); this
      GPU holds 8/2 = 4 experts, of which 4·(1 − (1 − 2/8)²) = 1.75 are hit in expectation, and runs rows = 4/2
      copies × the dropless imbalance of ep 2;
    - the expert up GEMM reads those experts' [4096 × 2·14336] FP8 weights: 1.75·4096·28672 B = 205.52 MB, the
      down GEMM 1.75·14336·4096 B = 102.76 MB; FLOPs 2 per weight per row;
    - the attention half is kept (add+norm, qkv [4096 × (4096 + 2·1024)], rotary/KV write, o_proj), then add+norm,
      router [4096 × 8] in 16 bit (2·4096·8 FLOPs), top-k, permute, experts, unpermute;
    - the layer's weight bytes: attention 4096·6144 + 4096·4096 (FP8) + 2 norms of 4096 in 16 bit + 4 experts ×
      3·4096·14336 FP8 + the 16-bit router 4096·8·2."""
    m = model("mixtral-8x7b")
    p = ServingPlan(tp=1, dp=2, ep=2, weight_precision="fp8", kv_precision="fp8")
    f = Formats.of(p, True, m)
    names = [o.name for o in layer_token_ops(m, p, f, 1.0, True)]
    assert names == ["add_norm", "qkv", "qkv_preprocess", "o_proj", "add_norm", "router", "router_topk",
                     "moe_permute", "expert_up", "expert_act", "expert_down", "moe_unpermute"]
    ops = {o.name: o for o in layer_token_ops(m, p, f, 1.0, True)}
    active = 4 * (1 - (1 - 2 / 8) ** 2)
    assert active == 1.75
    assert ops["expert_up"].weight_bytes == pytest.approx(205.52e6, rel=1e-4)
    assert ops["expert_up"].weight_bytes == pytest.approx(active * 4096 * 2 * 14336)
    assert ops["expert_down"].weight_bytes == pytest.approx(active * 14336 * 4096)
    rows = ops["expert_up"].flop / (2 * 4096 * 2 * 14336)
    assert rows > 2.0 and ops["expert_down"].flop == pytest.approx(2 * rows * 14336 * 4096)
    assert ops["qkv"].weight_bytes == 4096 * (4096 + 2 * 8 * 128)
    assert ops["o_proj"].weight_bytes == 4096 * 4096
    assert ops["router"].flop == 2 * 4096 * 8 and ops["router"].dtype == "bf16"
    # of the 2 tokens entering the experts, those an all-to-all delivers to this GPU read once — 2·d/2 for
    # d = 2·(1 − C(4, 2)/C(8, 2)) = 11/7 ranks a token reaches — and this GPU's rows written (expand), and back
    assert ops["moe_permute"].hbm_bytes == ops["moe_unpermute"].hbm_bytes == pytest.approx((11 / 7 + rows) * 4096 * 2)
    w = 4096 * 6144 + 4096 * 4096 + 2 * 4096 * 2 + 4 * 3 * 4096 * 14336 + 4096 * 8 * 2
    assert layer_weight_bytes(m, p, f, True) == w


def test_moe_serving_transfers_by_hand():
    """Mixtral 8x7B at T = 64 tokens a rank, FP8 weights (W = 1 byte), activations 2 bytes, h 4096:
    - ep 2 (one rank's dp 2 group), tp 1, all-to-all exchange: a token's 2 experts lie on 2·(1 − C(4,2)/C(8,2)) =
      2·(1 − 6/28) = 1.5714 ranks; one FP8 dispatch of 64·1.5714·4096 B and one 16-bit combine of twice that;
    - the same at ep 2 laid over two scale-up domains with the deduplicating dispatch: each token crosses to the
      other domain with probability 1 − (1/2)^2 = 3/4, an all-to-all sized 64·(3/4)·4096·W·2/1 per direction;
    - ep 1 at dp 2: expert tp = tp·dp/ep = 2, every expert split over the two attention-DP ranks: an all-gather of
      the tokens and a reduce-scatter of the outputs, T·etp·h·2 = 64·2·4096·2 B each, no ep transfer;
    - tp 2 alone: the two tp all-reduces of a dense layer; tp 2 with ep 2: one all-reduce (the experts end in an
      all-gather over tp instead) and the dispatch of T/tp tokens."""
    m = model("mixtral-8x7b")
    p = ServingPlan(tp=1, dp=2, ep=2, weight_precision="fp8", kv_precision="fp8")
    f = Formats.of(p, True, m)
    d = 2 * (1 - 6 / 28)
    assert distinct_expert_ranks(8, 2, 2) == pytest.approx(d)
    tr = {t.name: (t.op, t.message_bytes, c) for t, c in layer_transfers(m, p, f, 64.0, True)}
    assert tr == {"ep.dispatch": ("all_to_all", pytest.approx(64 * d * 4096), 1.0),
                  "ep.combine": ("all_to_all", pytest.approx(64 * d * 4096 * 2), 1.0)}
    dd = dataclasses.replace(p, ep_dispatch="dedup")
    tr = {t.name: (t.op, t.axis, t.message_bytes, c) for t, c in layer_transfers(m, dd, f, 64.0, True, 2, 1)}
    assert tr == {"ep.dispatch_internode": ("all_to_all", "ep_inter", pytest.approx(64 * 0.75 * 4096 * 2), 1.0),
                  "ep.combine_internode": ("all_to_all", "ep_inter", pytest.approx(64 * 0.75 * 4096 * 2 * 2), 1.0)}
    same_domain = {t.name for t, _ in layer_transfers(m, dd, f, 64.0, True, 1, 2)}
    assert same_domain == {"ep.dispatch", "ep.combine"}  # one domain: nothing to deduplicate across the fabric
    tr = {t.name: (t.op, t.message_bytes, c) for t, c in layer_transfers(m, dataclasses.replace(p, ep=1), f, 64.0,
                                                                         True)}
    assert tr == {"etp.all_gather": ("all_gather", 64 * 2 * 4096 * 2, 1.0),
                  "etp.reduce_scatter": ("reduce_scatter", 64 * 2 * 4096 * 2, 1.0)}
    assert layer_transfers(m, dataclasses.replace(p, dp=1, ep=1), f, 64.0, True) == []
    tp2 = ServingPlan(tp=2, dp=1, ep=1, weight_precision="fp8")
    tr = {t.name: (t.op, t.message_bytes, c) for t, c in layer_transfers(m, tp2, f, 64.0, True)}
    assert tr["tp.all_reduce"] == ("all_reduce", 64 * 4096 * 2, 2.0)
    assert {k for k in tr} == {"tp.all_reduce"}  # experts not spread over ranks: tp's two all-reduces only
    tp2ep = ServingPlan(tp=2, dp=1, ep=2, weight_precision="fp8")
    tr = {t.name: (t.op, t.message_bytes, c) for t, c in layer_transfers(m, tp2ep, f, 64.0, True)}
    assert tr["tp.all_reduce"] == ("all_reduce", 64 * 4096 * 2, 1.0)
    assert tr["tp.moe_all_gather"] == ("all_gather", 64 * 4096 * 2, 1.0)
    assert tr["ep.dispatch"][1] == pytest.approx(32 * d * 4096)
    assert stage_boundary_transfer(m, 64.0).message_bytes == 64 * 4096 * 2
    assert stage_boundary_transfer(m, 64.0).op == "send_recv" and stage_boundary_transfer(m, 64.0).axis == "pp"


def test_activation_workspace_by_hand():
    """Llama-3 8B, FP8 weights, tp 1, 8,192 tokens and 256 sequences: the largest op's non-weight traffic is the
    SwiGLU, reading gate and up and writing their product, 3·8192·14336·2 = 704.6 MB (more than the up projection's
    FP8 input and 16-bit output, 8192·4096 + 8192·28672·2 = 503.3 MB); plus fp32 logits 256·128256·4 = 131.3 MB,
    plus the residual stream in and out, 8192·4096·2·2 = 134.2 MB."""
    from narrowpath.cost.serving_memory import activation_workspace_bytes
    m, p = model("llama3-8b"), ServingPlan(weight_precision="fp8")
    f = Formats.of(p, True, m)
    act = 3 * 8192 * 14336 * 2
    assert act > 8192 * 4096 * 1 + 8192 * 28672 * 2
    assert activation_workspace_bytes(m, p, f, 8192, 256) == act + 256 * 128256 * 4 + 8192 * 4096 * 2 * 2


def test_layer_kinds_and_decode_attention_flops_by_hand():
    """DeepSeek-V3's first 3 layers are dense and the rest MoE (a dense model has no MoE layer). Decode attention of
    a GQA model at tp 8 on 10 sequences of 1,000 context tokens: 2·(64/8 query heads)·(128 + 128)·10,000 =
    40.96 MFLOP; MLA attends over its latent, d_qk = 512 + 64 and d_v = 512: 2·(128/8)·1088·10,000."""
    from narrowpath.workload.serving import decode_attention_op, layer_kind
    ds = model_from_dict(DSV3)
    assert [layer_kind(ds, i)[0] for i in range(5)] == [False, False, False, True, True]
    assert not any(layer_kind(model("llama3-8b"), i)[0] for i in range(32))
    p = ServingPlan(tp=8)
    op = decode_attention_op(model("llama3-70b"), p, Formats.of(p, True, model("llama3-70b")), 10, 10_000.0)
    assert op.flop == 2 * 8 * 256 * 10_000
    mla = decode_attention_op(ds, p, Formats.of(p, True, ds), 10, 10_000.0)
    assert mla.flop == 2 * 16 * (576 + 512) * 10_000


def test_distinct_expert_ranks_at_the_boundary():
    """16 experts on 2 ranks, top 8: the other rank's 8 experts could hold all 8 picks, C(8,8)/C(16,8) = 1/12,870,
    so a token reaches 2·(1 − 1/12,870) ranks — not exactly 2; one more pick than the other rank holds forces 2."""
    assert distinct_expert_ranks(16, 8, 2) == pytest.approx(2 * (1 - 1 / 12870), rel=1e-12)
    assert distinct_expert_ranks(16, 9, 2) == 2.0


def test_stage_weight_bytes_adds_the_embedding_and_output_layer_by_hand():
    """Llama-3 8B (h 4096, V 128,256, untied), tp 2, 16-bit tables: the vocabulary-parallel embedding is
    128,256·4096/2·2 B = 525,336,576 B a GPU on the first stage; the output layer the same plus the final norm
    (4096·2 B) on the last; a middle stage holds its layers only. With tied embeddings one matrix serves both when
    the first stage is also the last; a pipeline's last stage still holds its own copy."""
    m, p = model("llama3-8b"), ServingPlan(tp=2)
    f = Formats.of(p, True, m)
    layers = [0, 1, 2, 3]
    mid = stage_weight_bytes(m, p, f, layers, False, False)
    assert mid == pytest.approx(4 * layer_weight_bytes(m, p, f, False))
    table = 128_256 * 4096 / 2 * 2
    assert table == 525_336_576
    assert stage_weight_bytes(m, p, f, layers, True, False) == pytest.approx(mid + table)
    assert stage_weight_bytes(m, p, f, layers, False, True) == pytest.approx(mid + table + 4096 * 2)
    assert stage_weight_bytes(m, p, f, layers, True, True) == pytest.approx(mid + 2 * table + 4096 * 2)
    tied = dataclasses.replace(m, tied_embeddings=True)
    # one stage, tied: one matrix less than untied (to 2e-5: whether the final norm's 8 KiB is counted)
    untied_one = stage_weight_bytes(m, p, f, layers, True, True)
    assert untied_one - stage_weight_bytes(tied, p, f, layers, True, True) == pytest.approx(table, rel=2e-5)
    assert stage_weight_bytes(tied, p, f, layers, False, True) == pytest.approx(mid + table + 4096 * 2)


def test_router_top_k_reads_and_writes_fp32_per_token_and_expert():
    """The top-k after the router reads the fp32 logits and writes the gate weights and indices: 3 fp32 values per
    token and expert. Mixtral (8 experts) at T = 64 tokens: 3·64·8·4 = 6,144 B, twice that at T = 128."""
    m, p = model("mixtral-8x7b"), ServingPlan()
    f = Formats.of(p, True, m)
    for T in (64.0, 128.0):
        (topk,) = [o for o in layer_token_ops(m, p, f, T, True) if o.name == "router_topk"]
        assert topk.hbm_bytes == 3 * T * 8 * 4 and topk.flop == 0.0


def test_an_nvfp4_mla_checkpoint_keeps_its_attention_projections_in_16_bit():
    """NVIDIA's DeepSeek-R1 NVFP4 checkpoint quantizes the dense and MoE FFN layers and keeps the attention modules
    in bf16 (TensorRT-LLM tech blog 1, Precision Strategy table). Under attention DP 8 / EP 8 one GPU holds, by hand:
    32 experts × 58 MoE layers × 3·7168·2048 × 0.5625 B (NVFP4 with a scale per 16) = 45.97 GB, the attention of
    61 layers × 187,105,280 parameters (q_a 7168·1536, q_b 1536·128·192, kv_a 7168·576, kv_b 512·128·256,
    o 128·128·7168) × 2 B = 22.83 GB, the shared experts 58 × 3·7168·2048 × 0.5625 = 1.44 GB, the dense FFNs
    3 × 3·7168·18432 × 0.5625 = 0.67 GB, the bf16 routers 58 × 7168·256 × 2 = 0.21 GB, embedding and output layer
    2 × 129,280·7168 × 2 = 3.71 GB: ≈ 74.8 GB (tech blog 3: 'the weights and activation occupies about 80 GB
    memory for each GPU'). A GQA model's NVFP4 checkpoint and DeepSeek's FP8 one quantize the projections."""
    ds = model_from_dict(DSV3)
    p = ServingPlan(tp=1, dp=8, ep=8, weight_precision="fp4")
    f = Formats.of(p, True, ds)
    assert (f.w_dtype, f.W, f.attn_dtype, f.attn_W) == ("fp4", 0.5625, "bf16", 2.0)
    ops = {op.name: op for op in layer_token_ops(ds, p, f, 4.0, True)}
    assert (ops["o_proj"].dtype, ops["o_proj"].weight_bytes) == ("bf16", 128 * 128 * 7168 * 2)
    assert (ops["q_up"].dtype, ops["q_up"].weight_bytes) == ("bf16", 1536 * 128 * 192 * 2)
    assert ops["expert_up"].dtype == "fp4"
    attn = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    by_hand = (32 * 58 * 3 * 7168 * 2048 * 0.5625 + 61 * attn * 2 + 58 * 3 * 7168 * 2048 * 0.5625
               + 3 * 3 * 7168 * 18432 * 0.5625 + 58 * 7168 * 256 * 2 + 2 * 129280 * 7168 * 2)
    assert stage_weight_bytes(ds, p, f, list(range(61)), True, True) == pytest.approx(by_hand, rel=1e-4)
    assert Formats.of(p, True, model("llama3-70b")).attn_dtype == "fp4"
    assert Formats.of(dataclasses.replace(p, weight_precision="fp8"), True, ds).attn_dtype == "fp8"


def test_a_routed_expert_gemm_counts_its_rows_per_active_expert():
    """Mixtral (8 experts, top 2) on one GPU, 4 decode tokens: 8 token copies over 8·(1 − (6/8)^4) = 5.469 expected
    active experts (each token's 2 experts distinct), 1.46 rows each — a weight stream (cost.roofline), whatever
    the launch's total rows. One token reads exactly its 2 experts."""
    from narrowpath.workload.serving import moe_token_ops
    m, p = model("mixtral-8x7b"), ServingPlan(ep=1, tp=1)
    ops = {op.name: op for op in moe_token_ops(m, p, Formats.of(p, True, m), 4.0)}
    active = 8 * (1 - (6 / 8) ** 4)
    assert ops["expert_up"].rows == pytest.approx(8 / active)
    assert ops["expert_up"].weight_bytes == pytest.approx(active * 4096 * 2 * 14336 * 2)
    one = {op.name: op for op in moe_token_ops(m, p, Formats.of(p, True, m), 1.0)}
    assert one["expert_up"].weight_bytes == pytest.approx(2 * 4096 * 2 * 14336 * 2)


def test_prompt_attention_is_rated_by_its_head_width_and_decode_is_not():
    """A prompt chunk runs the tiled (FlashAttention-style) kernel whose speed FlashAttention-3 measured by head
    width: it carries d_qk (128 for Llama-3 70B, 192 for DeepSeek-V3's MLA); the decode kernels (XQA, FlashDecoding,
    FlashMLA) were not measured by head width: they carry none and keep the calibrated rate."""
    from narrowpath.workload.serving import decode_attention_op, prefill_attention_op
    for m, d in ((model("llama3-70b"), 128), (model_from_dict(DSV3), 192)):
        p = ServingPlan()
        f = Formats.of(p, True, m)
        pre, dec = prefill_attention_op(m, p, f, 1024, 1024 * 512, 1024), decode_attention_op(m, p, f, 8, 8 * 2048)
        assert (pre.head_dim, dec.head_dim) == (d, 0)
        # one exponential per query-key pair and head: the prompt's causal pairs, every decode query's context
        assert pre.exps == m.heads * 1024 * 512 and dec.exps == m.heads * 8 * 2048
        assert decode_attention_op(m, p, f, 8, 8 * 2048, queries_per_seq=3.0).exps == 3 * dec.exps


def test_serving_attention_cores_are_forward_flash_kernels_that_read_no_weights():
    """The prompt and decode attention cores are fused (flash) forward kernels named for what they run; they read
    the KV cache and activations, no weights (weight_bytes 0: the accounts' weight traffic leaves them out)."""
    from narrowpath.workload.serving import decode_attention_op, prefill_attention_op
    m, p = model("llama3-70b"), ServingPlan()
    f = Formats.of(p, True, m)
    pre, dec = prefill_attention_op(m, p, f, 512, 512 * 256, 512), decode_attention_op(m, p, f, 4, 4 * 1000)
    assert (pre.name, pre.kind, pre.phase, pre.weight_bytes) == ("attn_prefill", "flash", "fwd", 0.0)
    assert (dec.name, dec.kind, dec.phase, dec.weight_bytes) == ("attn_decode", "flash", "fwd", 0.0)


def test_tensor_parallel_shared_experts_and_expert_slices_are_summed_over_tp():
    """DeepSeek-V3 (one shared expert) served with tp 2 × attention DP 4, ep 8, 64 tokens per rank, h 7168, 16-bit
    outputs: the shared expert runs tp-split on all T tokens, so its partial sums are reduce-scattered onto each
    rank's T/2 tokens (64·7168·2 = 917,504 B) before the MoE output is all-gathered over tp. With TensorRT-LLM's
    gather exchange the dp reduce-scatter sums only the GPUs of one tp index: a tp all-reduce of the partial sums
    (917,504 B) is needed too."""
    from narrowpath.workload.serving_comm import layer_transfers
    m = model("deepseek-v3")
    p = ServingPlan(tp=2, dp=4, ep=8, weight_precision="fp8", kv_precision="fp8")
    f = Formats.of(p, True, m)
    tr = {t.name: (t.op, t.axis, t.message_bytes, c) for t, c in layer_transfers(m, p, f, 64.0, True)}
    assert tr["tp.shared_reduce_scatter"] == ("reduce_scatter", "tp", 917_504, 1.0)
    assert tr["tp.moe_all_gather"] == ("all_gather", "tp", 917_504, 1.0)
    g = {t.name: (t.op, t.axis, t.message_bytes, c) for t, c in layer_transfers(m, p, f, 64.0, True,
                                                                                 exchange="gather")}
    assert g["tp.moe_all_reduce"] == ("all_reduce", "tp", 917_504, 1.0)
    assert "dp.moe_reduce_scatter" in g
    one = {t.name for t, _ in layer_transfers(m, dataclasses.replace(p, tp=1), f, 64.0, True)}
    assert not one & {"tp.shared_reduce_scatter", "tp.moe_all_gather", "tp.moe_all_reduce"}
