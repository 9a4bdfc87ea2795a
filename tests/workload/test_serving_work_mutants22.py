"""Serving workload values the seed-22 mutation sample (benchmarks/mutation.py) found unguarded in workload/: the
activation traffic of a non-gated MLP and the expert-tensor-parallel gather behind an expert-parallel dispatch —
each pinned by a hand calculation."""
from __future__ import annotations

import dataclasses

from narrowpath.catalog import model
from narrowpath.spec.serving import ServingPlan
from narrowpath.workload.serving import ACT_BYTES, Formats, mlp_token_ops
from narrowpath.workload.serving_comm import layer_transfers


def test_a_gelu_mlp_activation_reads_one_tensor_and_writes_one():
    """GPT 1.7B's MLP is GELU, not gated: its activation kernel reads the up projection's output and writes the
    activated tensor, 2 tensors of T × ffn 16-bit values (SwiGLU reads two and writes one: 3). At T = 64 tokens and
    ffn 9,216 (tp 1): 2 · 64 · 9,216 · 2 B = 2,359,296 B."""
    m = model("gpt-1.7b")
    assert (m.ffn_act, m.ffn, ACT_BYTES) == ("gelu", 9216, 2)
    p = ServingPlan()
    act = {op.name: op for op in mlp_token_ops(m, Formats.of(p, True, m), 64.0, 9216.0)}["mlp_act"]
    assert act.hbm_bytes == 2_359_296


def test_expert_tensor_parallel_gather_carries_every_routed_copy():
    """Mixtral 8x7B served at dp 4, ep 2 (tp 1): expert tp = tp·dp/ep = 2, so after the dispatch the rows an
    expert-parallel rank received are all-gathered over its 2 etp ranks and the outputs reduce-scattered back.
    At T = 64 tokens a rank, each token's top_k = 2 copies of hidden 4,096 16-bit values, times the etp group's
    2 members: 64 · 2 · 2 · 4,096 · 2 B = 2,097,152 B each way — with the plain all-to-all dispatch and with the
    deduplicating one over two scale-up domains alike (the gather inside the etp group is the same)."""
    m = model("mixtral-8x7b")
    plain = ServingPlan(dp=4, ep=2)
    assert (plain.expert_tp, m.moe.top_k, m.hidden) == (2, 2, 4096)
    f = Formats.of(plain, True, m)
    want = 64 * 2 * 2 * 4096 * 2
    assert want == 2_097_152
    for plan, domains in ((plain, 1), (dataclasses.replace(plain, ep_dispatch="dedup"), 2)):
        tr = {t.name: t.message_bytes for t, _ in layer_transfers(m, plan, f, 64.0, True, domains, 1)}
        assert tr["etp.all_gather"] == want
        assert tr["etp.reduce_scatter"] == want
    dedup = {t.name for t, _ in layer_transfers(m, dataclasses.replace(plain, ep_dispatch="dedup"), f, 64.0, True,
                                                2, 1)}
    assert "ep.dispatch_internode" in dedup  # the deduplicating branch ran
