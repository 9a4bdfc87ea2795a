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
