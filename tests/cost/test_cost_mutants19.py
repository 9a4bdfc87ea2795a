"""Collective and serving-memory values the seed-19 mutation sample (benchmarks/mutation.py) found unguarded in
cost/ — the tier a direct all-to-all is charged to when its two legs tie, and the activation workspace of a model
whose every layer is an MoE layer — each pinned by a hand calculation."""
from __future__ import annotations

import pytest

from narrowpath.catalog import model
from narrowpath.cost.collectives import direct
from narrowpath.cost.serving_memory import activation_workspace_bytes
from narrowpath.network.paths import PathModel
from narrowpath.spec.serving import ServingPlan
from narrowpath.workload.serving import Formats


def test_a_direct_all_to_all_whose_legs_tie_is_charged_to_the_scale_out_tier():
    """Direct all-to-all of S = 1 MB on 4 ranks, 2 per scale-up domain, NVLink 100 GB/s and NIC 200 GB/s per GPU:
    the NVLink leg moves S·(r − 1)/n = S/4 at 100 GB/s and the NIC leg S·(n − r)/n = S/2 at 200 GB/s, both
    2.5 µs (each quotient the correctly rounded 2.5e-6, so they compare equal). A tie goes to the scale-out tier,
    as PathModel.ring_tier sends a tie (up_bw == r·nic_bw) to scale_out. With the NIC 1 % faster the NVLink leg is
    the slower one and the tier is scale_up; 1 % slower, scale_out — the tie sits between the two."""
    def pm(nic_bw: float) -> PathModel:
        return PathModel(size=4, ranks_per_domain=2, domains=2, up_bw=100e9, nic_bw=nic_bw, alpha_up_s=1e-6,
                         alpha_out_s=5e-6)

    S = 1e6
    assert S * 1 / 4 / 100e9 == S * 2 / 4 / 200e9 == 2.5e-6
    tie = direct("all_to_all", S, pm(200e9))
    assert tie.bottleneck_tier == "scale_out"
    assert direct("all_to_all", S, pm(202e9)).bottleneck_tier == "scale_up"
    assert direct("all_to_all", S, pm(198e9)).bottleneck_tier == "scale_out"
    # the tie's time: latency plus the common 2.5 µs leg
    assert tie.time_s == pytest.approx(tie.latency_s + 2.5e-6, rel=1e-12)


def test_the_workspace_of_an_all_moe_model_is_sized_by_its_routed_expert_rows():
    """Mixtral 8x7B (32 layers, every one MoE: 8 experts, top-2, expert FFN 14,336, hidden 4,096, vocabulary
    32,000) served in bf16 on one GPU (tp = ep = dp = 1), 4,096 tokens and 16 sequences: each token goes to 2
    experts, so the experts run on 2·4,096 = 8,192 rows, and the largest op's non-weight traffic is their SwiGLU,
    reading gate and up and writing the product: 3·8,192·14,336·2 B = 704,643,072 B (more than the expert up
    projection's input and output, 8,192·4,096·2 + 8,192·28,672·2 = 536,870,912 B; a dense MLP at 4,096 rows would
    give only half the SwiGLU). Plus the fp32 logits 16·32,000·4 and the residual stream in and out
    4,096·4,096·2·2."""
    m = model("mixtral-8x7b")
    assert (m.moe.top_k, m.moe.expert_ffn, m.hidden, m.vocab) == (2, 14336, 4096, 32000)
    p = ServingPlan()
    assert (p.tp, p.ep, p.dp, p.weight_precision) == (1, 1, 1, "bf16")
    f = Formats.of(p, True, m)
    swiglu = 3 * 8192 * 14336 * 2
    assert swiglu == 704_643_072 > 8192 * 4096 * 2 + 8192 * 28672 * 2
    assert activation_workspace_bytes(m, p, f, 4096, 16) == swiglu + 16 * 32000 * 4 + 4096 * 4096 * 2 * 2
