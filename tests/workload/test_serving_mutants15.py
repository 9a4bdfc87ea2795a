"""Serving communication checked by hand where mutation testing (benchmarks/mutation.py, seed 15) found it loose:
the NVLink leg of a deduplicating expert-parallel dispatch."""
from __future__ import annotations

import math

import pytest

from narrowpath.catalog import model
from narrowpath.spec.serving import ServingPlan
from narrowpath.workload.serving import Formats
from narrowpath.workload.serving_comm import layer_transfers


def test_a_dedup_dispatch_fans_every_token_copy_out_over_nvlink():
    """DeepSeek-V3 (h 7,168, top-8 of 256 experts, node-limited to 4 nodes) served with tp 2, attention DP 8,
    ep 16 over 2 scale-up domains of 8, dispatch `dedup`, fp8 weights: at T = 10 tokens per rank each GPU takes
    T/tp = 5 of them. Over the fabric a token goes once to each other node holding one of its experts,
    (D − 1)·(1 − (1 − 1/D)^k) = 1 − 0.5^8 = 0.99609375 nodes (below the 3 other nodes routing allows), as an
    all-to-all among the 2 domains whose off-domain share is (D − 1)/D: 5·0.99609375·7168·B·2 bytes, 71,400 B at
    fp8 (1 B) and 142,800 B for the 16-bit combine. Inside the nodes it is delivered over NVLink once to each rank
    holding any of its 8 experts (fifty-second session; before, once per expert): a limit of 4 nodes restricts
    nothing on 2, so 16·(1 − C(240, 8)/C(256, 8)) = 6.523 ranks of 16 experts each: 5·6.523·7168·B, 233,794 B
    dispatched (fp8) and 467,589 B combined (16 bit) — proportional to the hidden size, as every other message of the
    layer (module docstring of workload.serving_comm)."""
    m = model("deepseek-v3")
    p = ServingPlan(tp=2, dp=8, ep=16, ep_dispatch="dedup", weight_precision="fp8", kv_precision="fp8")
    f = Formats.of(p, True, m)
    assert f.W == 1.0
    out = {tr.name: (tr.axis, tr.message_bytes, c) for tr, c in layer_transfers(m, p, f, 10.0, True, 2, 8)}
    assert {tr.phase for tr, _ in layer_transfers(m, p, f, 10.0, True, 2, 8)} == {"fwd"}  # serving runs forward only
    ranks = 16 * (1 - math.prod((240 - i) / (256 - i) for i in range(8)))
    assert ranks == pytest.approx(6.523, abs=1e-3)
    assert out["ep.dispatch_intranode"][::2] == ("ep_intra", 1.0)
    assert out["ep.dispatch_intranode"][1] == pytest.approx(5 * ranks * 7168 * 1, rel=1e-9)
    assert out["ep.combine_intranode"][1] == pytest.approx(5 * ranks * 7168 * 2, rel=1e-9)
    assert out["ep.dispatch_internode"][:2] == ("ep_inter", 71_400.0)
    assert out["ep.combine_internode"][:2] == ("ep_inter", 142_800.0)
    # the NVLink leg scales with the tokens and the hidden size alike: twice the tokens, twice the bytes
    twice = {tr.name: tr.message_bytes for tr, _ in layer_transfers(m, p, f, 20.0, True, 2, 8)}
    assert twice["ep.dispatch_intranode"] == pytest.approx(2 * out["ep.dispatch_intranode"][1], rel=1e-12)
    assert twice["ep.combine_intranode"] == pytest.approx(2 * out["ep.combine_intranode"][1], rel=1e-12)
    # one GPU per domain: no NVLink leg at all
    assert not any(name.endswith("_intranode") for name in
                   (tr.name for tr, _ in layer_transfers(m, p, f, 10.0, True, 2, 1)))
