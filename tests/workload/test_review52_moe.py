"""MoE and decode-attention terms from the fifty-second session's reviews (training MoE physics; serving cost), each
worked by hand: a deduplicating dispatch sends a token once to every rank holding one of its experts, not once per
expert; a permutation's backward is the inverse permutation (the forward's bytes, not twice them); TensorRT-LLM's
expand / finalize kernels move [tokens, h] ↔ [tokens·k, h]; a decode step's attention core streams the cache with
as few MMA rows as one kv head's group of query heads."""
from __future__ import annotations

import dataclasses
import math

import pytest

from narrowpath.catalog import calibration_for, device, model
from narrowpath.cost.roofline import MMA_TILE_ROWS, compute_time_s, exp_time_s, matrix_efficiency
from narrowpath.spec import Plan
from narrowpath.spec.serving import ServingPlan
from narrowpath.workload.moe import moe_block_ops, moe_transfers, ranks_per_token
from narrowpath.workload.ops import backward_ops
from narrowpath.workload.serving import Formats, decode_attention_op, moe_token_ops

MIXTRAL = model("mixtral-8x7b")


def _qwen3_30b():
    return dataclasses.replace(MIXTRAL, moe=dataclasses.replace(MIXTRAL.moe, num_experts=128, top_k=8))


def test_ranks_a_token_reaches_by_hand():
    """128 experts, top 8, ep 8 (16 experts a rank): a rank holds none of a token's 8 experts with probability
    C(112, 8)/C(128, 8) = Π_{i<8} (112 − i)/(128 − i) = 0.3326, so 8·(1 − 0.3326) = 5.339 ranks; Mixtral (8 experts,
    top 2, ep 8: one expert a rank) 2 — nothing to deduplicate; DeepSeek-V3 on ep 64 over 8 nodes, node-limited to
    M = 4 of the N = 8·(1 − (7/8)^8) = 5.25 nodes its experts would touch: its 8 experts among the 4 nodes' 128 on
    32 ranks, 32·(1 − Π (124 − i)/(128 − i)) = 7.359."""
    miss = math.prod((112 - i) / (128 - i) for i in range(8))
    assert ranks_per_token(128, 8, 8) == pytest.approx(8 * (1 - miss), rel=1e-12) == pytest.approx(5.339, abs=1e-3)
    assert ranks_per_token(8, 2, 8) == pytest.approx(2.0, rel=1e-12)
    node = 32 * (1 - math.prod((124 - i) / (128 - i) for i in range(8)))
    assert ranks_per_token(256, 8, 64, 8, 4) == pytest.approx(node, rel=1e-12) == pytest.approx(7.359, abs=1e-3)
    assert ranks_per_token(256, 8, 64, 8, 0) == pytest.approx(ranks_per_token(256, 8, 64), rel=1e-12)
    # a limit of as many nodes as there are (or more) restricts nothing: 64·(1 − Π (252 − i)/(256 − i)) = 7.676
    free = 64 * (1 - math.prod((252 - i) / (256 - i) for i in range(8)))
    assert ranks_per_token(256, 8, 64, 8, 8) == ranks_per_token(256, 8, 64, 8, 0) == pytest.approx(free, rel=1e-12)
    assert ranks_per_token(256, 8, 32, 4, 4) == pytest.approx(ranks_per_token(256, 8, 32), rel=1e-12)
    # a limit of one node of two: the token's 8 experts among that node's 128 on its 8 ranks (mutation seed 57)
    one = 8 * (1 - math.prod((112 - i) / (128 - i) for i in range(8)))
    assert ranks_per_token(256, 8, 16, 2, 1) == pytest.approx(one, rel=1e-12)
    # one node of eight: its 32 experts on 8 ranks of 4
    assert ranks_per_token(256, 8, 64, 8, 1) == pytest.approx(8 * (1 - math.prod((28 - i) / (32 - i) for i in range(8))),
                                                              rel=1e-12)


def test_a_deduplicating_dispatch_inside_one_domain_sends_each_token_once_per_rank():
    """Qwen3-30B-shaped experts (128, top 8) on ep 8 in one NVLink domain, s 4096, mbs 1, bf16: the flex dispatcher
    (DeepEP / HybridEP) moves 4096·5.339·2048·2 bytes each way per pass; the NCCL all-to-all dispatcher 4096·8·…"""
    m = dataclasses.replace(_qwen3_30b(), hidden=2048, seq_len=4096)
    dedup = moe_transfers(m, Plan(dp=8, ep=8, gbs=8, ep_dispatch="dedup"))
    plain = moe_transfers(m, Plan(dp=8, ep=8, gbs=8, ep_dispatch="all_to_all"))
    hits = ranks_per_token(128, 8, 8)
    assert [(t.name, t.axis, t.phase, c) for t, c in dedup] == [("ep.dispatch_combine", "ep", ph, 2.0)
                                                                for ph in ("fwd", "bwd")]
    assert all(t.message_bytes == pytest.approx(4096 * hits * 2048 * 2, rel=1e-12) for t, _ in dedup)
    assert all(t.message_bytes == 4096 * 8 * 2048 * 2 for t, _ in plain)
    # across domains the NVLink leg fans each token out to the ranks it needs, once each
    legs = {t.name: t.message_bytes for t, _ in moe_transfers(m, Plan(dp=16, ep=16, gbs=16, ep_dispatch="dedup"),
                                                              ep_domains=2, ep_per_domain=8) if t.phase == "fwd"}
    assert legs["ep.dispatch_combine_intranode"] == pytest.approx(4096 * ranks_per_token(128, 8, 16) * 2048 * 2)


def test_a_permutations_backward_moves_the_forwards_bytes():
    """Mixtral, s 4096, mbs 1, bf16: permute reads 4096 tokens and writes 8,192 copies of h 4096 — (4096 + 8192)·
    4096·2 = 100,663,296 B; its backward un-permutes the gradients (reads the copies', writes the tokens'): the
    same, not twice. The unpermute likewise, plus the kept expert outputs read for the probabilities' gradient
    where the combine weights the copies (moe_probs `combine`)."""
    for probs, extra in (("activation", 0), ("combine", 8192 * 4096 * 2)):
        fwd = moe_block_ops(MIXTRAL, Plan(moe_probs=probs))
        bwd = {op.name: op.hbm_bytes for op in backward_ops(fwd) if op.name in ("moe_permute", "moe_unpermute")}
        assert {op.name: op.hbm_bytes for op in fwd if op.name in bwd} == {"moe_permute": 100_663_296,
                                                                          "moe_unpermute": 100_663_296}
        assert bwd == {"moe_permute": 100_663_296, "moe_unpermute": 100_663_296 + extra}


def test_serving_expand_reads_the_tokens_an_all_to_all_delivers():
    """DeepSeek-V3 served at attention DP 8, ep 8, T = 64 tokens a rank: gathered, each GPU's expand reads all
    512 tokens of the stage; by an all-to-all only those with an expert on its rank, 512·d/8 with
    d = 8·(1 − C(224, 8)/C(256, 8)) ranks a token reaches (a review of this session's change: it read all 512)."""
    ds = model("deepseek-v3")
    p = ServingPlan(dp=8, ep=8, weight_precision="fp8", kv_precision="fp8")
    f = Formats.of(p, True, ds)
    d = 8 * (1 - math.prod((224 - i) / (256 - i) for i in range(8)))
    by = {ex: {op.name: op.hbm_bytes for op in moe_token_ops(ds, p, f, 64.0, ex)} for ex in ("gather", "all_to_all")}
    assert by["gather"]["moe_permute"] - by["all_to_all"]["moe_permute"] == pytest.approx(
        (512 - 512 * d / 8) * 7168 * 2, rel=1e-9)
    assert by["all_to_all"]["moe_unpermute"] == by["all_to_all"]["moe_permute"]


def test_serving_expand_and_finalize_move_tokens_and_their_copies():
    """Mixtral served on one GPU (ep 1): T = 100 tokens, top 2 → 200 copies. Expand reads the 100 tokens and writes
    the 200 copies, finalize reads the 200 and writes 100 sums: (100 + 200)·4096·2 = 2,457,600 B each (the expert
    rows carry no skew without ep)."""
    p = ServingPlan(weight_precision="bf16", kv_precision="bf16")
    ops = {op.name: op.hbm_bytes for op in moe_token_ops(MIXTRAL, p, Formats.of(p, True, MIXTRAL), 100.0)}
    assert ops["moe_permute"] == ops["moe_unpermute"] == 2_457_600


def test_decode_attention_streams_the_cache_with_its_groups_query_rows():
    """Llama-3 70B (64 query heads, 8 kv heads) on tp 8: one kv head's 8 query heads share each tile, 8 rows per
    query token — fewer than one 64-row MMA tile, so the core's arithmetic is read on the ramp at 64/8 times its
    FLOPs (cost.roofline's weight stream), and its fixed part shrinks 8-fold; multi-head attention (no grouping) 1 row;
    a kernel that reads the cache once per query head 1 row; MLA shares one latent among all 16 heads of tp 8."""
    llama70, ds = model("llama3-70b"), model("deepseek-v3")
    llama7 = dataclasses.replace(llama70, kv_heads=llama70.heads)  # multi-head: no grouping
    p = ServingPlan(tp=8, weight_precision="fp8", kv_precision="fp8")
    f = Formats.of(p, True, llama70)
    op = decode_attention_op(llama70, p, f, 1.0, 1000.0)
    assert op.rows == 8.0
    assert decode_attention_op(llama70, p, f, 4.0, 4000.0, queries_per_seq=3.0).rows == 24.0
    assert decode_attention_op(llama70, p, f, 1.0, 1000.0, kv_reads=8.0).rows == 1.0
    p1 = ServingPlan(weight_precision="bf16", kv_precision="bf16")
    assert decode_attention_op(llama7, p1, Formats.of(p1, True, llama7), 1.0, 138.0).rows == 1.0
    assert decode_attention_op(ds, p, Formats.of(p, True, ds), 1.0, 1000.0).rows == 128 / 8
    dev = device("H100-SXM5-80GB")
    cal = calibration_for(dev.name)
    eff = matrix_efficiency(op.flop * MMA_TILE_ROWS / 8, op.dtype, cal) * cal.flash_efficiency
    want = max(op.flop / (dev.matrix_peak(op.dtype) * eff), exp_time_s(op.exps, dev, eff))
    assert compute_time_s(op, dev, cal) == pytest.approx(want, rel=1e-12)
    # (before: the ramp read at the FLOPs themselves, a fixed ~16 µs a layer however small the step)
    eff0 = matrix_efficiency(op.flop, op.dtype, cal) * cal.flash_efficiency
    assert compute_time_s(op, dev, cal) < op.flop / (dev.matrix_peak(op.dtype) * eff0) / 4
