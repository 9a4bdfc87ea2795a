"""Bytes on every scale-out link over one step, and the busiest link's utilisation.

Each transfer row's scale-out bytes per rank (analysis.traffic) are laid onto the generated fabric
(network.fabric: rail-optimised or fat tree, 64-port switches, the tier's oversubscription at the leaf) as the
flows its groups make — rail-aligned rings for ring collectives (network.contention.ring_pairs), every ordered
pair for all-to-all, neighbours in both directions for pipeline point-to-point (these two leave their node by the
NIC on the destination's rail: NCCL's PXN, network.contention.pxn_relay) — with all groups of the axis at once, as
the core model's contention slowdown assumes. A rank's bytes are shared equally by its flows that leave
its scale-up domain (traffic inside a domain rides NVLink). Link loads add up over the rows; a link's utilisation
is its bytes / (capacity × step time).

The old worst case (every byte leaves the leaf, × oversubscription) could exceed 100 % — impossible for a real
link. Here the utilisation is a fraction: when the raw ratio exceeds 1 the link would need more than the step
(the closed form prices the rows one at a time, the fabric carries them together) and `saturated` says so; the
utilisation is then 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from narrowpath.network.contention import alltoall_pairs, pxn_relay, ring_pairs
from narrowpath.network.fabric import FabricSpec, fabric_for
from narrowpath.network.placement import all_groups
from narrowpath.schedule.step import StepPrediction, sync_group
from narrowpath.spec.plan import Plan

from narrowpath.analysis.traffic import row_tier_bytes

LINK_KINDS = ("NIC", "NIC", "leaf uplink", "leaf downlink", "spine uplink", "spine downlink")
"""Kind of each block of FatTree.capacities(): endpoint up, endpoint down, leaf up/down trunks, pod up/down."""


@dataclass(frozen=True, slots=True)
class BusiestLink:
    kind: str
    """`NIC`, `leaf uplink`, `leaf downlink`, `spine uplink` or `spine downlink` ('' when nothing crosses)."""
    bytes_per_step: float
    capacity_bytes_per_s: float
    utilisation: float
    """bytes / (capacity × step), capped at 1."""
    saturated: bool
    """The raw ratio exceeds 1: the link needs more than the step for its bytes."""


def group_axis(plan: Plan, axis: str) -> str:
    """Placement group a transfer row of `axis` runs on: schedule.step's own mapping (gradient traffic of a
    context-parallel job on dp × cp, a deduplicating MoE dispatch on the ep group), first/last stage on pp."""
    return "pp" if axis == "pp_ends" else sync_group(axis, plan)


def _chain_pairs(groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pipeline neighbours in both directions (activations forward, gradients backward)."""
    a, b = groups[:, :-1].reshape(-1), groups[:, 1:].reshape(-1)
    return np.concatenate([a, b]), np.concatenate([b, a])


@lru_cache(maxsize=64)
def unit_link_load(plan: Plan, fabric: FabricSpec, axis: str, pattern: str) -> np.ndarray:
    """Bytes on every link when each rank of every group of `axis` sends one byte over the fabric."""
    groups = all_groups(plan, axis)
    if pattern == "all_to_all":
        src, dst = alltoall_pairs(groups)
    elif pattern == "chain":
        src, dst = _chain_pairs(groups)
    else:
        src, dst = ring_pairs(groups, max(1, fabric.scale_up_domain))
    tree = fabric.fat_tree()
    cap = tree.capacities()
    dom = max(1, fabric.scale_up_domain)
    leave = src // dom != dst // dom
    src, dst = src[leave], dst[leave]
    if src.size == 0:
        return np.zeros(cap.size)
    per_src = np.bincount(src, minlength=fabric.num_gpus)
    weight = 1.0 / per_src[src]  # the sending rank's bytes, whichever NIC they leave by
    if pattern != "ring":  # point-to-point sends leave by the NIC on the destination's rail (NCCL's PXN)
        src = pxn_relay(src, dst, fabric.gpus_per_node)
    paths = tree.paths(src, dst)
    return np.bincount(paths.ravel(), weights=np.repeat(weight, paths.shape[1]), minlength=cap.size)


def _pattern(op: str, axis: str) -> str:
    if axis in ("pp", "pp_ends"):
        return "chain"
    return "all_to_all" if op == "all_to_all" else "ring"


def busiest_scale_out_link(pred: StepPrediction) -> BusiestLink:
    """The most loaded scale-out link of the step's fabric (module docstring)."""
    scn = pred.scenario
    fabric = fabric_for(scn.system, scn.num_gpus)
    tree = fabric.fat_tree()
    cap = tree.capacities()
    load = np.zeros(cap.size)
    for t in pred.transfers:
        b = row_tier_bytes(scn, t).get("scale_out", 0.0)
        if b > 0:
            load += b * unit_link_load(scn.plan, fabric, group_axis(scn.plan, t.axis), _pattern(t.op, t.axis))
    finite = np.isfinite(cap) & (cap > 0)
    if not load[finite].any():
        return BusiestLink("", 0.0, float(fabric.gpu_nic_bw), 0.0, False)
    ratio = np.where(finite, load / np.where(finite, cap, 1.0), 0.0)
    i = int(np.argmax(ratio))
    bounds = np.cumsum([tree.num_endpoints, tree.num_endpoints, tree.num_leaves, tree.num_leaves, tree.num_pods,
                        tree.num_pods])
    kind = LINK_KINDS[int(np.searchsorted(bounds, i, side="right"))]
    raw = float(load[i] / (cap[i] * pred.step_time_s))
    return BusiestLink(kind, float(load[i]), float(cap[i]), min(1.0, raw), raw > 1.0)
