"""Golden expert layout (Megatron-Core parallel_state, expert RankGenerator 'tp-ep-dp'): the tp·cp·dp ranks of a
pipeline stage re-split as etp (fastest) × ep × edp, enumerated by hand, and the spans of those groups on DGX H100
nodes (8 GPUs per NVLink domain)."""
from __future__ import annotations

import pytest

from narrowpath.catalog import system
from narrowpath.errors import SpecError
from narrowpath.network.placement import all_groups, axis_strides, group_ranks, group_span
from narrowpath.spec.plan import Plan

H100 = system("dgx-h100")


def test_etp1_ep4_on_tp2_dp8():
    """tp 2, dp 8, etp 1, ep 4 (16 ranks): a rank's index in the stage is tp + 2·dp = its rank, split as
    ep = idx mod 4, edp = idx div 4: the expert-parallel group of rank 0 is {0, 1, 2, 3} (it spans both tp ranks),
    its expert-data-parallel group {0, 4, 8, 12}; 4 ep groups and 4 edp groups."""
    plan = Plan(tp=2, dp=8, ep=4, etp=1, gbs=8)
    assert list(group_ranks(plan, "ep")) == [0, 1, 2, 3]
    assert list(group_ranks(plan, "edp")) == [0, 4, 8, 12]
    assert [list(g) for g in all_groups(plan, "ep")][1] == [4, 5, 6, 7]
    assert all_groups(plan, "edp").shape == (4, 4) and all_groups(plan, "etp").shape == (16, 1)


def test_etp2_ep4_on_tp2_dp8():
    """etp 2: etp = idx mod 2, ep = (idx div 2) mod 4, edp = idx div 8. Rank 0's expert-tp group {0, 1}, its ep
    group {0, 2, 4, 6}, its edp group {0, 8}."""
    plan = Plan(tp=2, dp=8, ep=4, etp=2, gbs=8)
    assert list(group_ranks(plan, "etp")) == [0, 1]
    assert list(group_ranks(plan, "ep")) == [0, 2, 4, 6]
    assert list(group_ranks(plan, "edp")) == [0, 8]


def test_expert_groups_stay_inside_their_pipeline_stage():
    """pp 2 with pp slowest: stage 1 is ranks 16–31; its ep groups are made of its own ranks:
    {16, 17, 18, 19} … (etp 1, ep 4)."""
    plan = Plan(tp=2, dp=8, pp=2, ep=4, etp=1, gbs=8)
    groups = [list(g) for g in all_groups(plan, "ep")]
    assert [16, 17, 18, 19] in groups and all(max(g) < 16 or min(g) >= 16 for g in groups)


def test_expert_group_spans_on_dgx_h100():
    """etp 2, ep 4 on tp 2 × dp 8: the ep group {0, 2, 4, 6} has 4 members in one node, stride 2; the edp group
    {0, 8} has one member in each of 2 nodes (a sparse group: network only); node 0 holds 4 of the 8 etp groups."""
    plan = Plan(tp=2, dp=8, ep=4, etp=2, gbs=8)
    ep = group_span(plan, H100, "ep")
    assert (ep.size, ep.stride, ep.ranks_per_domain, ep.domains, ep.tiers) == (4, 2, 4, 1, ("scale_up",))
    edp = group_span(plan, H100, "edp")
    assert (edp.size, edp.stride, edp.ranks_per_domain, edp.domains, edp.sparse) == (2, 8, 1, 2, True)
    assert group_span(plan, H100, "etp").groups_per_node == 4
    assert group_span(plan, H100, "ep").num_groups == 4


def test_dense_strides_and_the_dpcp_group():
    """Placement tp, cp, dp, pp (fastest first) with tp 2, cp 2, dp 2, pp 2: strides 1, 2, 4, 8; the gradient
    group of a context-parallel job is cp × dp: {0, 2, 4, 6}."""
    plan = Plan(tp=2, cp=2, dp=2, pp=2, gbs=2)
    assert axis_strides(plan) == {"tp": 1, "cp": 2, "dp": 4, "pp": 8}
    assert list(group_ranks(plan, "dpcp")) == [0, 2, 4, 6]
    assert list(group_ranks(plan, "pp")) == [0, 8]


def test_expert_layout_must_divide_the_stage():
    """ep·etp must divide tp·cp·dp (Megatron-Core asserts it): ep 3 on 16 ranks is refused, naming ep."""
    with pytest.raises(SpecError, match=r"^plan\.ep: ep·etp = 3·1 must divide tp·cp·dp = 16$"):
        group_ranks(Plan(tp=2, dp=8, ep=3, etp=1, gbs=8), "ep")
