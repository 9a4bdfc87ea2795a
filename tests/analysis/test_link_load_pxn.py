"""Scale-out link loads of point-to-point traffic leave by the NIC on the destination's rail (NCCL's PXN)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from narrowpath.analysis.link_load import unit_link_load
from narrowpath.catalog import system
from narrowpath.network.fabric import fabric_for
from narrowpath.spec.plan import Plan


def _blocks(fab, load):
    tree = fab.fat_tree()
    e, l_ = tree.num_endpoints, tree.num_leaves
    return load[:e], load[e:2 * e], load[2 * e:2 * e + l_], load[2 * e + l_:2 * e + 2 * l_]


def test_all_to_all_bytes_stay_on_the_rail_leaves():
    """EP 16 on two H100 nodes (one scalable unit, rail-optimised): each rank sends one byte, shared by its 8 peers
    in the other node (1/8 each). Relayed to the GPU on the destination's rail, every byte stays on that rail's
    leaf: no leaf uplink carries any, and each NIC sends 8 × 1/8 = 1 byte (its node's 8 ranks' shares for its
    rail) and receives 1. Sent from each GPU's own NIC, 7/8 of a rank's byte would cross rails on the uplinks."""
    plan = Plan(tp=1, dp=16, ep=16, gbs=16)
    fab = fabric_for(system("dgx-h100"), 16)
    nic_up, nic_down, leaf_up, leaf_down = _blocks(fab, unit_link_load(plan, fab, "ep", "all_to_all"))
    assert nic_up == pytest.approx(np.ones(16))
    assert nic_down == pytest.approx(np.ones(16))
    assert not leaf_up.any() and not leaf_down.any()


def test_rings_keep_their_own_rails():
    """DP rings are laid rail-aligned by NCCL (no relay): 8 rings of 2 nodes, one per rail, never leave a leaf."""
    plan = Plan(tp=8, dp=2, gbs=2)
    fab = dataclasses.replace(fabric_for(system("dgx-h100"), 16), oversubscription=(2.0, 1.0))
    nic_up, _, leaf_up, _ = _blocks(fab, unit_link_load(plan, fab, "dp", "ring"))
    assert nic_up == pytest.approx(np.ones(16))
    assert not leaf_up.any()


def test_nvl72_rings_load_every_members_nic():
    """TP 4 × DP 32 on 128 GB200 in two 64-GPU NVL72 segments: each of the 4 DP groups has 16 members a segment,
    and NCCL's rings cross between the segments member by member (`network.paths` prices the 16 NICs together),
    so each of the 128 ranks sends its one byte out of its own NIC: 128 bytes on the NIC uplinks, one each. Laid
    per 4-GPU tray, a group left its segment by one flow: 8 of the 128 ranks carried the bytes, 16× too few."""
    plan = Plan(tp=4, dp=32, gbs=32)
    fab = fabric_for(system("gb200-nvl72"), 128)
    assert fab.scale_up_domain == 64
    nic_up, nic_down, _, _ = _blocks(fab, unit_link_load(plan, fab, "dp", "ring"))
    assert nic_up == pytest.approx(np.ones(128))
    assert nic_down == pytest.approx(np.ones(128))


def test_rings_over_unequal_domains_cross_on_the_fewest_members_rails():
    """DP 144 on GB200 in 64 + 64 + 16 segments: the 16-member segment bounds the rings (network.paths prices
    r = 16 rails), so 16 members of each segment carry one ring each: 48 ranks send their byte out of their NIC
    (laid as one plain ring, the group left each segment by one flow: 3 bytes)."""
    plan = Plan(tp=1, dp=144, gbs=144)
    fab = fabric_for(system("gb200-nvl72"), 144)
    nic_up, _, _, _ = _blocks(fab, unit_link_load(plan, fab, "dp", "ring"))
    assert nic_up.sum() == pytest.approx(48.0) and set(np.unique(nic_up).tolist()) == {0.0, 1.0}
