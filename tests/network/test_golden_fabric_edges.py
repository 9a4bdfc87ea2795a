"""Golden edges of the network stage: flows that cross no finite link, what a bad request names, and how many
nodes share a leaf (NVIDIA DGX SuperPOD rail-optimised scalable units of k/2 nodes on k-port leaves)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from narrowpath.catalog import system
from narrowpath.errors import SpecError
from narrowpath.network.contention import concurrent_slowdown, max_min_rates
from narrowpath.network.fabric import FabricSpec, nodes_per_leaf
from narrowpath.network.placement import all_groups, contiguous_span, group_ranks, span_of
from narrowpath.spec.plan import Plan


def test_flows_on_infinite_links_only_are_unbounded():
    """A flow crossing only the padding link (infinite) has no bottleneck: rate ∞; with a finite flow beside it
    the finite one gets its link (4)."""
    assert list(max_min_rates(np.array([[1], [1]]), np.array([4.0, np.inf]))) == [np.inf, np.inf]
    assert list(max_min_rates(np.array([[0], [1]]), np.array([4.0, np.inf]))) == [4.0, np.inf]


def test_nodes_per_leaf():
    """64-port leaves, 32 down: a rail-optimised scalable unit is 32 nodes (one NIC of each per leaf); on a plain
    fat tree a leaf takes 32 ports / 8 GPUs = 4 nodes; at least one node however large."""
    h100 = system("dgx-h100")
    assert nodes_per_leaf(h100) == 32
    tiers = tuple(dataclasses.replace(t, topology="fat_tree") if t.name == "scale_out" else t for t in h100.tiers)
    flat = dataclasses.replace(h100, tiers=tiers)
    assert nodes_per_leaf(flat) == 4 and nodes_per_leaf(flat, switch_radix=8) == 1


def test_groups_inside_one_node_have_no_fabric_flows():
    """dp 8 on one DGX H100: every ring stays on NVLink, nothing crosses the fabric: slowdown 1."""
    assert concurrent_slowdown(Plan(dp=8, gbs=8), system("dgx-h100"), "dp") == 1.0


def test_generated_fabric_levels_and_oversubscription():
    """A fabric of a system: the leaf oversubscription is the scale-out tier's, the spine non-blocking unless
    asked. Two levels while the leaves fit under one spine layer (≤ k = 64 leaves, Al-Fares et al. 2008), three
    above: 64 leaves → 2 levels, 65 → 3 (pods of 32 leaves)."""
    from narrowpath.network.fabric import FatTree, fabric_for
    assert fabric_for(system("dgx-h100"), 16).oversubscription == (1.0, 1.0)
    assert FabricSpec(num_gpus=8, gpus_per_node=8, scale_up_domain=8, scale_up_bw_bytes_per_s=1e9,
                      nic_bw_bytes_per_s=1e9).oversubscription == (1.0, 1.0)  # non-blocking unless stated
    half = fabric_for(system("dgx-h100"), 16, nics_per_gpu=0.5)  # one 400 Gb/s NIC shared by two GPUs
    assert (half.nics_per_gpu, half.nic_bw_bytes_per_s, half.gpu_nic_bw) == (0.5, 100e9, 50e9)
    assert fabric_for(system("dgx-h100"), 16, spine_oversubscription=3.0).oversubscription == (1.0, 3.0)
    two = FatTree.uniform(num_endpoints=64 * 32, endpoint_bw=1.0, endpoints_per_leaf=32, radix=64)
    three = FatTree.uniform(num_endpoints=65 * 32, endpoint_bw=1.0, endpoints_per_leaf=32, radix=64)
    assert (two.levels, two.num_leaves, three.levels, three.num_pods) == (2, 64, 3, 3)


def test_expert_layout_divisibility_is_exact():
    """ep 3 divides 6 ranks: accepted, groups {0, 1, 2} and {3, 4, 5}."""
    assert [list(g) for g in all_groups(Plan(dp=6, ep=3, etp=1, gbs=6), "ep")] == [[0, 1, 2], [3, 4, 5]]


def test_bad_requests_name_their_field():
    plan = Plan(dp=8, gbs=8)
    with pytest.raises(SpecError, match=r"^contention\.pattern: must be ring or all_to_all, got 'tree'"):
        concurrent_slowdown(plan, system("dgx-h100"), "dp", pattern="tree")
    with pytest.raises(SpecError, match=r"^fabric\.topology: unknown 'torus'"):
        FabricSpec(num_gpus=8, gpus_per_node=8, scale_up_domain=8, scale_up_bw_bytes_per_s=1e9,
                   nic_bw_bytes_per_s=1e9, topology="torus")
    with pytest.raises(SpecError, match=r"^axis: unknown parallel axis 'xp'; known: tp, cp, dp, pp, dpcp"):
        group_ranks(plan, "xp")
    with pytest.raises(SpecError, match=r"^contention\.fabric: fabric has 16 GPUs, plan needs 8"):
        from narrowpath.network.fabric import fabric_for
        concurrent_slowdown(plan, system("dgx-h100"), "dp", fabric=fabric_for(system("dgx-h100"), 16))
    with pytest.raises(SpecError, match=r"^group: size, ranks_per_domain and domains must be >= 1, got 0, 1, 1"):
        span_of(0, ranks_per_domain=1, domains=1)
    with pytest.raises(SpecError, match=r"^gpus: must be >= 1, got 0"):
        contiguous_span(0, system("dgx-h100"))
