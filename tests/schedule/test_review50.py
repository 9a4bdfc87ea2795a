"""The fiftieth session's review of its own changes: contention reprices the collective on contended NICs (a ring
NVLink bounds is not slowed by rails that still outrun it), windowed KV in the steady state and the fit check."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import model, system
from narrowpath.cost.collectives import collective_time
from narrowpath.spec.plan import Plan
from narrowpath.spec.scenario import Scenario
from narrowpath.schedule.step import _price, _span
from narrowpath.workload.items import Transfer


def _nvl72_fat_tree(ratio: float):
    s = system("gb200-nvl72")
    return dataclasses.replace(s, tiers=tuple(dataclasses.replace(t, oversubscription=ratio, topology="fat_tree")
                                              if t.name == "scale_out" else t for t in s.tiers))


@pytest.mark.parametrize("ratio, nvlink_bound", [(2.0, True), (4.0, True), (8.0, False)])
def test_contention_slows_a_ring_only_where_the_rails_fall_below_nvlink(ratio, nvlink_bound):
    """DP 256 over four 64-GPU NVL72 segments on a fat tree: each domain's ring crosses on its 64 members' NICs,
    64 × 47 GB/s attained = 3,008 GB/s, well above the 738 GB/s of NVLink that bounds it. Contended at 2:1 each
    NIC keeps half (1,504 GB/s) and at 4:1 a quarter (752): still above NVLink, so a 1 GB all-reduce takes what it
    takes alone. At 8:1 (376 GB/s) the rails bound it: the bandwidth term grows by 738/376 ≈ 1.96. Stretching the
    whole bandwidth term by the rails' factor read 2× and 4× slower at 2:1 and 4:1."""
    sysm = _nvl72_fat_tree(ratio)
    scn = Scenario(system=sysm, model=model("llama3-8b"), plan=Plan(tp=1, dp=256, gbs=256), num_gpus=256)
    from narrowpath.catalog import calibration_for
    cal = calibration_for(sysm.device.name)
    tr = Transfer("dp.grads", "all_reduce", "dp", 1e9, "step", False)
    spans: dict = {}
    alone = collective_time("all_reduce", 1e9, _span(scn, "dp", spans), sysm, cal)
    got = _price(tr, scn, cal, spans, {})
    if nvlink_bound:
        assert got.time_s == pytest.approx(alone.time_s)
    else:
        bw_alone = alone.time_s - alone.latency_s
        assert got.time_s - got.latency_s == pytest.approx(bw_alone * 738 / 376, rel=0.03)
        assert got.algorithm == alone.algorithm


def test_the_steady_decode_batch_counts_a_windowed_sequence_as_the_lanes_do():
    """GPT-OSS (half its KV bytes on 128-token windows), 16-token blocks, a lane of 92,649 blocks, isl 8,192, osl
    1,024 on demand: a sequence averages 8,192 + 512 = 8,704 tokens, 0.5 · 8,704 + 0.5 · 144 = 4,424 tokens' worth,
    277 blocks: 92,649 // 277 = 334 sequences (170 counted on every layer at full context)."""
    from types import SimpleNamespace as NS

    from narrowpath.cost.serving_memory import kv_footprint_tokens
    from narrowpath.schedule.serving_steady import decode_batch
    lim = NS(memory=NS(footprint=lambda n: kv_footprint_tokens(n, 0.5, 144)), lane_blocks=lambda pp: 92_649,
             block_tokens=16)
    assert decode_batch(lim, 1, 10_000, 8192, 1024, "on-demand") == 334
    full = NS(memory=NS(footprint=lambda n: n), lane_blocks=lambda pp: 92_649, block_tokens=16)
    assert decode_batch(full, 1, 10_000, 8192, 1024, "on-demand") == 170
