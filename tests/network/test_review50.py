"""Contention on an oversubscribed fabric measured against what the collective cost assumes (one group at its NICs'
rate), and NCCL's rings laid per scale-up domain (an NVL72 rack holds many nodes): the fiftieth session's fixes."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from narrowpath.catalog import system
from narrowpath.network.contention import concurrent_slowdown, ring_pairs
from narrowpath.network.fabric import fabric_for
from narrowpath.spec.plan import Plan


@pytest.mark.parametrize("ratio, expected", [(1.0, 1.0), (4.0, 1.0), (8.0, 2.0), (16.0, 4.0)])
def test_a_single_dp_group_is_slowed_by_its_own_oversubscribed_uplinks(ratio, expected):
    """DP 256 over 32 H100 nodes (tp 1: one group) on a fat tree of 64-port leaves, 32 GPUs = 4 nodes a leaf.
    NCCL's rail-aligned rings: member j of a node sends to member j of the next node, so at each leaf's last node
    8 flows (one per rail) leave through the leaf uplink of 32 × B / ratio. They need 8B: at 8:1 (4B) each gets
    B/2 — 2× slower than the NIC rate `cost.collectives` prices; at 16:1, 4×; at 4:1 (8B) none. The old
    reference, the same group alone on the same oversubscribed fabric, read 1.0 at every ratio."""
    plan = Plan(tp=1, dp=256, gbs=256)
    sys_ = system("dgx-h100")
    fab = dataclasses.replace(fabric_for(sys_, 256), topology="fat_tree", oversubscription=(ratio, 1.0),
                              nic_bw_bytes_per_s=50e9)
    assert concurrent_slowdown(plan, sys_, "dp", fabric=fab) == pytest.approx(expected)


def test_rings_are_laid_per_scale_up_domain():
    """A DP group of the first GPU of every 4-GPU tray over two 64-GPU NVL72 segments (GPUs 0, 4, …, 124): 16
    members a domain. Rail-aligned per domain, member j of segment 0 sends to member j of segment 1 and back —
    32 flows leaving their domain, one per member's NIC (`network.paths` prices the domain's 16 NICs together).
    Laid per node (one member a tray), the ring would leave each rack once: 2 flows."""
    row = np.arange(0, 128, 4)[None, :]
    src, dst = ring_pairs(row, 64)
    assert sorted(zip(src.tolist(), dst.tolist())) == sorted(
        [(4 * j, 64 + 4 * j) for j in range(16)] + [(64 + 4 * j, 4 * j) for j in range(16)])
    src4, dst4 = ring_pairs(row, 4)
    assert int(((src4 // 64) != (dst4 // 64)).sum()) == 2


def test_nvl72_dp_rings_share_a_leaf_uplink_member_by_member():
    """TP 4 (a tray) × DP 64 on 256 GB200 in 64-GPU segments of NVL72 racks, fat tree, 64-port leaves (32 GPUs a
    leaf: 8 trays), 4:1 leaf uplinks of 32 × B / 4 = 8B. The 4 DP groups (one per tray rank) each have 16 members
    in each of the 4 segments; per domain each member sends to its twin in the next segment. A segment's 64 GPUs
    fill 2 leaves; each leaf holds 8 trays × 4 ranks = 32 members, all 4 groups, every one sending across: 32
    flows on an 8B uplink, B/4 each, against one group's 8 members of that leaf alone on a non-blocking tree at
    B: 4×. Laid per node, each group would leave a segment by one flow and the factor read 1."""
    s = system("gb200-nvl72")
    s = dataclasses.replace(s, tiers=tuple(dataclasses.replace(t, oversubscription=4.0, topology="fat_tree")
                                           if t.name == "scale_out" else t for t in s.tiers))
    plan = Plan(tp=4, dp=64, gbs=64)
    fab = fabric_for(s, 256)
    assert fab.scale_up_domain == 64 and fab.gpus_per_node == 4
    assert concurrent_slowdown(plan, s, "dp", fabric=fab) == pytest.approx(4.0)
