"""Serving work items checked by hand where mutation testing (benchmarks/mutation.py, seed 13) found them loose:
the 16-bit add+norm kernels of a layer, shared experts counted once each, GPT-J's MLP split over tp, the plain-form
MLA prompt core reading the up-projected K/V of every local head, and the name of the logits all-gather."""
from __future__ import annotations

import dataclasses

from narrowpath.catalog import model
from narrowpath.spec.parse import model_from_dict
from narrowpath.spec.serving import ServingPlan
from narrowpath.workload.serving import Formats, layer_token_ops, prefill_attention_op
from narrowpath.workload.serving_comm import logits_transfer

GPTJ = dict(name="gpt-j-6b", layers=28, hidden=4096, heads=16, kv_heads=16, ffn=16384, vocab=50400, ffn_act="gelu",
            parallel_attn_mlp=True, seq_len=2048)


def _ops(m, plan, T, moe_layer=False):
    return layer_token_ops(m, plan, Formats.of(plan, True, m), T, moe_layer)


def test_both_add_norms_of_a_layer_move_16_bit_activations():
    """Llama-3 8B (h 4096), T = 10, tp 1: a pre-norm layer has two fused residual-add + RMSNorm kernels (before
    attention, before the MLP), each reading the residual and the sublayer output and writing the sum and the
    normed copy at 2 bytes: 4·T·h·2 = 4·10·4096·2 = 327,680 bytes, in 16 bit (workload.serving.ACT_BYTES =
    2, 'Activations between layers ... 16 bit')."""
    m, p = model("llama3-8b"), ServingPlan()
    norms = [op for op in _ops(m, p, 10.0) if op.name == "add_norm"]
    assert len(norms) == 2
    assert [op.hbm_bytes for op in norms] == [327_680.0, 327_680.0]
    assert [op.dtype for op in norms] == ["bf16", "bf16"]
    assert all(op.flop == 0.0 and op.kernels == 1 for op in norms)


def test_every_shared_expert_adds_its_own_mlp():
    """DeepSeek-V3 with two shared experts of 2,048 (the routed experts' width, the shared width's default): the
    shared MLP of one GPU at tp 2 is 2·2048/2 = 2,048 wide, so its SwiGLU up projection holds h·2·2048 weights
    and its down projection 2048·h; in bf16 (2 bytes) all shared weights are 3·7168·2048·2 = 88,080,384 bytes,
    which is shared_experts · 3 · h · shared_ffn / tp · 2 (layer_weight_bytes' count)."""
    base = model("deepseek-v3")
    m = dataclasses.replace(base, moe=dataclasses.replace(base.moe, shared_experts=2))
    assert m.moe.shared_ffn == 2048
    p = ServingPlan(tp=2)
    by = {op.name: op for op in _ops(m, p, 16.0, moe_layer=True)}
    assert by["shared_up"].weight_bytes == 7168 * 2 * 2048 * 2
    assert by["shared_down"].weight_bytes == 2048 * 7168 * 2
    shared = sum(op.weight_bytes for op in by.values() if op.name.startswith("shared_"))
    assert shared == 88_080_384 == 2 * 3 * 7168 * 2048 / 2 * 2
    assert by["shared_up"].flop == 2 * 16 * 7168 * 2 * 2048


def test_gptj_mlp_is_split_over_tensor_parallelism():
    """GPT-J (ffn 16,384, gelu) at tp 2: each GPU holds half the MLP, up [4096 × 8192] and down [8192 × 4096]:
    2·T·4096·8192 FLOPs each at T = 4, and 4096·8192·2 bytes of bf16 weights each."""
    m, p = model_from_dict(GPTJ), ServingPlan(tp=2)
    by = {op.name: op for op in _ops(m, p, 4.0)}
    assert by["mlp_up"].flop == by["mlp_down"].flop == 2 * 4 * 4096 * 8192
    assert by["mlp_up"].weight_bytes == by["mlp_down"].weight_bytes == 4096 * 8192 * 2


def test_mla_prompt_core_reads_every_local_heads_keys_and_values():
    """DeepSeek-V3 prompt chunk at tp 8 (128/8 = 16 heads per GPU), plain form: per context token each of the
    16 heads reads a 192-wide key (128 nope + 64 rope) and a 128-wide value, in 16 bit: 16·(192 + 128)·2 =
    10,240 bytes; 100 chunk tokens after 900 cached ones read 1,000 context tokens' K/V and write 100 outputs of
    the same width: (1000 + 100)·10,240 = 11,264,000 bytes; FLOPs 2·16·320 per causal pair."""
    m, p = model("deepseek-v3"), ServingPlan(tp=8)
    op = prefill_attention_op(m, p, Formats.of(p, True, m), 100.0, 100.0 * 950.5, 1000.0)
    assert op.hbm_bytes == 11_264_000.0
    assert op.flop == 2 * 16 * 320 * 100.0 * 950.5
    # one GPU at tp 1 holds 8x the heads: 8x the K/V it reads
    p1 = ServingPlan(tp=1)
    assert prefill_attention_op(m, p1, Formats.of(p1, True, m), 100.0, 100.0 * 950.5, 1000.0).hbm_bytes == 8 * 11_264_000


def test_the_logits_gather_is_named_for_its_group():
    """At tp 2 the vocabulary-parallel logits of 4 rows (4·128,256·2 bytes) are all-gathered over tp; the
    collectives table of `serve` lists it by the name `tp.logits_all_gather`; without tp there is none."""
    m = model("llama3-8b")
    tr = logits_transfer(m, ServingPlan(tp=2), 4)
    assert (tr.name, tr.op, tr.axis, tr.message_bytes) == ("tp.logits_all_gather", "all_gather", "tp",
                                                           4 * 128256 * 2)
    assert logits_transfer(m, ServingPlan(tp=1), 4) is None
