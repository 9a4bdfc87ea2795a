"""Max-min fair sharing: hand-checked small cases, oversubscription, concurrent groups, scale."""
from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from narrowpath.catalog import system
from narrowpath.network.contention import alltoall_pairs, concurrent_slowdown, max_min_rates, pxn_relay, ring_pairs
from narrowpath.network.placement import all_groups
from narrowpath.network.fabric import FatTree, fabric_for
from narrowpath.spec.plan import Plan

INF = np.inf


def test_two_flows_on_one_link_split_it_evenly():
    rates = max_min_rates(np.array([[0], [0]]), np.array([10.0]))
    assert list(rates) == [5.0, 5.0]


def test_textbook_parking_lot():
    """Links L0 (cap 10) and L1 (cap 4); A uses L0, B uses L0+L1, C uses L1. Max-min: B = C = 2, A = 8
    (Bertsekas & Gallager §6.5.2)."""
    pad = 2
    paths = np.array([[0, pad], [0, 1], [1, pad]])
    rates = max_min_rates(paths, np.array([10.0, 4.0, INF]))
    assert rates == pytest.approx([8.0, 2.0, 2.0])


def test_allocation_is_feasible_and_every_flow_has_a_bottleneck():
    """No link over capacity; each flow crosses a saturated link where it has the largest rate."""
    rng = np.random.default_rng(7)
    cap = np.append(rng.uniform(1, 10, 12), INF)
    paths = rng.integers(0, 12, size=(40, 3))
    rates = max_min_rates(paths, cap)
    load = np.zeros(cap.size)
    np.add.at(load, paths, np.repeat(rates[:, None], 3, axis=1) * (1 + 0 * paths))
    # load counts a flow once per appearance on a link (a repeated link index is crossed twice)
    assert (load[:12] <= cap[:12] * (1 + 1e-9)).all()
    saturated = load[:12] >= cap[:12] * (1 - 1e-9)
    for f in range(40):
        links = [l for l in set(paths[f]) if saturated[l]]
        assert links, f"flow {f} has no saturated link"
        assert any(rates[f] >= rates[[g for g in range(40) if l in paths[g]]].max() * (1 - 1e-9) for l in links)


def test_weights_count_identical_flows():
    """A bundle of 3 flows and a single flow on one link of 8: each of the 4 flows gets 2."""
    rates = max_min_rates(np.array([[0], [0]]), np.array([8.0]), weights=np.array([3.0, 1.0]))
    assert rates == pytest.approx([2.0, 2.0])


@pytest.mark.parametrize("ratio", [1.0, 2.0, 3.0])
def test_oversubscription_slows_cross_spine_traffic_by_its_ratio(ratio):
    """Every endpoint of leaf 0 sends to leaf 1 and back: the leaf uplink gives each flow 1/ratio of its NIC."""
    tree = FatTree.uniform(num_endpoints=64, endpoint_bw=50e9, endpoints_per_leaf=32, radix=64,
                           oversubscription=(ratio, 1.0))
    src = np.arange(64)
    dst = (src + 32) % 64
    rates = max_min_rates(tree.paths(src, dst), tree.capacities())
    assert rates == pytest.approx(np.full(64, 50e9 / ratio))


def test_intra_leaf_traffic_ignores_oversubscription():
    tree = FatTree.uniform(num_endpoints=64, endpoint_bw=50e9, endpoints_per_leaf=32, radix=64,
                           oversubscription=(4.0, 1.0))
    src = np.arange(32)
    rates = max_min_rates(tree.paths(src, (src + 1) % 32), tree.capacities())
    assert rates == pytest.approx(np.full(32, 50e9))


def test_pairs_helpers():
    src, dst = alltoall_pairs(np.array([[0, 1, 2]]))
    assert sorted(zip(src, dst)) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    s, d = ring_pairs(np.array([[0, 1, 8, 9]]), domain_gpus=8)  # 2 members on each of 2 nodes: 2 rails
    assert sorted(zip(s, d)) == [(0, 8), (1, 9), (8, 0), (9, 1)]


def test_dp_rings_on_rails_do_not_collide():
    """TP=8 in a node, DP across nodes: each DP ring owns a rail; no slowdown on a non-blocking fabric."""
    plan = Plan(tp=8, dp=64, gbs=64)
    assert concurrent_slowdown(plan, system("dgx-h100"), "dp") == pytest.approx(1.0)


def test_ep_all_to_all_across_an_oversubscribed_spine_slows_down():
    """EP=64 all-to-all of every expert group on a 2:1 fat tree: close to the 2× of the uplinks."""
    plan = Plan(tp=8, dp=64, ep=64, gbs=64)
    sys_ = system("dgx-h100")
    fab = dataclasses.replace(fabric_for(sys_, plan.num_gpus), topology="fat_tree", oversubscription=(2.0, 1.0))
    f = concurrent_slowdown(plan, sys_, "ep", fabric=fab)
    assert 1.7 < f <= 2.0
    fab1 = dataclasses.replace(fab, oversubscription=(1.0, 1.0))
    assert concurrent_slowdown(plan, sys_, "ep", fabric=fab1) == pytest.approx(1.0)


def test_large_all_to_all_solves_quickly():
    """A 512-node all-to-all (≈ 262k flows) on a 3-level 2:1 tree solves (well under a second: measured by
    benchmarks/bench_contention.py; here only a guard against a quadratic path, 20 s)."""
    tree = FatTree.uniform(num_endpoints=512, endpoint_bw=400e9, endpoints_per_leaf=4, radix=64,
                           oversubscription=(2.0, 2.0))
    src, dst = alltoall_pairs(np.arange(512)[None, :])
    t0 = time.perf_counter()
    rates = max_min_rates(tree.paths(src, dst), tree.capacities())
    assert time.perf_counter() - t0 < 20.0
    assert rates.min() > 0 and np.isfinite(rates).all()


def test_all_to_all_on_two_oversubscribed_leaves_by_hand():
    """4 endpoints of rate B, 2 per leaf, leaf uplink 2B/2 = B. Each sends to 3 peers: the 4 cross-leaf flows of a
    leaf share its uplink (B/4 each); the intra-leaf flow takes the rest of its NIC, B − 2·B/4 = B/2."""
    B = 100.0
    tree = FatTree.uniform(num_endpoints=4, endpoint_bw=B, endpoints_per_leaf=2, radix=4,
                           oversubscription=(2.0, 1.0))
    src, dst = alltoall_pairs(np.arange(4)[None, :])
    rates = max_min_rates(tree.paths(src, dst), tree.capacities())
    cross = tree.leaf_of[src] != tree.leaf_of[dst]
    assert rates[cross] == pytest.approx(np.full(cross.sum(), B / 4))
    assert rates[~cross] == pytest.approx(np.full((~cross).sum(), B / 2))


@pytest.mark.parametrize("ratio, expected", [(2.0, 1.0), (4.0, 1.0), (8.0, 2.0), (16.0, 4.0)])
def test_dp_rings_of_many_tp_groups_share_a_leaf_uplink(ratio, expected):
    """TP=8 per node, DP=16 over 16 nodes of a fat tree (4 nodes per 64-port leaf): the 8 DP rings (one per rail)
    each send one flow out of every leaf. Uplink = 32 NICs × 50 GB/s / ratio; 8 flows need 8 × 50 GB/s, so
    the rings slow down only once the uplink is below 400 GB/s: ratio/4 for ratio ≥ 4 (by hand), while one DP ring
    alone never does."""
    plan = Plan(tp=8, dp=16, gbs=16)
    sys_ = system("dgx-h100")
    fab = dataclasses.replace(fabric_for(sys_, plan.num_gpus), topology="fat_tree", oversubscription=(ratio, 1.0),
                              nic_bw_bytes_per_s=50e9)
    assert concurrent_slowdown(plan, sys_, "dp", fabric=fab) == pytest.approx(expected)


def test_sparse_group_flows_run_at_nic_rate():
    """One rank per node (DP of TP=8 groups): each ring flow crosses the fabric at its NIC's rate when alone."""
    tree = FatTree.uniform(num_endpoints=16 * 8, endpoint_bw=50e9, endpoints_per_leaf=32, radix=64)
    ring = np.arange(16) * 8  # rank 0 of each of 16 nodes
    rates = max_min_rates(tree.paths(ring, np.roll(ring, -1)), tree.capacities())
    assert rates == pytest.approx(np.full(16, 50e9))


def test_pooling_a_nodes_nics_is_exact_for_all_to_all():
    """The 16k benchmark pools a node's g NICs into one endpoint of g·B (node pairs as flows). For a uniform
    all-to-all on a fat tree this gives exactly the per-GPU answer: per GPU pair rate = node pair rate / g²
    (every GPU of a node is symmetric; intra-node pairs ride NVLink in both). Checked per rank on a 3-level tree."""
    g, nodes, radix, B = 2, 24, 8, 50.0  # 4 ports per leaf = 2 nodes; 12 leaves > radix → 3 levels
    pooled = FatTree.uniform(num_endpoints=nodes, endpoint_bw=g * B, endpoints_per_leaf=radix // 2 // g,
                             radix=radix, oversubscription=(2.0, 2.0))
    per_gpu = FatTree.uniform(num_endpoints=nodes * g, endpoint_bw=B, endpoints_per_leaf=radix // 2, radix=radix,
                              oversubscription=(2.0, 2.0))
    assert pooled.levels == per_gpu.levels == 3
    ns, nd = alltoall_pairs(np.arange(nodes)[None, :])
    node_rates = max_min_rates(pooled.paths(ns, nd), pooled.capacities())
    gs, gd = alltoall_pairs(np.arange(nodes * g)[None, :])
    inter = gs // g != gd // g
    gpu_rates = max_min_rates(per_gpu.paths(gs[inter], gd[inter]), per_gpu.capacities())
    assert gpu_rates.min() == pytest.approx(node_rates.min() / g**2)
    assert gpu_rates.max() == pytest.approx(node_rates.max() / g**2)


def test_pxn_relay_by_hand():
    """NCCL's PXN: a send leaves its node by the GPU there with the destination's local index (8 GPUs a node)."""
    assert pxn_relay(np.array([3, 9, 15]), np.array([13, 2, 23]), 8).tolist() == [5, 10, 15]


def test_all_to_all_stays_on_its_rails_through_pxn():
    """EP 16 over 64 H100 (4 expert groups of 2 nodes) on a rail-optimised fabric with 2:1 leaf uplinks: all 8
    nodes sit under one scalable unit's 8 rail leaves, so each send, relayed over NVLink to the GPU on the
    destination's rail, stays on that rail's leaf and the groups never meet on an uplink: slowdown 1. Sent from
    each GPU's own NIC, 7 of every 8 cross rails through the leaf uplinks (8 NICs × 50 GB/s / 2 = 200 GB/s a leaf)
    and the four groups share them: 1.75 by max-min (6.25 → 3.57 GB/s a flow, computed below without the relay)."""
    plan = Plan(tp=1, dp=64, ep=16, gbs=64)
    sys_ = system("dgx-h100")
    fab = dataclasses.replace(fabric_for(sys_, plan.num_gpus), oversubscription=(2.0, 1.0))
    assert fab.topology == "rail_optimized"
    assert concurrent_slowdown(plan, sys_, "ep", fabric=fab) == pytest.approx(1.0)
    tree, groups = fab.fat_tree(), all_groups(plan, "ep")

    def nic_to_nic(rows):
        src, dst = alltoall_pairs(rows)
        inter = src // 8 != dst // 8
        return max_min_rates(tree.paths(src[inter], dst[inter]), tree.capacities()).min()

    assert nic_to_nic(groups[:1]) == pytest.approx(50e9 / 8)
    assert nic_to_nic(groups[:1]) / nic_to_nic(groups) == pytest.approx(1.75)


def test_traffic_inside_an_nvl72_rack_is_not_a_fabric_flow():
    """Two EP 64 groups on 128 GB200, one per rack (64 GPUs a rack): every exchange rides NVLink, so a 2:1 scale-out
    fabric cannot slow it (counted tray by tray, 4 GPUs a tray, the racks' trays would share the rail leaves' uplinks:
    1.5)."""
    s = system("gb200-nvl72")
    s = dataclasses.replace(s, tiers=tuple(dataclasses.replace(t, oversubscription=2.0) if t.name == "scale_out"
                                           else t for t in s.tiers))
    assert concurrent_slowdown(Plan(tp=1, dp=128, ep=64, gbs=128), s, "ep") == pytest.approx(1.0)
