"""Flow-level contention: max-min fair rates by progressive filling, and the slowdown of concurrent groups.

`max_min_rates` is the classic progressive-filling (water-filling) algorithm (Bertsekas & Gallager, *Data
Networks*, 2nd ed. 1992, §6.5.2): raise every unfrozen flow's rate together until some link saturates, freeze
the flows crossing it, repeat. The result is the unique max-min fair allocation — the steady state that
TCP/RDMA congestion control approximates when flows share links. It runs on numpy arrays: each round is one
`bincount` over the (flows × hops) link matrix, and a symmetric pattern (all-to-all on a fat tree) needs only a
few rounds, because every link of one tier saturates in the same round.

`concurrent_slowdown(plan, system, axis)` is what the schedule calls: all groups of one parallel axis run their
collective at once (the DP rings of every TP/PP group, the EP all-to-alls of every expert group) and share NICs,
leaf uplinks and an oversubscribed spine. It returns t_concurrent / t_alone ≥ 1 for the axis's inter-node
transfer, i.e. the factor by which to divide the scale-out bandwidth `cost.collectives` assumes for one group
alone. `cost.collectives` prices a group at its NICs' rate, so "alone" is one group on the same fabric built
non-blocking: a single group whose own rings cross an oversubscribed uplink is slowed too (one DP group of 256
GPUs on a fat tree at 8:1: 8 rails' flows leave each 32-port leaf through 4 NICs' worth of uplink, 2×).
Traffic between GPUs of one scale-up domain rides NVLink and is not a fabric flow; a point-to-point flow (an
all-to-all's pairs) leaves its node through the NIC on the destination's rail (NCCL's PXN, `pxn_relay`).
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np

from narrowpath.errors import SpecError
from narrowpath.network.fabric import FabricSpec, FatTree, fabric_for
from narrowpath.network.placement import all_groups, layout_plan
from narrowpath.spec.plan import Plan
from narrowpath.spec.system import System

_RTOL = 1e-9


def max_min_rates(paths: np.ndarray, capacity: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair rate of every flow (bytes/s), by progressive filling.

    `paths` (F, K) holds the links each flow crosses, padded with links of infinite capacity; `capacity` (L,)
    bytes/s; `weights` (F,) optional multiplicity (a bundle of identical flows; the rate returned is per flow).
    A flow that crosses only infinite links gets rate inf.
    """
    paths = np.asarray(paths)
    capacity = np.asarray(capacity, dtype=float)
    num_flows, hops = paths.shape
    if num_flows and (paths.min() < 0 or paths.max() >= capacity.size):
        raise SpecError("contention.paths", f"link index out of range [0, {capacity.size})")
    finite = np.isfinite(capacity)
    remaining = np.where(finite, capacity, 0.0)
    rate = np.zeros(num_flows)
    idx = np.arange(num_flows)
    p = paths.astype(np.intp, copy=False)  # bincount and fancy indexing want native ints (3x faster)
    w = None if weights is None else np.asarray(weights, dtype=float)
    while idx.size:
        flat = p.ravel()
        load = np.bincount(flat, minlength=capacity.size) if w is None else \
            np.bincount(flat, weights=np.repeat(w, hops), minlength=capacity.size)
        use = (load > 0) & finite
        if not use.any():
            rate[idx] = np.inf
            break
        inc = np.full(capacity.size, np.inf)
        inc[use] = remaining[use] / load[use]
        delta = inc.min()
        rate[idx] += delta
        remaining[use] -= delta * load[use]
        saturated = inc <= delta * (1.0 + _RTOL)
        frozen = saturated[p].any(axis=1)
        keep = ~frozen
        idx, p = idx[keep], p[keep]
        if w is not None:
            w = w[keep]
    return rate


def alltoall_pairs(groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of every ordered pair of distinct members within each group row of `groups` (G, n)."""
    g, n = groups.shape
    i, j = np.divmod(np.arange(n * n, dtype=np.int32), np.int32(n))
    keep = i != j
    i, j = i[keep], j[keep]
    return groups[:, i].reshape(-1), groups[:, j].reshape(-1)


def ring_pairs(groups: np.ndarray, domain_gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """Inter-domain flows of rail-aligned rings (NCCL): with r members per scale-up domain, member j of a domain
    sends to member j of the next domain of the ring, so each of the r members' NICs carries one ring (an r = 1
    group is a plain ring). `domain_gpus` is the scale-up domain (a node on HGX; an NVL72 rack or its segment
    holds many nodes, and `network.paths` prices its r members' NICs together: r × nic_bw). Domains holding
    unequal numbers of members (144 GPUs in 64 + 64 + 16 segments) ring over the fewest's r rails."""
    srcs, dsts = [], []
    for row in groups:
        row = np.sort(row)
        domains, first, counts = np.unique(row // domain_gpus, return_index=True, return_counts=True)
        if domains.size < 2:
            continue
        # unequal counts: the fewest members a domain holds carry the rings (network.paths prices r = the fewest);
        # the others reach them over the domain's own links
        r = int(counts.min())
        grid = row[first[:, None] + np.arange(r)[None, :]]  # (domain, member within domain)
        srcs.append(grid.reshape(-1))
        dsts.append(np.roll(grid, -1, axis=0).reshape(-1))
    if not srcs:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(srcs), np.concatenate(dsts)


def pxn_relay(src: np.ndarray, dst: np.ndarray, gpus_per_node: int) -> np.ndarray:
    """The GPU whose NIC a send from `src` to `dst` in another node leaves by: the one of `src`'s node with
    `dst`'s local index, reached over NVLink (NCCL's PXN, "PCI × NVLink", since 2.12: NCCL_P2P_PXN_LEVEL's default
    2 "will always use PXN even if the NIC is directly accessible, storing data on the same intermediate GPU as
    other GPUs in the node to maximize aggregation", NCCL env docs; NVIDIA's "Doubling all2all Performance with
    NCCL 2.12": on a rail-optimised fabric the data then never crosses rails). Send/receive only: NCCL's rings and
    trees are laid rail-aligned already (`ring_pairs`)."""
    src = np.asarray(src)
    return src - src % gpus_per_node + np.asarray(dst) % gpus_per_node


def pattern_of(axis: str) -> str:
    """Traffic pattern of an axis's main collective: all-to-all for ep, a ring for the others."""
    return "all_to_all" if axis == "ep" else "ring"


def _min_rate(tree: FatTree, src: np.ndarray, dst: np.ndarray) -> float:
    if src.size == 0:
        return np.inf
    return float(max_min_rates(tree.paths(src, dst), tree.capacities()).min())


@lru_cache(maxsize=128)
def _slowdown(plan: Plan, fabric: FabricSpec, axis: str, pattern: str) -> float:
    groups = all_groups(plan, axis)
    if groups.shape[1] <= 1:
        return 1.0
    per_node, domain = fabric.gpus_per_node, max(1, fabric.scale_up_domain)
    make = (lambda gr: alltoall_pairs(gr)) if pattern == "all_to_all" else (lambda gr: ring_pairs(gr, domain))
    tree = fabric.fat_tree()
    nonblocking = dataclasses.replace(fabric, oversubscription=(1.0, 1.0)).fat_tree()

    def fabric_flows(gr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        src, dst = make(gr)
        leave = src // domain != dst // domain  # inside a scale-up domain (an NVL72 rack too) it rides NVLink
        src, dst = src[leave], dst[leave]
        return (pxn_relay(src, dst, per_node) if pattern == "all_to_all" else src), dst

    alone = _min_rate(nonblocking, *fabric_flows(groups[:1]))  # what cost.collectives prices
    if not np.isfinite(alone):
        return 1.0
    together = _min_rate(tree, *fabric_flows(groups))
    return max(1.0, alone / together)


def concurrent_slowdown(plan: Plan, system: System, axis: str, *, pattern: str | None = None,
                        fabric: FabricSpec | None = None) -> float:
    """Slowdown (≥ 1) of one group's inter-node transfer when every group of `axis` runs it at the same time.

    `pattern` is `ring` or `all_to_all` (default: all-to-all for ep, ring otherwise); `fabric` defaults to
    `fabric_for(system, plan.num_gpus)` (rail-optimised or fat tree from the system's scale-out tier, 64-port
    switches, the tier's oversubscription at the leaf). Divide the scale-out bandwidth of the axis's collective
    by it (or multiply its bandwidth term). Memoised per (plan, fabric, axis, pattern).
    """
    pattern = pattern or pattern_of(axis)
    if pattern not in ("ring", "all_to_all"):
        raise SpecError("contention.pattern", f"must be ring or all_to_all, got {pattern!r}")
    fabric = fabric or fabric_for(system, plan.num_gpus)
    if fabric.num_gpus != plan.num_gpus:
        raise SpecError("contention.fabric", f"fabric has {fabric.num_gpus} GPUs, plan needs {plan.num_gpus}")
    return _slowdown(layout_plan(plan), fabric, axis, pattern)
