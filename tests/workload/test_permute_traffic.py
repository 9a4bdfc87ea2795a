"""The permutations an MoE layer's dispatcher runs (workload.moe.permute_traffic), by hand.

Megatron-Core's all-to-all dispatcher permutes the rank's tokens into top_k copies before the exchange and, with
more than one local expert, sorts the received chunks from source-rank order into expert order after it
(`sort_chunks_by_idxs`) and back before the combine; the flex dispatcher (DeepEP: plan.ep_dispatch `dedup`) receives
each token once per rank holding any of its experts and permutes those into the copies."""
from __future__ import annotations

import pytest

from narrowpath.spec import Plan
from narrowpath.spec.parse import model_from_dict
from narrowpath.workload.moe import (distinct_expert_ranks, expert_rows, local_tokens, moe_block_ops,
                                     permute_traffic)
from narrowpath.workload.ops import backward_ops

QWEN3 = model_from_dict(dict(name="qwen3-30b-a3b-like", layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128,
                             ffn=768, vocab=151936, seq_len=4096, experts=128, top_k=8, ffn_act="swiglu"))
MIX = model_from_dict(dict(name="mixtral-like", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
                           vocab=32000, seq_len=4096, experts=8, top_k=2, ffn_act="swiglu"))


def _ops(model, plan):
    fwd = [o for o in moe_block_ops(model, plan) if o.name in ("moe_permute", "moe_unpermute")]
    return {o.name: o for o in fwd}, {o.name: o for o in backward_ops(fwd, plan)}


def test_all_to_all_with_sixteen_experts_a_rank_sorts_the_received_rows():
    """4,096 tokens, 8 copies each, 2,048 wide, 2 B: permute 4,096 + 32,768 rows, then the sort reads and writes
    the 32,768 received rows (rows × the routing imbalance of the busiest rank): (4096 + 32768 + 2·R)·2048·2 B."""
    plan = Plan(dp=8, ep=8, gbs=8)
    tok = local_tokens(QWEN3, plan)
    assert tok == 4096
    R = expert_rows(QWEN3, plan)
    assert R >= 32768
    fwd, bwd = _ops(QWEN3, plan)
    want = (4096 + 32768 + 2 * R) * 2048 * 2
    assert fwd["moe_permute"].hbm_bytes == pytest.approx(want) == fwd["moe_unpermute"].hbm_bytes
    assert (fwd["moe_permute"].kernels, fwd["moe_unpermute"].kernels) == (4, 5)  # + the sorts' 2 and 3 launches
    assert (bwd["moe_permute"].kernels, bwd["moe_unpermute"].kernels) == (3, 3)  # + 1 each
    assert bwd["moe_permute"].hbm_bytes == pytest.approx(want)


def test_the_flex_dispatcher_permutes_what_it_received():
    """DeepEP: each token once to each of the 8 ranks holding any of its experts — 8·(1 − C(112, 8)/C(128, 8))
    ≈ 5.34 ranks — then those permuted into the 32,768 copies; no sort."""
    plan = Plan(dp=8, ep=8, gbs=8, ep_dispatch="dedup")
    rpt = distinct_expert_ranks(128, 8, 8)
    assert rpt == pytest.approx(5.34, abs=0.01)
    fwd, _ = _ops(QWEN3, plan)
    assert fwd["moe_permute"].hbm_bytes == pytest.approx((4096 * rpt + 32768) * 2048 * 2)
    assert fwd["moe_permute"].kernels == 2
    assert permute_traffic(QWEN3, plan, 4096, expert_rows(QWEN3, plan))[1] == 0


def test_one_expert_a_rank_or_no_expert_parallelism_permutes_only():
    """Mixtral at ep 8 holds one expert a rank (nothing to sort), and without ep nothing is exchanged: the
    permute alone, (4096 + 8192)·4096·2 B; at ep 8 DeepEP's received tokens (2 ranks a token) are as many as the
    copies, more than the all-to-all's 4,096 own tokens."""
    for plan in (Plan(dp=8, ep=8, gbs=8), Plan(dp=8, gbs=8)):
        fwd, _ = _ops(MIX, plan)
        assert fwd["moe_permute"].hbm_bytes == (4096 + 8192) * 4096 * 2
        assert fwd["moe_permute"].kernels == 2
    flex, _ = _ops(MIX, Plan(dp=8, ep=8, gbs=8, ep_dispatch="dedup"))
    assert flex["moe_permute"].hbm_bytes == pytest.approx((4096 * 2 + 8192) * 4096 * 2)
