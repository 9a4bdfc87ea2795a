"""Placement: groups of each parallel axis on ranks, and the tiers, nodes and domains they span."""
from __future__ import annotations

import numpy as np
import pytest

from narrowpath.catalog import system
from narrowpath.network.placement import GroupSpan, all_groups, contiguous_span, group_ranks, group_span
from narrowpath.spec.plan import Plan


@pytest.fixture(scope="module")
def h100():
    return system("dgx-h100")


def test_megatron_order_puts_tp_inside_a_node_and_dp_across(h100):
    """tp fastest: a TP=8 group fills one NVLink domain; its DP group has one rank per node (sparse)."""
    plan = Plan(tp=8, dp=16, pp=4, gbs=64)
    tp = group_span(plan, h100, "tp")
    assert (tp.size, tp.domains, tp.ranks_per_node, tp.tiers) == (8, 1, 8, ("scale_up",))
    dp = group_span(plan, h100, "dp")
    assert (dp.size, dp.stride, dp.ranks_per_node, dp.nodes, dp.tiers) == (16, 8, 1, 16, ("scale_out",))
    assert dp.sparse and dp.num_groups == 32 and dp.groups_per_node == 8


def test_expert_layout_refactors_the_stage_ranks(h100):
    """Megatron-Core: the tp·cp·dp ranks of a stage are re-split as etp (fastest), ep, edp for the experts; the
    dense dp group is unchanged by expert parallelism."""
    plan = Plan(tp=2, dp=8, ep=2, pp=2, gbs=64, placement=("tp", "dp", "cp", "ep", "pp"))
    assert list(group_ranks(plan, "dp")) == [0, 2, 4, 6, 8, 10, 12, 14]
    assert list(group_ranks(plan, "ep")) == [0, 2]  # etp = tp = 2: the next expert shard is 2 ranks on
    assert list(group_ranks(plan, "edp")) == [0, 4, 8, 12]
    whole = Plan(tp=2, dp=16, ep=32, etp=1, gbs=64)  # Qwen3-235B on H100: ep spans tp and dp (etp 1)
    assert list(group_ranks(whole, "ep")) == list(range(32))
    assert group_ranks(whole, "edp").size == 1
    dp = group_span(plan, h100, "dp")
    assert (dp.ranks_per_node, dp.nodes, dp.tiers) == (4, 2, ("scale_up", "scale_out"))


@pytest.mark.parametrize("order", [("tp", "cp", "ep", "dp", "pp"), ("pp", "dp", "ep", "cp", "tp"),
                                   ("dp", "tp", "pp", "ep", "cp")])
@pytest.mark.parametrize("axis", ["tp", "cp", "ep", "dp", "pp", "edp", "dpcp"])
def test_groups_of_an_axis_partition_the_ranks(order, axis):
    plan = Plan(tp=2, cp=2, dp=4, ep=2, pp=2, gbs=8, placement=order)
    groups = all_groups(plan, axis)
    assert np.array_equal(np.sort(groups.reshape(-1)), np.arange(plan.num_gpus))


def test_configurable_order_moves_a_group_across_nodes(h100):
    """With dp fastest, the TP group becomes strided and leaves the node."""
    plan = Plan(tp=8, dp=16, gbs=16, placement=("dp", "tp", "cp", "ep", "pp"))
    tp = group_span(plan, h100, "tp")
    assert tp.stride == 16 and tp.nodes == 8 and tp.crosses_scale_out


def test_nvl72_domain_spans_several_nodes():
    """GB200 NVL72: 4 GPUs per tray, 72 per NVLink domain — a 64-rank group stays on NVLink."""
    nvl = system("gb200-nvl72")
    plan = Plan(tp=4, dp=16, gbs=16)
    dp = group_span(plan, nvl, "dp")
    assert dp.nodes == 16 and dp.domains == 1 and dp.tiers == ("scale_up",)


def test_groupspan_keeps_its_original_fields():
    s = GroupSpan("dp", 16, 8, 1, 16, 1, 16)
    assert s.crosses_scale_out and s.tiers == ("scale_out",) and s.num_groups == 1


def test_contiguous_span_of_whole_nodes(h100):
    s = contiguous_span(64, h100)
    assert (s.ranks_per_domain, s.domains, s.ranks_per_node, s.nodes) == (8, 8, 8, 8)


def test_a_job_larger_than_a_rack_gets_64_gpus_of_each():
    """NVL72 racks under Slurm's block scheduling: a job of one rack or less fills it as ranks come; a larger one is
    placed 16 trays (64 GPUs) a rack (System.segment_gpus). A system without segments is all domain."""
    nvl = system("gb200-nvl72")
    assert nvl.segment_gpus == 64 and system("gb300-nvl72").segment_gpus == 64
    assert [nvl.job_domain(n) for n in (4, 64, 72, 76, 128, 256)] == [72, 72, 72, 64, 64, 64]
    h100 = system("dgx-h100")
    assert h100.segment_gpus == 0 and h100.job_domain(1024) == 8


def test_a_segment_is_whole_nodes():
    import dataclasses

    from narrowpath.errors import SpecError
    with pytest.raises(SpecError, match="segment_gpus") as e:
        dataclasses.replace(system("gb200-nvl72"), segment_gpus=66)
    assert "\n" not in str(e.value)


def test_the_slowest_group_prices_the_axis():
    """DeepSeek-V3 on 256 GB200 (tp 1, pp 4, ep 64, dp 64): ep groups are ranks 0-63, 64-127, ... With 72 ranks a
    rack, group 0 lies in rack 0, but group 1 holds 8 ranks in rack 0 (64-71) and 56 in rack 1, group 2 16 and 48,
    group 3 24 and 40: their all-to-alls cross racks, and the step waits for the slowest. The span keeps group 0's
    shape and carries the others; a collective costs what it costs on the slowest (here group 1's: fewest in one
    rack). Placed 64 a rack every group is one rack's, with no other shape."""
    import dataclasses

    from narrowpath.catalog import calibration_for
    from narrowpath.cost.collectives import collective_time
    plan = Plan(tp=1, pp=4, dp=64, ep=64, gbs=256)
    packed = dataclasses.replace(system("gb200-nvl72"), segment_gpus=0)
    ep = group_span(plan, packed, "ep")
    assert (ep.domains, ep.ranks_per_domain, ep.nodes, ep.ranks_per_node) == (1, 64, 16, 4)
    assert sorted((o.domains, o.ranks_per_domain) for o in ep.others) == [(2, 8), (2, 16), (2, 24)]
    cal = calibration_for("GB200")
    alone = {(o.domains, o.ranks_per_domain): collective_time("all_to_all", 470e6, o, packed, cal).time_s
             for o in (dataclasses.replace(ep, others=()),) + ep.others}
    got = collective_time("all_to_all", 470e6, ep, packed, cal).time_s
    assert got == max(alone.values()) == alone[(2, 8)] > 5 * alone[(1, 64)]
    ep = group_span(plan, system("gb200-nvl72"), "ep")
    assert (ep.domains, ep.ranks_per_domain, ep.nodes, ep.ranks_per_node, ep.others) == (1, 64, 16, 4, ())


@pytest.mark.parametrize("order", [("tp", "cp", "ep", "dp", "pp"), ("pp", "dp", "ep", "cp", "tp")])
@pytest.mark.parametrize("block", [1, 3, 4, 8, 72])
def test_every_group_is_measured_as_one_would_be(order, block):
    """The vectorised count over all groups (_per_block_rows) is the per-group count, group by group."""
    from narrowpath.network.placement import _per_block_rows

    def _per_block(ranks, block):  # (fewest members in one block, blocks touched, most), one group at a time
        _, counts = np.unique(ranks // block, return_counts=True)
        return int(counts.min()), int(counts.size), int(counts.max())
    plan = Plan(tp=2, cp=3, dp=4, ep=2, pp=5, gbs=40, placement=order)
    for axis in ("tp", "cp", "dp", "pp", "ep", "edp", "dpcp"):
        groups = all_groups(plan, axis)
        per, n, most = _per_block_rows(groups, block)
        assert [(int(a), int(b), int(c)) for a, b, c in zip(per, n, most)] == [_per_block(g, block) for g in groups]


def test_the_contention_fabric_places_a_large_job_64_a_rack():
    """fabric_for lays the job out as the spans do (System.job_domain): a 128-GPU job on NVL72 racks leaves a rack
    at rank 64, a 64-GPU one never leaves its rack."""
    from narrowpath.network.fabric import fabric_for
    nvl = system("gb200-nvl72")
    assert fabric_for(nvl, 128).scale_up_domain == 64 and fabric_for(nvl, 64).scale_up_domain == 72
    assert fabric_for(system("dgx-h100"), 1024).scale_up_domain == 8


def test_tp_stays_inside_the_jobs_share_of_a_rack():
    """A job larger than a rack gets 64 GPUs of each: tp 72 would straddle two of them unevenly (refused, one line
    naming plan.tp), and the search tries tp up to 64 there; a job of one rack may take all 72."""
    from narrowpath.catalog import model
    from narrowpath.errors import SpecError
    from narrowpath.search import SearchSpace
    from narrowpath.search.space import knob_values
    from narrowpath.spec import Scenario
    nvl, m = system("gb200-nvl72"), model("llama3-8b")
    m = __import__("dataclasses").replace(m, heads=72, kv_heads=72, ffn=72 * 256)
    Scenario(system=nvl, model=m, plan=Plan(tp=72, gbs=1), num_gpus=72)
    with pytest.raises(SpecError, match="tp 72 spans the job's scale-up domains of 64 GPUs unevenly") as e:
        Scenario(system=nvl, model=m, plan=Plan(tp=72, dp=2, gbs=2), num_gpus=144)
    assert e.value.field == "plan.tp"
    base = Plan(tp=8, dp=18, gbs=144)
    assert max(knob_values(SearchSpace(m, nvl, 144, 144, base))["tp"]) == 48
    assert max(knob_values(SearchSpace(m, nvl, 72, 72, Plan(tp=8, dp=9, gbs=72)))["tp"]) == 72
